package api_test

import (
	"net/url"
	"strings"
	"testing"
)

func TestLifecycleCreateStartStopDelete(t *testing.T) {
	a := shared(t)
	var nodes []map[string]any
	a.OK("GET", "/nodes", nil, &nodes)
	node := nodes[1]["node"].(string)
	var id string
	a.OK("GET", "/cluster/nextid", nil, &id)

	var upid string
	a.OK("POST", "/nodes/"+node+"/qemu", url.Values{
		"vmid": {id}, "name": {"life-test"}, "cores": {"2"}, "memory": {"1024"},
		"net0": {"virtio,bridge=vmbr0"}, "scsi0": {"local-lvm:8,iothread=1"}, "ostype": {"l26"}, "tablet": {"0"},
	}, &upid)
	if !strings.Contains(upid, ":qmcreate:"+id+":root@pam!ci:") {
		t.Fatalf("create UPID %q", upid)
	}
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create task: %s", exit)
	}

	var cfg map[string]any
	a.OK("GET", "/nodes/"+node+"/qemu/"+id+"/config", nil, &cfg)
	if cfg["name"] != "life-test" || cfg["memory"] != "1024" || cfg["cores"] != float64(2) || cfg["tablet"] != float64(0) {
		t.Fatalf("config %v", cfg)
	}
	if net0, _ := cfg["net0"].(string); !strings.HasPrefix(net0, "virtio=BC:24:11:") || !strings.HasSuffix(net0, ",bridge=vmbr0") {
		t.Fatalf("net0 %q", cfg["net0"])
	}
	if cfg["scsi0"] != "local-lvm:vm-"+id+"-disk-0,iothread=1,size=8G" {
		t.Fatalf("scsi0 %q", cfg["scsi0"])
	}

	st := a.Status(node, id)
	if st["status"] != "stopped" || st["name"] != "life-test" || st["cpus"] != float64(2) || st["maxmem"] != float64(1<<30) {
		t.Fatalf("status %v", st)
	}
	for _, k := range []string{"template", "lock", "pid"} {
		if _, has := st[k]; has {
			t.Fatalf("%s must be absent on a stopped plain VM: %v", k, st)
		}
	}

	// Same vmid again: PVE's "already exists".
	dup := a.Do("POST", "/nodes/"+node+"/qemu", url.Values{"vmid": {id}})
	if dup.Code != 500 || !strings.Contains(dup.Message, "already exists") {
		t.Fatalf("duplicate create: %s %s", dup.Status, dup.Raw)
	}

	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/status/start", nil, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("start task: %s", exit)
	}
	st = a.Status(node, id)
	if st["status"] != "running" || st["qmpstatus"] != "running" || st["pid"] == nil {
		t.Fatalf("after start: %v", st)
	}
	// Starting a running VM fails the task, as on PVE.
	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/status/start", nil, &upid)
	if exit := a.WaitTask(upid); exit != "VM "+id+" already running" {
		t.Fatalf("second start: %q", exit)
	}
	var log []map[string]any
	ans := a.Do("GET", "/nodes/"+node+"/tasks/"+upid+"/log", nil)
	if ans.Total == nil || *ans.Total < 2 {
		t.Fatalf("log total %v", ans.Total)
	}
	a.OK("GET", "/nodes/"+node+"/tasks/"+upid+"/log", nil, &log)
	if last := log[len(log)-1]["t"]; last != "TASK ERROR: VM "+id+" already running" {
		t.Fatalf("last log line %v", last)
	}

	del := a.Do("DELETE", "/nodes/"+node+"/qemu/"+id, nil)
	if del.Code != 500 || !strings.Contains(del.Message, "is running - destroy failed") {
		t.Fatalf("delete running: %s", del.Status)
	}

	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/status/shutdown", url.Values{"timeout": {"30"}}, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("shutdown: %s", exit)
	}
	if st := a.Status(node, id); st["status"] != "stopped" {
		t.Fatalf("after shutdown %v", st)
	}

	a.OK("DELETE", "/nodes/"+node+"/qemu/"+id, url.Values{"purge": {"1"}, "destroy-unreferenced-disks": {"1"}}, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("delete: %s", exit)
	}
	gone := a.Do("GET", "/nodes/"+node+"/qemu/"+id+"/status/current", nil)
	if gone.Code != 500 || !strings.Contains(gone.Message, "does not exist") {
		t.Fatalf("after delete status/current must fail: %s", gone.Status)
	}
	// Tasks stay answerable after the VM is gone.
	var ts map[string]any
	a.OK("GET", "/nodes/"+node+"/tasks/"+upid+"/status", nil, &ts)
	if ts["exitstatus"] != "OK" || ts["type"] != "qmdestroy" {
		t.Fatalf("task after delete %v", ts)
	}
	var list []map[string]any
	a.OK("GET", "/nodes/"+node+"/tasks", url.Values{"vmid": {id}}, &list)
	if len(list) < 5 {
		t.Fatalf("task list for %s has %d rows", id, len(list))
	}
}

