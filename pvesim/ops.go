package pvesim

import (
	"fmt"
	"time"
)

// SetLock sets vmid's config lock ("backup", "migrate", "snapshot",
// "snapshot-delete", "rollback", "clone", "create", "disk", "mounted",
// "suspended"; "" clears it). While it is set, start, stop, shutdown and
// suspend tasks fail as PVE's check_lock makes them ("CT is locked
// (backup)"), and /cluster/resources shows it.
func (s *Sim) SetLock(vmid int, lock string) {
	s.withGuest(vmid, func(g *guest) { g.lock = lock })
}

// Lock is vmid's config lock.
func (s *Sim) Lock(vmid int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.guests[vmid]; g != nil {
		return g.lock
	}
	return ""
}

// BeginBackup starts a vzdump of vmid: the config is locked "backup",
// and a stopped VM is started paused ("prelaunch") so that QEMU can read
// its disks (PVE/VZDump/QemuServer.pm enforce_vm_running_for_backup).
func (s *Sim) BeginBackup(vmid int) {
	s.withGuest(vmid, func(g *guest) {
		g.lock = "backup"
		if g.spec.Kind == "qemu" && g.status == "stopped" {
			g.status, g.qmp, g.since = "running", "prelaunch", time.Now()
			g.gen++
		}
	})
}

// EndBackup ends the backup: the lock goes, and a VM still in prelaunch
// is stopped again; one that was started meanwhile keeps running
// (restore_vm_power_state).
func (s *Sim) EndBackup(vmid int) {
	s.withGuest(vmid, func(g *guest) {
		if g.lock == "backup" {
			g.lock = ""
		}
		if g.qmp == "prelaunch" {
			g.stopLocked()
		}
	})
}

// MigrateGuest moves vmid's config (and, for a running guest, the guest)
// to node, as a finished migration does: API calls on the old node then
// answer "Configuration file ... does not exist".
func (s *Sim) MigrateGuest(vmid int, node string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.guests[vmid]
	if g == nil {
		return fmt.Errorf("pvesim: no guest %d", vmid)
	}
	if !s.hasNode(node) {
		return fmt.Errorf("pvesim: no node %q", node)
	}
	g.spec.Node = node
	return nil
}

// Node is the node vmid's config is on.
func (s *Sim) Node(vmid int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.guests[vmid]; g != nil {
		return g.spec.Node
	}
	return ""
}

// SetNodeStale makes /cluster/resources report the guests of node as
// PVE does when the node's pvestatd stalls or the node drops out: status
// "unknown", and no name, template flag or usage (pve-manager
// PVE/API2Tools.pm extract_vm_stats, which reads those from RRD data).
// The node's own API still answers.
func (s *Sim) SetNodeStale(node string, stale bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stale[node] = stale
}

// SetPrivileges grants the API token privs on path, as an ACL entry
// does; grants propagate to sub-paths (/vms covers /vms/100). The first
// call restricts the token, which until then may do anything (like
// root@pam). Calls PVE checks answer 403 "Permission check failed (path,
// privilege)" without them, and /cluster/resources leaves out guests the
// token lacks VM.Audit on.
func (s *Sim) SetPrivileges(path string, privs ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.acl == nil {
		s.acl = map[string][]string{}
	}
	s.acl[path] = append(s.acl[path], privs...)
}
