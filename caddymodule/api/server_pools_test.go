package api_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
)

// refused asserts a PVE error answer: the code and a message containing want.
func refused(t *testing.T, a *testcaddy.PVE, method, path string, form url.Values, code int, want string) testcaddy.Answer {
	t.Helper()
	ans := a.Do(method, path, form)
	if ans.Code != code || !strings.Contains(ans.Message, want) {
		t.Fatalf("%s %s %v: got %s %s, want %d %q", method, path, form, ans.Status, ans.Raw, code, want)
	}
	return ans
}

// poolRow reads GET /pools?poolid= (bpg's read), failing unless it
// answers one pool.
func poolRow(t *testing.T, a *testcaddy.PVE, id string) map[string]any {
	t.Helper()
	var rows []map[string]any
	a.OK("GET", "/pools", url.Values{"poolid": {id}}, &rows)
	if len(rows) != 1 || rows[0]["poolid"] != id {
		t.Fatalf("GET /pools?poolid=%s: %v", id, rows)
	}
	return rows[0]
}

// TestPoolLifecycle: a pool is created as a namespace and read back at
// once (bpg reads right after its create), its comment changes, members
// are the VMs of the namespace (listing them again is a no-op, moving or
// removing one is refused), and only an empty pool made through the API
// can be deleted.
func TestPoolLifecycle(t *testing.T) {
	a := shared(t)
	const id = "tf-pool"
	var null any
	a.OK("POST", "/pools", url.Values{"poolid": {id}, "comment": {"made by terraform"}}, &null)
	if null != nil {
		t.Fatalf("create answers %v, want null", null)
	}
	if p := poolRow(t, a, id); p["comment"] != "made by terraform" || len(p["members"].([]any)) != 0 {
		t.Fatalf("new pool %v", p)
	}
	var list []map[string]any
	a.OK("GET", "/pools", nil, &list)
	found := false
	for _, p := range list {
		found = found || p["poolid"] == id && p["comment"] == "made by terraform"
	}
	if !found {
		t.Fatalf("pool list %v lacks %s with its comment", list, id)
	}
	refused(t, a, "POST", "/pools", url.Values{"poolid": {id}}, 500, "create pool failed: pool '"+id+"' already exists")
	refused(t, a, "POST", "/pools", url.Values{"poolid": {"lab"}}, 500, "create pool failed: pool 'lab' already exists")

	// The comment: PUT on both paths; "" removes it.
	a.OK("PUT", "/pools", url.Values{"poolid": {id}, "comment": {"second"}}, nil)
	if p := poolRow(t, a, id); p["comment"] != "second" {
		t.Fatalf("after PUT comment: %v", p)
	}
	var one map[string]any
	a.OK("PUT", "/pools/"+id, url.Values{"comment": {""}}, nil)
	a.OK("GET", "/pools/"+id, nil, &one)
	if _, has := one["comment"]; has {
		t.Fatalf("comment removed, yet %v", one)
	}

	// A VM created into the pool is its member.
	node := "kv-node-1-lab-internal"
	var vmid, upid string
	a.OK("GET", "/cluster/nextid", nil, &vmid)
	a.OK("POST", "/nodes/"+node+"/qemu", url.Values{"vmid": {vmid}, "name": {"pooled"}, "pool": {id}}, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create into the pool: %s", exit)
	}
	members := poolRow(t, a, id)["members"].([]any)
	if len(members) != 1 || members[0].(map[string]any)["id"] != "qemu/"+vmid {
		t.Fatalf("members %v, want qemu/%s", members, vmid)
	}
	// Listing a member again changes nothing and succeeds (bpg's
	// pool_membership create); any move is refused, with allow-move too,
	// and nothing of a refused update is written.
	a.OK("PUT", "/pools", url.Values{"poolid": {id}, "vms": {vmid}}, &null)
	a.OK("PUT", "/pools/"+id, url.Values{"vms": {vmid}, "allow-move": {"1"}}, nil)
	refused(t, a, "PUT", "/pools", url.Values{"poolid": {id}, "vms": {vmid + ",100"}, "comment": {"not written"}}, 500,
		"update pools failed: VM 100 is in pool 'default': moving VMs between pools is not supported (KubeVirt VMs cannot change namespace)")
	refused(t, a, "PUT", "/pools", url.Values{"poolid": {id}, "vms": {"100"}, "allow-move": {"1"}}, 500, "moving VMs between pools is not supported")
	if p := poolRow(t, a, id); p["comment"] != nil {
		t.Fatalf("a refused update wrote its comment: %v", p)
	}
	refused(t, a, "PUT", "/pools", url.Values{"poolid": {id}, "vms": {vmid}, "delete": {"1"}}, 500,
		"update pools failed: VM "+vmid+" cannot leave pool '"+id+"': removing VMs from pools is not supported (KubeVirt VMs cannot change namespace)")
	refused(t, a, "PUT", "/pools", url.Values{"poolid": {id}, "vms": {"101"}, "delete": {"1"}}, 500, "update pools failed: VM 101 is not a pool member")
	refused(t, a, "PUT", "/pools", url.Values{"poolid": {id}, "vms": {"999999"}}, 500, "cannot add VM 999999 to pool '"+id+"': no such VM")
	refused(t, a, "PUT", "/pools", url.Values{"poolid": {id}, "storage": {"local-lvm"}}, 500, "cannot add storage 'local-lvm' to pool '"+id+"': storages are cluster-wide StorageClasses")
	refused(t, a, "PUT", "/pools", url.Values{"poolid": {id}, "storage": {"local-lvm"}, "delete": {"1"}}, 500, "update pools failed: Storage 'local-lvm' is not a pool member")
	refused(t, a, "PUT", "/pools", url.Values{"poolid": {"nope"}, "comment": {"x"}}, 500, "update pools failed: pool 'nope' does not exist")

	// Only an empty pool goes.
	refused(t, a, "DELETE", "/pools", url.Values{"poolid": {id}}, 500, "delete pool failed: pool '"+id+"' is not empty (contains VM "+vmid+")")
	a.OK("DELETE", "/nodes/"+node+"/qemu/"+vmid, nil, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("destroy: %s", exit)
	}
	a.OK("DELETE", "/pools/"+id, nil, &null)
	refused(t, a, "GET", "/pools", url.Values{"poolid": {id}}, 500, "pool '"+id+"' does not exist")
	refused(t, a, "DELETE", "/pools", url.Values{"poolid": {id}}, 500, "delete pool failed: pool '"+id+"' does not exist")
	a.OK("GET", "/pools", nil, &list)
	for _, p := range list {
		if p["poolid"] == id {
			t.Fatalf("deleted pool still listed: %v", list)
		}
	}
	// Namespaces made otherwise are never deleted through the API; lab
	// also holds a VM.
	refused(t, a, "DELETE", "/pools", url.Values{"poolid": {"lab"}}, 500, "delete pool failed: pool 'lab' is not empty (contains VM ")
}