func TestBadCreateChangesNothing(t *testing.T) {
	a := shared(t)
	var nodes []map[string]any
	a.OK("GET", "/nodes", nil, &nodes)
	node := nodes[0]["node"].(string)
	before := a.Do("GET", "/cluster/resources", url.Values{"type": {"vm"}})
	for _, form := range []url.Values{
		{"vmid": {"7001"}, "net0": {"bogus-model,bridge=vmbr0"}},
		{"vmid": {"7001"}, "scsi0": {"nostorage:10"}},
		{"vmid": {"7001"}, "cores": {"-1"}},
		{"vmid": {"7001"}, "frob": {"1"}},
		{"vmid": {"12"}},
		{"name": {"novmid"}},
	} {
		ans := a.Do("POST", "/nodes/"+node+"/qemu", form)
		if ans.Code != 400 || len(ans.Errors) == 0 {
			t.Errorf("%v: want 400 with errors, got %s %s", form, ans.Status, ans.Raw)
		}
	}
	after := a.Do("GET", "/cluster/resources", url.Values{"type": {"vm"}})
	if len(before.Data) != len(after.Data) {
		t.Fatal("a refused create changed the cluster")
	}
}

// TestPowerActionsAndPools: reboot, reset, suspend/resume, suspend to disk
// refused; a VM created with pool= lands in that namespace and pool.
func TestPowerActionsAndPools(t *testing.T) {
	a := shared(t)
	node := "kv-node-2-lab-internal"
	var id, upid string
	a.OK("GET", "/cluster/nextid", nil, &id)
	a.OK("POST", "/nodes/"+node+"/qemu", url.Values{"vmid": {id}, "name": {"power"}, "pool": {"lab"}, "start": {"1"}}, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create+start: %s", exit)
	}
	var pools []map[string]any
	a.OK("GET", "/pools", url.Values{"poolid": {"lab"}}, &pools)
	found := false
	for _, m := range pools[0]["members"].([]any) {
		found = found || m.(map[string]any)["id"] == "qemu/"+id
	}
	if !found {
		t.Fatalf("pool lab members %v", pools)
	}
	if ans := a.Do("POST", "/nodes/"+node+"/qemu", url.Values{"vmid": {"9999"}, "pool": {"nope"}}); ans.Code != 403 || strings.TrimSpace(ans.Message) != "Permission check failed (pool 'nope' does not exist)" {
		t.Fatalf("unknown pool: %s", ans.Status)
	}
	for _, step := range []struct{ action, qmp string }{{"reboot", "running"}, {"reset", "running"}, {"suspend", "paused"}, {"resume", "running"}} {
		a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/status/"+step.action, nil, &upid)
		if exit := a.WaitTask(upid); exit != "OK" {
			t.Fatalf("%s: %s", step.action, exit)
		}
		if st := a.Status(node, id); st["status"] != "running" || st["qmpstatus"] != step.qmp {
			t.Fatalf("after %s: %v", step.action, st)
		}
		// A paused guest cannot shut down: PVE refuses unless forceStop.
		if step.action == "suspend" {
			if ans := a.Do("POST", "/nodes/"+node+"/qemu/"+id+"/status/shutdown", nil); ans.Code != 500 || ans.Status != "500 VM is paused - cannot shutdown" {
				t.Fatalf("shutdown of a paused VM: %s", ans.Status)
			}
		}
	}
	if ans := a.Do("POST", "/nodes/"+node+"/qemu/"+id+"/status/suspend", url.Values{"todisk": {"1"}}); ans.Code != 501 || !strings.Contains(ans.Message, "RAM state") {
		t.Fatalf("todisk: %s", ans.Status)
	}
	if ans := a.Do("POST", "/nodes/"+node+"/qemu/"+id+"/status/frobnicate", nil); ans.Code != 501 {
		t.Fatalf("unknown action: %s", ans.Status)
	}
	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/status/stop", nil, &upid)
	a.WaitTask(upid)
	// Shutting down a stopped VM is a task that ends OK, as on PVE.
	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/status/shutdown", nil, &upid)
	if exit := a.WaitTask(upid); exit != "OK" || !strings.Contains(upid, ":qmshutdown:"+id+":") {
		t.Fatalf("shutdown of a stopped VM: %s %s", upid, exit)
	}
	for _, action := range []string{"reboot", "reset", "suspend", "resume"} {
		if ans := a.Do("POST", "/nodes/"+node+"/qemu/"+id+"/status/"+action, nil); ans.Code != 500 || ans.Message != "VM "+id+" not running\n" {
			t.Fatalf("%s on a stopped VM: %s %q", action, ans.Status, ans.Message)
		}
	}
	a.OK("DELETE", "/nodes/"+node+"/qemu/"+id, nil, &upid)
	a.WaitTask(upid)
}
