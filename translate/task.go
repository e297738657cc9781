package translate

import (
	"strconv"
	"strings"
)

// Task types as passed by qemu-server's API handlers to fork_worker; they
// appear in UPIDs and task listings, and clients filter on them.
const (
	TaskCreate      = "qmcreate"      // POST /nodes/{node}/qemu
	TaskRestore     = "qmrestore"     // POST /nodes/{node}/qemu with archive
	TaskStart       = "qmstart"       // POST …/status/start
	TaskStop        = "qmstop"        // POST …/status/stop
	TaskShutdown    = "qmshutdown"    // POST …/status/shutdown
	TaskReboot      = "qmreboot"      // POST …/status/reboot
	TaskReset       = "qmreset"       // POST …/status/reset
	TaskSuspend     = "qmsuspend"     // POST …/status/suspend with todisk=1
	TaskPause       = "qmpause"       // POST …/status/suspend without todisk
	TaskResume      = "qmresume"      // POST …/status/resume
	TaskDestroy     = "qmdestroy"     // DELETE /nodes/{node}/qemu/{vmid}
	TaskConfig      = "qmconfig"      // POST …/config (the async variant)
	TaskClone       = "qmclone"       // POST …/clone; the UPID id is the source vmid
	TaskTemplate    = "qmtemplate"    // POST …/template
	TaskResize      = "resize"        // PUT …/resize
	TaskMove        = "qmmove"        // POST …/move_disk
	TaskMigrate     = "qmigrate"      // POST …/migrate
	TaskSnapshot    = "qmsnapshot"    // POST …/snapshot
	TaskDelSnapshot = "qmdelsnapshot" // DELETE …/snapshot/{snapname}
	TaskRollback    = "qmrollback"    // POST …/snapshot/{snapname}/rollback
	TaskHAStart     = "hastart"       // start of an HA-managed VM
	TaskHAStop      = "hastop"        // stop or shutdown of an HA-managed VM
	// TaskVNCProxy is used by both vncproxy and termproxy in qemu-server.
	TaskVNCProxy = "vncproxy"
)

// ExitOK is the exitstatus of a task that succeeded; bpg, go-proxmox and
// Ansible treat only this value (or a WARNINGS status) as success.
const ExitOK = "OK"

// ExitWarnings returns the exitstatus of a task that succeeded with n
// warnings, "WARNINGS: n", which clients treat as success.
func ExitWarnings(n int) string {
	return "WARNINGS: " + strconv.Itoa(n)
}

// ExitIsError reports whether an exitstatus denotes failure, like
// PVE::UPID::status_is_error: anything but "OK" and "WARNINGS: <n>".
func ExitIsError(exit string) bool {
	return exit != ExitOK && !isWarningsStatus(exit)
}

// isWarningsStatus reports whether exit matches ^WARNINGS: \d+$.
func isWarningsStatus(exit string) bool {
	n, ok := strings.CutPrefix(exit, "WARNINGS: ")
	return ok && n != "" && allDigits(n)
}

// TaskLogEnd returns the last task log line for an exitstatus, from which PVE
// derives the exitstatus again: "TASK OK", "TASK WARNINGS: <n>" or
// "TASK ERROR: <msg>". A log line is one line, so an error message is cut to
// its text with surrounding white space trimmed and inner line breaks turned
// into spaces; an empty message becomes "unknown error" because PVE's status
// parser needs a non-empty one.
func TaskLogEnd(exit string) string {
	if exit == ExitOK {
		return "TASK OK"
	}
	if isWarningsStatus(exit) {
		return "TASK " + exit
	}
	msg := strings.TrimSpace(exit)
	msg = strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(msg)
	if msg == "" {
		msg = "unknown error"
	}
	return "TASK ERROR: " + msg
}
