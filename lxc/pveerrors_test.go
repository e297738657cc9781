package lxc

import (
	"errors"
	"fmt"
	"testing"

	proxmox "github.com/luthermonson/go-proxmox"
)

func apiErr(code int, msg string) error {
	return &proxmox.APIError{StatusCode: code, Status: fmt.Sprintf("%d %s", code, msg), Message: msg}
}

func TestPVEErrors(t *testing.T) {
	perm9 := apiErr(403, "Permission check failed (/vms/200, VM.GuestAgent.Audit|VM.GuestAgent.Unrestricted)")
	if !isPermission(perm9) || isPermission(apiErr(500, "boom")) || !isPermission(apiErr(401, "No ticket")) {
		t.Fatal("isPermission")
	}
	if p, v := missingPrivilege(fmt.Errorf("reading: %w", perm9)); p != "/vms/200" || v != "VM.GuestAgent.Audit|VM.GuestAgent.Unrestricted" {
		t.Fatalf("privilege %q %q", p, v)
	}
	if p, v := missingPrivilege(apiErr(401, "No ticket")); p != "" || v != "" {
		t.Fatal("401 names no privilege")
	}
	for err, want := range map[error]string{
		errors.New("start task failed: CT is locked (backup)"):         "backup",
		errors.New("stop task failed: VM is locked (snapshot-delete)"): "snapshot-delete",
		apiErr(500, "VM is locked (migrate)"):                          "migrate",
		errors.New("start task failed: CT 100 already running"):        "",
	} {
		if got := lockOf(err); got != want {
			t.Errorf("lockOf(%v) = %q", err, got)
		}
	}
	if !isGone(apiErr(500, "Configuration file 'nodes/pve1/lxc/100.conf' does not exist")) || isGone(apiErr(500, "VM 100 not running")) {
		t.Fatal("isGone")
	}
	if !isAlreadyRunning(errors.New("start task failed: VM 200 already running")) || !isNotRunning(apiErr(500, "CT 100 not running")) {
		t.Fatal("running texts")
	}
}

func TestIndexRows(t *testing.T) {
	one, zero := pveBool(true), pveBool(false)
	prev := map[int]Resource{100: {VMID: 100, Name: "web", Status: "running"}, 9000: {VMID: 9000, Name: "tmpl", Template: true}}
	rows := []resourceRow{
		{VMID: "100", Type: "lxc", Node: "pve1", Status: "unknown", Lock: "backup", HAState: "started"},
		{VMID: "9000", Type: "qemu", Node: "pve1", Status: "unknown"},
		{VMID: "200", Type: "qemu", Node: "pve2", Name: "app", Status: "stopped", Template: &zero},
		{VMID: "300", Type: "qemu", Node: "pve2", Name: "base", Status: "stopped", Template: &one},
		{VMID: "101", Type: "lxc", Node: "pve1", Status: "unknown"}, // never seen with a name
		{VMID: "x", Type: "lxc"}, {VMID: "5", Type: "storage"},
	}
	byVMID, byName, _, nodes := indexRows(rows, prev)
	if r := byName["web"]; len(r) != 1 || r[0].VMID != 100 || r[0].Status != "unknown" || r[0].Lock != "backup" || r[0].HAState != "started" {
		t.Fatalf("stale row lost its name: %+v", byName)
	}
	if !byVMID[9000].Template || !byVMID[300].Template || byVMID[200].Template || len(byVMID) != 5 {
		t.Fatalf("templates %+v", byVMID)
	}
	if fmt.Sprint(nodes) != "[pve1 pve2]" {
		t.Fatalf("nodes %v", nodes)
	}
}
