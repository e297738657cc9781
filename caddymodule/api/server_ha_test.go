package api_test

import (
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
)

// haRows lists /cluster/ha/resources by sid.
func haRows(a *testcaddy.PVE) map[string]map[string]any {
	var rows []map[string]any
	a.OK("GET", "/cluster/ha/resources", nil, &rows)
	out := map[string]map[string]any{}
	for _, r := range rows {
		out[r["sid"].(string)] = r
	}
	return out
}

// waitStatus polls status/current until status is want.
func waitStatus(t *testing.T, a *testcaddy.PVE, node, id, want string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := a.Status(node, id)
		if st["status"] == want {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("VM %s: status %v, want %s", id, st["status"], want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// HA resources are VMs whose run strategy their requested state sets:
// created, read, listed with hastate, power requests become HA requests
// (hastart/hastop), updated, deleted; PVE's texts for what is refused.
func TestHAResources(t *testing.T) {
	a := shared(t)
	node := "kv-node-1-lab-internal"
	var id, upid string
	a.OK("GET", "/cluster/nextid", nil, &id)
	a.OK("POST", "/nodes/"+node+"/qemu", url.Values{"vmid": {id}, "name": {"ha-vm"}, "memory": {"512"}}, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create: %s", exit)
	}
	sid := "vm:" + id
	t.Cleanup(func() {
		a.Do("DELETE", "/cluster/ha/resources/"+sid, nil)
		a.Do("POST", "/nodes/"+node+"/qemu/"+id+"/status/stop", nil)
		a.Do("DELETE", "/nodes/"+node+"/qemu/"+id, url.Values{"purge": {"1"}})
	})
	if ans := a.Do("GET", "/cluster/ha/resources/"+sid, nil); ans.Code != 500 || ans.Message != "no such resource '"+sid+"'\n" {
		t.Fatalf("before: %s", ans.Status)
	}
	var ha []map[string]any
	a.OK("GET", "/cluster/ha/status/current", nil, &ha)
	if len(ha) == 0 || ha[0]["id"] != "quorum" || ha[0]["quorate"] != float64(1) {
		t.Fatalf("status without resources: %v", ha)
	}

	// Created started: KubeVirt starts the stopped VM (run strategy Always).
	ans := a.Do("POST", "/cluster/ha/resources", url.Values{"sid": {id}, "max_restart": {"2"}, "comment": {"database"}})
	if ans.Code != 200 || string(ans.Data) != "null" {
		t.Fatalf("create resource: %s %s", ans.Status, ans.Raw)
	}
	st := waitStatus(t, a, node, id, "running")
	if h, _ := st["ha"].(map[string]any); h["managed"] != float64(1) || h["state"] != "started" {
		t.Fatalf("status/current ha: %v", st["ha"])
	}
	row := haRows(a)[sid]
	if row == nil || row["type"] != "vm" || row["max_restart"] != float64(2) || row["comment"] != "database" || row["state"] != nil || len(row["digest"].(string)) != 40 {
		t.Fatalf("resource row %v", row)
	}
	var one map[string]any
	a.OK("GET", "/cluster/ha/resources/"+id, nil, &one)
	if one["sid"] != sid || one["max_restart"] != float64(2) {
		t.Fatalf("resource %v", one)
	}
	var res []map[string]any
	a.OK("GET", "/cluster/resources", url.Values{"type": {"vm"}}, &res)
	for _, r := range res {
		if r["vmid"] == float64(mustAtoi(t, id)) && r["hastate"] != "started" {
			t.Fatalf("hastate %v", r)
		}
	}
	ha = nil
	a.OK("GET", "/cluster/ha/status/current", nil, &ha)
	var service map[string]any
	for _, r := range ha {
		if r["id"] == "service:"+sid {
			service = r
		}
	}
	if service == nil || service["state"] != "started" || service["request_state"] != "started" || service["node"] != node || ha[1]["type"] != "master" {
		t.Fatalf("HA status %v", ha)
	}

	// A stop is an HA stop request; the state is kept stopped.
	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/status/stop", nil, &upid)
	if !strings.Contains(upid, ":hastop:"+id+":") || a.WaitTask(upid) != "OK" {
		t.Fatalf("HA stop: %s", upid)
	}
	if log := taskLog(t, a, node, upid); !strings.Contains(log, "Requesting HA stop for VM "+id) {
		t.Fatalf("task log %s", log)
	}
	waitStatus(t, a, node, id, "stopped")
	one = nil
	a.OK("GET", "/cluster/ha/resources/"+sid, nil, &one)
	if one["state"] != "stopped" {
		t.Fatalf("state after stop %v", one)
	}
	if ans := a.Do("POST", "/nodes/"+node+"/qemu/"+id+"/status/stop", url.Values{"overrule-shutdown": {"1"}}); ans.Code != 400 || ans.Errors["overrule-shutdown"] == "" {
		t.Fatalf("overrule-shutdown: %s", ans.Status)
	}
	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/status/start", nil, &upid)
	if !strings.Contains(upid, ":hastart:"+id+":") || a.WaitTask(upid) != "OK" {
		t.Fatalf("HA start: %s", upid)
	}
	waitStatus(t, a, node, id, "running")

	// Updates: digest guarded, keys deleted, no groups here.
	digest := haRows(a)[sid]["digest"].(string)
	if ans := a.Do("PUT", "/cluster/ha/resources/"+sid, url.Values{"state": {"disabled"}, "digest": {"0000"}}); ans.Code != 500 || !strings.HasPrefix(ans.Message, "detected modified configuration") {
		t.Fatalf("stale digest: %s", ans.Status)
	}
	if ans := a.Do("PUT", "/cluster/ha/resources/"+sid, url.Values{"group": {"prod"}}); ans.Code != 500 || ans.Message != "HA group 'prod' does not exist\n" {
		t.Fatalf("group: %s", ans.Status)
	}
	a.OK("PUT", "/cluster/ha/resources/"+sid, url.Values{"state": {"disabled"}, "delete": {"comment"}, "digest": {digest}}, nil)
	waitStatus(t, a, node, id, "stopped")
	one = nil
	a.OK("GET", "/cluster/ha/resources/"+sid, nil, &one)
	if one["state"] != "disabled" || one["comment"] != nil {
		t.Fatalf("after update %v", one)
	}

	// PVE's refusals.
	for _, c := range []struct {
		method, path string
		form         url.Values
		code         int
		msg, errKey  string
	}{
		{"POST", "/cluster/ha/resources", url.Values{"sid": {sid}}, 500, "resource ID '" + sid + "' already defined", ""},
		{"POST", "/cluster/ha/resources", url.Values{"sid": {"vm:999999"}}, 500, "resource 'vm:999999' does not exist in cluster", ""},
		{"POST", "/cluster/ha/resources", url.Values{"sid": {"999999"}}, 500, "unable do detect SID from VMID - VM/CT 999999 does not exist", ""},
		{"POST", "/cluster/ha/resources", url.Values{"sid": {"ct:" + id}}, 500, "resource 'ct:" + id + "' does not exist in cluster", ""},
		{"POST", "/cluster/ha/resources", url.Values{"sid": {"vm:x"}}, 500, "invalid VMID", ""},
		{"POST", "/cluster/ha/resources", url.Values{"sid": {id}, "state": {"on"}}, 400, "", "state"},
		{"POST", "/cluster/ha/resources", url.Values{"sid": {id}, "max_restart": {"-1"}}, 400, "", "max_restart"},
		{"POST", "/cluster/ha/resources", url.Values{}, 400, "", "sid"},
		{"GET", "/cluster/ha/resources", url.Values{"type": {"lxc"}}, 400, "", "type"},
		{"DELETE", "/nodes/" + node + "/qemu/" + id, nil, 500, "unable to remove VM " + id + " - used in HA resources and purge parameter not set.", ""},
	} {
		ans := a.Do(c.method, c.path, c.form)
		if ans.Code != c.code || !strings.Contains(ans.Message, c.msg) || (c.errKey != "" && ans.Errors[c.errKey] == "") {
			t.Errorf("%s %s %v: %s %s", c.method, c.path, c.form, ans.Status, ans.Raw)
		}
	}

	// Deleted: no longer managed; the VM stays as it is and starts by request.
	if ans := a.Do("DELETE", "/cluster/ha/resources/"+sid, nil); ans.Code != 200 {
		t.Fatalf("delete resource: %s", ans.Status)
	}
	if ans := a.Do("DELETE", "/cluster/ha/resources/"+sid, nil); ans.Code != 500 || ans.Message != "cannot delete service '"+sid+"', not HA managed!\n" {
		t.Fatalf("delete again: %s", ans.Status)
	}
	st = a.Status(node, id)
	if h, _ := st["ha"].(map[string]any); h["managed"] != float64(0) || st["status"] != "stopped" {
		t.Fatalf("after delete: %v", st)
	}
	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/status/start", nil, &upid)
	if !strings.Contains(upid, ":qmstart:") || a.WaitTask(upid) != "OK" {
		t.Fatalf("start without HA: %s", upid)
	}
	denied(t, asIdentity(t, "auditor@pve"), "POST", "/cluster/ha/resources", url.Values{"sid": {id}}, "Permission check failed (/, Sys.Console)")
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