// TestPoolWritesRefuseBadInput: PVE's parameter errors, plus the ids that
// PVE takes but a namespace cannot be.
func TestPoolWritesRefuseBadInput(t *testing.T) {
	a := shared(t)
	for _, c := range []struct {
		form url.Values
		want string
	}{
		{url.Values{}, "property is missing and it is not optional"},
		{url.Values{"poolid": {"bad name"}}, "invalid format - pool name 'bad name' contains invalid characters"},
		{url.Values{"poolid": {"a/b/c/d"}}, "invalid format - pool name 'a/b/c/d' nested too deeply (max levels = 3)"},
		{url.Values{"poolid": {"Team_A"}}, "invalid format - pool name 'Team_A' is not a Kubernetes namespace name"},
		{url.Values{"poolid": {"team/sub"}}, "invalid format - pool name 'team/sub' is nested"},
		{url.Values{"poolid": {"x"}, "members": {"1"}}, "property is not defined in schema"},
	} {
		ans := refused(t, a, "POST", "/pools", c.form, 400, "Parameter verification failed.")
		var got string
		for _, v := range ans.Errors {
			got += v
		}
		if !strings.Contains(got, c.want) {
			t.Errorf("POST /pools %v: errors %v, want %q", c.form, ans.Errors, c.want)
		}
	}
	refused(t, a, "POST", "/pools", url.Values{"poolid": {"1st"}}, 500, "create pool failed: pool name must start with a letter")
	ans := refused(t, a, "PUT", "/pools", url.Values{"poolid": {"lab"}, "vms": {"12"}}, 400, "Parameter verification failed.")
	if !strings.Contains(ans.Errors["vms"], "value does not look like a valid VM ID") {
		t.Fatalf("bad vms: %v", ans.Errors)
	}
	ans = refused(t, a, "PUT", "/pools", url.Values{"poolid": {"lab"}, "storage": {"1x"}}, 400, "Parameter verification failed.")
	if !strings.Contains(ans.Errors["storage"], "storage ID '1x' contains illegal characters") {
		t.Fatalf("bad storage: %v", ans.Errors)
	}
}

