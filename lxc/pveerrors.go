package lxc

import (
	"errors"
	"regexp"
	"strings"

	proxmox "github.com/luthermonson/go-proxmox"
)

// PVE answers most refusals with a 500 or a failed task whose text is the
// only signal; these recognise the ones the wake machinery acts on. Each
// pattern is PVE's own wording (sources in the comments).

// isAlreadyRunning: "CT 100 already running" (pve-container), "VM 100
// already running" (qemu-server vm_start).
func isAlreadyRunning(err error) bool {
	return err != nil && strings.Contains(err.Error(), "already running")
}

// isNotRunning: "CT 100 not running" (pve-container); qemu-server ends a
// stop of a stopped VM OK.
func isNotRunning(err error) bool {
	return err != nil && strings.Contains(err.Error(), "not running")
}

// lockRE matches PVE's check_lock: "CT is locked (backup)", "VM is locked
// (snapshot)" (pve-guest-common AbstractConfig.pm).
var lockRE = regexp.MustCompile(`(?:CT|VM) is locked \(([a-z-]+)\)`)

// lockOf returns the lock an error names, or "".
func lockOf(err error) string {
	if err == nil {
		return ""
	}
	if m := lockRE.FindStringSubmatch(err.Error()); m != nil {
		return m[1]
	}
	return ""
}

// isPermission reports a 401 or 403: a configuration error (the token's
// privileges or secret), which no retry mends.
func isPermission(err error) bool {
	return proxmox.IsNotAuthorized(err)
}

// permRE matches raise_perm_exc: "Permission check failed (/vms/100,
// VM.GuestAgent.Audit|VM.GuestAgent.Unrestricted)" (pve-common
// PVE/Exception.pm, pve-access-control PVE/RPCEnvironment.pm).
var permRE = regexp.MustCompile(`Permission check failed \(([^,)]+), ([^)]+)\)`)

// missingPrivilege returns the ACL path and the privilege (alternatives
// joined by |) a 403 names; both empty for a 401 or another text.
func missingPrivilege(err error) (path, priv string) {
	var ae *proxmox.APIError
	text := ""
	if errors.As(err, &ae) {
		text = ae.Status + " " + ae.Message
	} else if err != nil {
		text = err.Error()
	}
	if m := permRE.FindStringSubmatch(text); m != nil {
		return m[1], m[2]
	}
	return "", ""
}

// isGone reports PVE's answer for a guest whose config is not on the
// node asked: "Configuration file 'nodes/pve1/lxc/100.conf' does not
// exist" (pve-guest-common), after a migration.
func isGone(err error) bool {
	return err != nil && proxmox.IsNotFound(err)
}
