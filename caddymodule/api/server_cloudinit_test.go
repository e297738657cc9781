package api_test

import (
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// TestCloudInitEndpoints: GET/PUT …/cloudinit and GET …/cloudinit/dump in
// PVE's shapes, the bpg flow (PUT config ipconfig0, then PUT cloudinit
// with no body) and the privileges PVE asks for.
func TestCloudInitEndpoints(t *testing.T) {
	a := shared(t)
	node := "kv-node-3-lab-internal"
	var id, upid string
	a.OK("GET", "/cluster/nextid", nil, &id)
	a.OK("POST", "/nodes/"+node+"/qemu", url.Values{"vmid": {id}, "name": {"ci-endpoints"}, "net0": {"virtio,bridge=vmbr0"},
		"ide2": {"local-lvm:cloudinit"}, "ciuser": {"ops"}, "cipassword": {"hunter2"}, "ipconfig0": {"ip=dhcp"}, "nameserver": {"1.1.1.1"}}, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create: %s", exit)
	}
	defer func() {
		a.OK("DELETE", "/nodes/"+node+"/qemu/"+id, nil, &upid)
		a.WaitTask(upid)
	}()
	vm := "/nodes/" + node + "/qemu/" + id

	var index []map[string]string
	a.OK("GET", vm, nil, &index)
	if !slices.ContainsFunc(index, func(e map[string]string) bool { return e["subdir"] == "cloudinit" }) {
		t.Fatalf("index %v lacks cloudinit", index)
	}

	var rows []map[string]any
	a.OK("GET", vm+"/cloudinit", nil, &rows)
	want := []map[string]any{{"key": "cipassword", "value": "**********"}, {"key": "ciuser", "value": "ops"}, {"key": "nameserver", "value": "1.1.1.1"}}
	if buf, _ := json.Marshal(rows); string(buf) != mustJSON(t, want) {
		t.Fatalf("cloudinit rows %s, want %s", buf, mustJSON(t, want))
	}

	// bpg: a config change, then PUT cloudinit without a body: data null.
	a.OK("PUT", vm+"/config", url.Values{"ipconfig0": {"ip=10.20.30.40/24,gw=10.20.30.1"}}, nil)
	for i := 0; i < 2; i++ { // regenerating twice is as good as once
		ans := a.Do("PUT", vm+"/cloudinit", nil)
		if ans.Code != 200 || string(ans.Data) != "null" {
			t.Fatalf("PUT cloudinit: %s %s", ans.Status, ans.Raw)
		}
	}
	var network, user, meta string
	a.OK("GET", vm+"/cloudinit/dump", url.Values{"type": {"network"}}, &network)
	if !strings.Contains(network, `addresses: ["10.20.30.40/24"]`) || !strings.Contains(network, `via: "10.20.30.1"`) {
		t.Fatalf("network dump:\n%s", network)
	}
	a.OK("GET", vm+"/cloudinit/dump", url.Values{"type": {"user"}}, &user)
	if !strings.Contains(user, `user: "ops"`) || !strings.Contains(user, `password: "hunter2"`) {
		t.Fatalf("user dump for root:\n%s", user)
	}
	a.OK("GET", vm+"/cloudinit/dump", url.Values{"type": {"meta"}}, &meta)
	var md map[string]string
	if err := json.Unmarshal([]byte(meta), &md); err != nil || len(md["instance-id"]) != 36 || md["local-hostname"] != "ci-endpoints" {
		t.Fatalf("meta dump %q", meta)
	}
	for _, bad := range []url.Values{nil, {"type": {"vendor"}}} {
		if ans := a.Do("GET", vm+"/cloudinit/dump", bad); ans.Code != 400 || ans.Errors["type"] == "" {
			t.Fatalf("dump type %v: %s %s", bad, ans.Status, ans.Raw)
		}
	}
	if ans := a.Do("PUT", vm+"/cloudinit", url.Values{"force": {"1"}}); ans.Code != 400 || ans.Errors["force"] == "" {
		t.Fatalf("PUT cloudinit with an unknown parameter: %s %s", ans.Status, ans.Raw)
	}
	if ans := a.Do("PUT", "/nodes/"+node+"/qemu/99999/cloudinit", nil); ans.Code != 500 || !strings.Contains(ans.Message, "does not exist") {
		t.Fatalf("PUT cloudinit on a missing VM: %s", ans.Status)
	}

	// The password leaves the drive with the key.
	a.OK("PUT", vm+"/config", url.Values{"delete": {"cipassword"}}, nil)
	a.OK("PUT", vm+"/cloudinit", nil, nil)
	a.OK("GET", vm+"/cloudinit/dump", url.Values{"type": {"user"}}, &user)
	if strings.Contains(user, "password") {
		t.Fatalf("user dump after delete=cipassword:\n%s", user)
	}

	// PVE: without a cloud-init drive PUT does nothing and answers null.
	var plain string
	a.OK("GET", "/cluster/nextid", nil, &plain)
	a.OK("POST", "/nodes/"+node+"/qemu", url.Values{"vmid": {plain}, "name": {"no-ci"}, "ciuser": {"ops"}}, &upid)
	a.WaitTask(upid)
	a.OK("PUT", "/nodes/"+node+"/qemu/"+plain+"/cloudinit", nil, nil)
	a.OK("DELETE", "/nodes/"+node+"/qemu/"+plain, nil, &upid)
	a.WaitTask(upid)
}

// TestCloudInitPrivileges: GET needs VM.Audit, PUT VM.Config.Cloudinit;
// the password shows in a dump only to those who may change it.
func TestCloudInitPrivileges(t *testing.T) {
	admin := asIdentity(t, "admin@pve")
	node := "kv-node-2-lab-internal"
	var id, upid string
	admin.OK("GET", "/cluster/nextid", nil, &id)
	admin.OK("POST", "/nodes/"+node+"/qemu", url.Values{"vmid": {id}, "name": {"ci-perms"}, "net0": {"virtio,bridge=vmbr0"},
		"ide2": {"local-lvm:cloudinit"}, "ciuser": {"ops"}, "cipassword": {"hunter2"}}, &upid)
	if exit := admin.WaitTask(upid); exit != "OK" {
		t.Fatalf("create: %s", exit)
	}
	defer func() {
		admin.OK("DELETE", "/nodes/"+node+"/qemu/"+id, nil, &upid)
		admin.WaitTask(upid)
	}()
	vm := "/nodes/" + node + "/qemu/" + id

	auditor := asIdentity(t, "auditor@pve")
	var rows []map[string]any
	auditor.OK("GET", vm+"/cloudinit", nil, &rows)
	var user string
	auditor.OK("GET", vm+"/cloudinit/dump", url.Values{"type": {"user"}}, &user)
	if !strings.Contains(user, `password: "**********"`) || strings.Contains(user, "hunter2") {
		t.Fatalf("user dump for an auditor:\n%s", user)
	}
	denied(t, auditor, "PUT", vm+"/cloudinit", nil, "Permission check failed (/vms/"+id+", VM.Config.Cloudinit)")
	vmuser := asIdentity(t, "vmuser@pve")
	denied(t, vmuser, "GET", vm+"/cloudinit", nil, "Permission check failed (/vms/"+id+", VM.Audit)")
	denied(t, vmuser, "GET", vm+"/cloudinit/dump", url.Values{"type": {"user"}}, "Permission check failed (/vms/"+id+", VM.Audit)")

	admin.OK("PUT", vm+"/cloudinit", nil, nil)
	admin.OK("GET", vm+"/cloudinit/dump", url.Values{"type": {"user"}}, &user)
	if !strings.Contains(user, `password: "hunter2"`) {
		t.Fatalf("user dump for an administrator:\n%s", user)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	buf, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf)
}