// TestPoolWritesNeedPoolAllocate: Pool.Allocate on /pool/<id>, as PVE.
func TestPoolWritesNeedPoolAllocate(t *testing.T) {
	auditor, pooladmin, admin := asIdentity(t, "auditor@pve"), asIdentity(t, "pooladmin@pve"), asIdentity(t, "admin@pve")
	denied(t, auditor, "POST", "/pools", url.Values{"poolid": {"audited"}}, "Permission check failed (/pool/audited, Pool.Allocate)")
	// PVEVMAdmin + PVEPoolUser on the pool: may use it, not change it.
	denied(t, pooladmin, "PUT", "/pools", url.Values{"poolid": {"lab"}, "comment": {"mine"}}, "Permission check failed (/pool/lab, Pool.Allocate)")
	denied(t, pooladmin, "DELETE", "/pools/lab", nil, "Permission check failed (/pool/lab, Pool.Allocate)")
	admin.OK("POST", "/pools", url.Values{"poolid": {"by-admin"}}, nil)
	admin.OK("DELETE", "/pools", url.Values{"poolid": {"by-admin"}}, nil)
}

// TestPoolWritesWithFixedNamespaces: with a `namespace` list the pools are
// that list; they can be read and their VMs listed, nothing else.
func TestPoolWritesWithFixedNamespaces(t *testing.T) {
	shared(t)
	a := &testcaddy.PVE{T: t, Base: fmt.Sprintf("https://localhost:%d", fixedPort), C: testcaddy.Client(), Auth: testcaddy.TokenAuth(testToken, testSecret)}
	refused(t, a, "POST", "/pools", url.Values{"poolid": {"extra"}}, 500, "create pool failed: cannot create pool 'extra': pools are Kubernetes namespaces, and this API serves only the namespaces of its `namespace` option")
	refused(t, a, "POST", "/pools", url.Values{"poolid": {"lab"}}, 500, "create pool failed: pool 'lab' already exists")
	refused(t, a, "DELETE", "/pools", url.Values{"poolid": {"lab"}}, 500, "delete pool failed: cannot delete pool 'lab'")
	refused(t, a, "PUT", "/pools", url.Values{"poolid": {"lab"}, "comment": {"x"}}, 500, "update pools failed: cannot set the comment of pool 'lab'")
	// What bpg sends to a pool it imported: the comment it read ("") and
	// the VMs already in it.
	a.OK("PUT", "/pools", url.Values{"poolid": {"default"}, "comment": {""}, "vms": {"100,101"}}, nil)
}
