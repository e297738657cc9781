package api_test

import (
	"net/url"
	"strings"
	"testing"
	"time"
)

// DELETE …/tasks/{upid} stops a running task as PVE stops a worker: the
// task ends at once with "received interrupt", and a clone stopped so
// leaves no half-made VM. An ended task stays as it ended; an unknown one
// is PVE's "no such task".
func TestStopTask(t *testing.T) {
	a := shared(t)
	node := nodeNames(t, a)[0]
	src := newMigrateVM(t, a, node, "stop-task-src", "local-lvm")
	var newID, upid string
	a.OK("GET", "/cluster/nextid", nil, &newID)
	t.Cleanup(func() {
		for _, vmid := range []string{newID, src} {
			a.Do("DELETE", "/nodes/"+node+"/qemu/"+vmid, url.Values{"purge": {"1"}})
		}
	})
	a.OK("POST", "/nodes/"+node+"/qemu/"+src+"/clone", url.Values{"newid": {newID}, "full": {"1"}}, &upid)
	a.OK("DELETE", "/nodes/"+node+"/tasks/"+upid, nil, nil)
	if exit := a.WaitTask(upid); exit != "received interrupt" {
		t.Fatalf("stopped clone: %s", exit)
	}
	if log := taskLog(t, a, node, upid); !strings.HasSuffix(log, "TASK ERROR: received interrupt") || !strings.Contains(log, "removing the partly cloned VM") {
		t.Fatalf("stopped clone's log: %q", log)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got := a.Do("GET", "/nodes/"+node+"/qemu/"+newID+"/config", nil)
		if got.Code == 500 && strings.Contains(got.Message, "does not exist") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stopped clone %s is still there: %s", newID, got.Status)
		}
	}
	// Ended: stopping again changes nothing.
	a.OK("DELETE", "/nodes/"+node+"/tasks/"+upid, nil, nil)
	if exit := a.WaitTask(upid); exit != "received interrupt" {
		t.Fatalf("after a second stop: %s", exit)
	}
	bogus := strings.Replace(upid, ":qmclone:", ":qmstart:", 1)
	if ans := a.Do("DELETE", "/nodes/"+node+"/tasks/"+bogus, nil); ans.Code != 400 || ans.Errors["upid"] != "no such task\n" && ans.Errors["upid"] != "no such task" {
		t.Fatalf("stopping an unknown task: %s %s", ans.Status, ans.Raw)
	}
}

// Someone else's task takes Sys.Modify on its node to stop (pve-manager's
// stop_task); seeing it (Sys.Audit) is not enough.
func TestStopTaskOfAnother(t *testing.T) {
	admin, auditor := asIdentity(t, "admin@pve"), asIdentity(t, "auditor@pve")
	node := nodeNames(t, admin)[0]
	src := newMigrateVM(t, admin, node, "stop-other-src", "local-lvm")
	var newID, upid string
	admin.OK("GET", "/cluster/nextid", nil, &newID)
	t.Cleanup(func() {
		for _, vmid := range []string{newID, src} {
			admin.Do("DELETE", "/nodes/"+node+"/qemu/"+vmid, url.Values{"purge": {"1"}})
		}
	})
	admin.OK("POST", "/nodes/"+node+"/qemu/"+src+"/clone", url.Values{"newid": {newID}, "full": {"1"}}, &upid)
	if ans := auditor.Do("DELETE", "/nodes/"+node+"/tasks/"+upid, nil); ans.Code != 403 || ans.Message != "Permission check failed (/nodes/"+node+", Sys.Modify)\n" {
		t.Fatalf("an auditor stopping admin's task: %s %q", ans.Status, ans.Message)
	}
	admin.OK("DELETE", "/nodes/"+node+"/tasks/"+upid, nil, nil)
	if exit := admin.WaitTask(upid); exit != "received interrupt" {
		t.Fatalf("stopped by its owner: %s", exit)
	}
}
