package api_test

import (
	"fmt"
	"net/url"
	"slices"
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

// poolMembers lists a pool's member ids ("qemu/100", "storage/<node>/<s>").
func poolMembers(t *testing.T, a *testcaddy.PVE, id string) []string {
	t.Helper()
	var out []string
	for _, m := range poolRow(t, a, id)["members"].([]any) {
		out = append(out, m.(map[string]any)["id"].(string))
	}
	return out
}

// vmPool is the pool /cluster/resources shows on a VM's row ("" for none).
func vmPool(t *testing.T, a *testcaddy.PVE, vmid string) string {
	t.Helper()
	var rows []map[string]any
	a.OK("GET", "/cluster/resources", url.Values{"type": {"vm"}}, &rows)
	for _, r := range rows {
		if fmt.Sprintf("%.0f", r["vmid"]) == vmid {
			p, _ := r["pool"].(string)
			return p
		}
	}
	t.Fatalf("no VM %s", vmid)
	return ""
}

// createVM creates a VM (extra parameters in form) and waits for its task.
func createVM(t *testing.T, a *testcaddy.PVE, form url.Values) string {
	t.Helper()
	var vmid, upid string
	a.OK("GET", "/cluster/nextid", nil, &vmid)
	form.Set("vmid", vmid)
	a.OK("POST", "/nodes/"+a.FirstNode()+"/qemu", form, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create %v: %s", form, exit)
	}
	return vmid
}

// destroyVM deletes a VM and waits for its task.
func destroyVM(t *testing.T, a *testcaddy.PVE, vmid string) {
	t.Helper()
	var upid string
	a.OK("DELETE", "/nodes/"+nodeOf(t, a, vmid)+"/qemu/"+vmid, nil, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("destroy %s: %s", vmid, exit)
	}
}

// TestPoolLifecycle: a pool is a record, read back at once (bpg reads
// right after its create); its comment changes; VMs join it at create,
// join and leave it with PUT (PVE's refusals: already a member, not a
// member, in another pool without allow-move), and so do storages; only
// an empty pool can be deleted.
func TestPoolLifecycle(t *testing.T) {
	a := shared(t)
	const id, other = "tf-pool", "tf-pool-2"
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
	a.OK("POST", "/pools", url.Values{"poolid": {other}}, nil)

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

	// A VM created into the pool is its member, shown on its row.
	vmid := createVM(t, a, url.Values{"name": {"pooled"}, "pool": {id}})
	if m := poolMembers(t, a, id); !slices.Equal(m, []string{"qemu/" + vmid}) {
		t.Fatalf("members %v, want qemu/%s", m, vmid)
	}
	if p := vmPool(t, a, vmid); p != id {
		t.Fatalf("row pool %q", p)
	}
	// PVE's refusals, and nothing of a refused update is written.
	refused(t, a, "PUT", "/pools", url.Values{"poolid": {id}, "vms": {vmid}}, 500, "update pools failed: VM "+vmid+" is already a pool member")
	refused(t, a, "PUT", "/pools", url.Values{"poolid": {other}, "vms": {vmid}, "comment": {"not written"}}, 500,
		"update pools failed: VM "+vmid+" belongs already to pool '"+id+"' and 'allow-move' is not set")
	if p := poolRow(t, a, other); p["comment"] != nil {
		t.Fatalf("a refused update wrote its comment: %v", p)
	}
	refused(t, a, "PUT", "/pools", url.Values{"poolid": {other}, "vms": {vmid}, "delete": {"1"}}, 500, "update pools failed: VM "+vmid+" is not a pool member")
	refused(t, a, "PUT", "/pools", url.Values{"poolid": {id}, "vms": {"999999"}}, 500, "cannot add VM 999999 to pool '"+id+"': no such VM")
	refused(t, a, "PUT", "/pools", url.Values{"poolid": {"nope"}, "comment": {"x"}}, 500, "update pools failed: pool 'nope' does not exist")

	// allow-move moves it (bpg's pool_membership), delete=1 takes it out.
	a.OK("PUT", "/pools", url.Values{"poolid": {other}, "vms": {vmid}, "allow-move": {"1"}}, &null)
	if m, p := poolMembers(t, a, id), vmPool(t, a, vmid); len(m) != 0 || p != other || !slices.Equal(poolMembers(t, a, other), []string{"qemu/" + vmid}) {
		t.Fatalf("after the move: %s members %v, row pool %q", id, m, p)
	}
	a.OK("PUT", "/pools/"+other, url.Values{"vms": {vmid}, "delete": {"1"}}, nil)
	if p := vmPool(t, a, vmid); p != "" || len(poolMembers(t, a, other)) != 0 {
		t.Fatalf("after leaving: row pool %q, members %v", p, poolMembers(t, a, other))
	}
	// bpg's VM resource moves a VM: out of the old pool, into the new.
	a.OK("PUT", "/pools", url.Values{"poolid": {id}, "vms": {vmid}}, nil)

	// Storages: members recorded in the pool, shown as PVE's storage rows.
	a.OK("PUT", "/pools", url.Values{"poolid": {id}, "storage": {"local-lvm"}}, nil)
	refused(t, a, "PUT", "/pools", url.Values{"poolid": {id}, "storage": {"local-lvm"}}, 500, "update pools failed: Storage 'local-lvm' is already a pool member")
	refused(t, a, "PUT", "/pools", url.Values{"poolid": {other}, "storage": {"local-lvm"}, "delete": {"1"}}, 500, "update pools failed: Storage 'local-lvm' is not a pool member")
	var rows []map[string]any
	a.OK("GET", "/pools", url.Values{"poolid": {id}, "type": {"storage"}}, &rows)
	if ms := rows[0]["members"].([]any); len(ms) != 1 || ms[0].(map[string]any)["storage"] != "local-lvm" || ms[0].(map[string]any)["type"] != "storage" ||
		ms[0].(map[string]any)["id"] != "storage/"+a.FirstNode()+"/local-lvm" {
		t.Fatalf("storage members %v", rows)
	}
	a.OK("GET", "/pools", url.Values{"poolid": {id}, "type": {"qemu"}}, &rows)
	if ms := rows[0]["members"].([]any); len(ms) != 1 || ms[0].(map[string]any)["vmid"] != float64(mustInt(t, vmid)) {
		t.Fatalf("qemu members %v", rows)
	}
	refused(t, a, "GET", "/pools", url.Values{"type": {"qemu"}}, 400, "Parameter verification failed.")

	// /cluster/resources lists pools as PVE does.
	a.OK("GET", "/cluster/resources", nil, &rows)
	found = false
	for _, r := range rows {
		found = found || r["type"] == "pool" && r["id"] == "/pool/"+id && r["pool"] == id
	}
	if !found {
		t.Fatalf("no pool row for %s", id)
	}

	// Only an empty pool goes.
	refused(t, a, "DELETE", "/pools", url.Values{"poolid": {id}}, 500, "delete pool failed: pool '"+id+"' is not empty (contains VM "+vmid+")")
	destroyVM(t, a, vmid)
	refused(t, a, "DELETE", "/pools", url.Values{"poolid": {id}}, 500, "delete pool failed: pool '"+id+"' is not empty (contains storage 'local-lvm')")
	a.OK("PUT", "/pools", url.Values{"poolid": {id}, "storage": {"local-lvm"}, "delete": {"1"}}, nil)
	a.OK("DELETE", "/pools/"+id, nil, &null)
	a.OK("DELETE", "/pools", url.Values{"poolid": {other}}, nil)
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

func mustInt(t *testing.T, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestNestedPools: PVE 8.1's nested pools, up to three levels, each under
// a parent that exists; a parent with a child is not empty; a VM in a
// child is not a member of the parent.
func TestNestedPools(t *testing.T) {
	a := shared(t)
	a.OK("POST", "/pools", url.Values{"poolid": {"nest"}}, nil)
	a.OK("POST", "/pools", url.Values{"poolid": {"nest/mid"}, "comment": {"middle"}}, nil)
	a.OK("POST", "/pools", url.Values{"poolid": {"nest/mid/Leaf_1"}}, nil)
	refused(t, a, "POST", "/pools", url.Values{"poolid": {"nope/child"}}, 500, "create pool failed: parent 'nope' of pool 'nope/child' does not exist")
	refused(t, a, "POST", "/pools", url.Values{"poolid": {"nest/1st"}}, 500, "create pool failed: pool name must start with a letter")
	ans := refused(t, a, "POST", "/pools", url.Values{"poolid": {"nest/mid/Leaf_1/x"}}, 400, "Parameter verification failed.")
	if !strings.Contains(ans.Errors["poolid"], "nested too deeply (max levels = 3)") {
		t.Fatalf("fourth level: %v", ans.Errors)
	}
	if p := poolRow(t, a, "nest/mid"); p["comment"] != "middle" {
		t.Fatalf("nested pool %v", p)
	}
	vmid := createVM(t, a, url.Values{"pool": {"nest/mid/Leaf_1"}})
	if m := poolMembers(t, a, "nest/mid/Leaf_1"); !slices.Equal(m, []string{"qemu/" + vmid}) || len(poolMembers(t, a, "nest")) != 0 {
		t.Fatalf("members %v (parent: %v)", m, poolMembers(t, a, "nest"))
	}
	refused(t, a, "DELETE", "/pools", url.Values{"poolid": {"nest"}}, 500, "delete pool failed: pool 'nest' is not empty (contains pool 'nest/mid')")
	refused(t, a, "DELETE", "/pools", url.Values{"poolid": {"nest/mid/Leaf_1"}}, 500, "(contains VM "+vmid+")")
	destroyVM(t, a, vmid)
	for _, id := range []string{"nest/mid/Leaf_1", "nest/mid", "nest"} {
		a.OK("DELETE", "/pools", url.Values{"poolid": {id}}, nil)
	}
}

// TestNamespacePools: served namespaces are pools, as before pools had
// records: their VMs are members without any write; such a VM can leave
// (then it is in no pool), move to another pool and come back, and stays
// in its namespace throughout.
func TestNamespacePools(t *testing.T) {
	a := shared(t)
	legacy := vmidOf(t, a, "legacy-app") // namespace lab
	if p := vmPool(t, a, legacy); p != "lab" || !slices.Contains(poolMembers(t, a, "lab"), "qemu/"+legacy) {
		t.Fatalf("lab's VM shows pool %q, members %v", p, poolMembers(t, a, "lab"))
	}
	a.OK("POST", "/pools", url.Values{"poolid": {"ns-pool-move"}}, nil)
	defer a.OK("DELETE", "/pools", url.Values{"poolid": {"ns-pool-move"}}, nil)
	refused(t, a, "PUT", "/pools", url.Values{"poolid": {"ns-pool-move"}, "vms": {legacy}}, 500, "belongs already to pool 'lab' and 'allow-move' is not set")
	a.OK("PUT", "/pools", url.Values{"poolid": {"ns-pool-move"}, "vms": {legacy}, "allow-move": {"1"}}, nil)
	if p := vmPool(t, a, legacy); p != "ns-pool-move" || slices.Contains(poolMembers(t, a, "lab"), "qemu/"+legacy) {
		t.Fatalf("after the move: pool %q, lab %v", p, poolMembers(t, a, "lab"))
	}
	a.OK("PUT", "/pools", url.Values{"poolid": {"lab"}, "vms": {legacy}, "allow-move": {"1"}}, nil)
	a.OK("PUT", "/pools", url.Values{"poolid": {"lab"}, "vms": {legacy}, "delete": {"1"}}, nil)
	if p := vmPool(t, a, legacy); p != "" {
		t.Fatalf("left lab, yet shows %q", p)
	}
	a.OK("PUT", "/pools", url.Values{"poolid": {"lab"}, "vms": {legacy}}, nil)
	if p := vmPool(t, a, legacy); p != "lab" {
		t.Fatalf("back in lab, yet shows %q", p)
	}
	// The comment of a namespace's pool.
	a.OK("PUT", "/pools", url.Values{"poolid": {"lab"}, "comment": {"the lab"}}, nil)
	if p := poolRow(t, a, "lab"); p["comment"] != "the lab" {
		t.Fatalf("lab %v", p)
	}
	a.OK("PUT", "/pools", url.Values{"poolid": {"lab"}, "comment": {""}}, nil)

	// pool= of a namespace's pool creates the VM there; a clone is in no
	// pool unless asked, as in PVE.
	vmid := createVM(t, a, url.Values{"pool": {"lab"}})
	defer destroyVM(t, a, vmid)
	if p := vmPool(t, a, vmid); p != "lab" {
		t.Fatalf("created into lab, shows %q", p)
	}
	var newid, upid string
	a.OK("GET", "/cluster/nextid", nil, &newid)
	a.OK("POST", "/nodes/"+nodeOf(t, a, vmid)+"/qemu/"+vmid+"/clone", url.Values{"newid": {newid}}, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("clone: %s", exit)
	}
	defer destroyVM(t, a, newid)
	if p := vmPool(t, a, newid); p != "" {
		t.Fatalf("clone without pool= shows %q", p)
	}
	a.OK("PUT", "/pools", url.Values{"poolid": {"ns-pool-move"}, "vms": {newid}}, nil)
	a.OK("PUT", "/pools", url.Values{"poolid": {"ns-pool-move"}, "vms": {newid}, "delete": {"1"}}, nil)
}

// TestPoolWritesRefuseBadInput: PVE's parameter errors.
func TestPoolWritesRefuseBadInput(t *testing.T) {
	a := shared(t)
	for _, c := range []struct {
		form url.Values
		want string
	}{
		{url.Values{}, "property is missing and it is not optional"},
		{url.Values{"poolid": {"bad name"}}, "invalid format - pool name 'bad name' contains invalid characters"},
		{url.Values{"poolid": {"a/b/c/d"}}, "invalid format - pool name 'a/b/c/d' nested too deeply (max levels = 3)"},
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
	ans = refused(t, a, "GET", "/pools", url.Values{"poolid": {"lab"}, "type": {"vm"}}, 400, "Parameter verification failed.")
	if !strings.Contains(ans.Errors["type"], "enumeration 'qemu, lxc, storage'") {
		t.Fatalf("bad type: %v", ans.Errors)
	}
	if ans := refused(t, a, "POST", "/nodes/"+a.FirstNode()+"/qemu", url.Values{"vmid": {"9999"}, "pool": {"nope/x"}}, 403, ""); strings.TrimSpace(ans.Message) != "Permission check failed (pool 'nope/x' does not exist)" {
		t.Fatalf("unknown nested pool: %s", ans.Status)
	}
}

// TestPoolWritesNeedPoolAllocate: Pool.Allocate on /pool/<id>, as PVE,
// and on the pool a VM is moved out of.
func TestPoolWritesNeedPoolAllocate(t *testing.T) {
	auditor, pooladmin, admin := asIdentity(t, "auditor@pve"), asIdentity(t, "pooladmin@pve"), asIdentity(t, "admin@pve")
	denied(t, auditor, "POST", "/pools", url.Values{"poolid": {"audited"}}, "Permission check failed (/pool/audited, Pool.Allocate)")
	// PVEVMAdmin + PVEPoolUser on the pool: may use it, not change it.
	denied(t, pooladmin, "PUT", "/pools", url.Values{"poolid": {"lab"}, "comment": {"mine"}}, "Permission check failed (/pool/lab, Pool.Allocate)")
	denied(t, pooladmin, "DELETE", "/pools/lab", nil, "Permission check failed (/pool/lab, Pool.Allocate)")
	admin.OK("POST", "/pools", url.Values{"poolid": {"by-admin"}}, nil)
	admin.OK("DELETE", "/pools", url.Values{"poolid": {"by-admin"}}, nil)
}

// TestPoolGrantsFollowMembers: with PVE roles, grants on a pool reach the
// VMs in it and in the pools nested in it, and the storages that are its
// members, from the moment they join until they leave, as PVE's do.
func TestPoolGrantsFollowMembers(t *testing.T) {
	admin, lead := asIdentity(t, "admin@pve"), asIdentity(t, "teamlead@pve")
	admin.OK("POST", "/pools", url.Values{"poolid": {"team-it"}}, nil)
	admin.OK("POST", "/pools", url.Values{"poolid": {"team-it/dev"}}, nil)
	defer func() {
		admin.OK("DELETE", "/pools", url.Values{"poolid": {"team-it/dev"}}, nil)
		admin.OK("DELETE", "/pools", url.Values{"poolid": {"team-it"}}, nil)
	}()
	node := admin.FirstNode()
	status := "/nodes/" + nodeOf(t, admin, "100") + "/qemu/100/status/current"
	denied(t, lead, "GET", status, nil, "Permission check failed (/vms/100, VM.Audit)")
	storages := func() []string {
		var rows []map[string]any
		lead.OK("GET", "/nodes/"+node+"/storage", nil, &rows)
		var out []string
		for _, r := range rows {
			out = append(out, r["storage"].(string))
		}
		return out
	}
	if s := storages(); len(s) != 0 {
		t.Fatalf("team lead sees storages %v before any joined the pool", s)
	}

	admin.OK("PUT", "/pools", url.Values{"poolid": {"team-it/dev"}, "vms": {"100"}}, nil)
	admin.OK("PUT", "/pools", url.Values{"poolid": {"team-it"}, "storage": {"ceph-rbd"}}, nil)
	var st map[string]any
	lead.OK("GET", status, nil, &st)
	if vms, _ := visibleRows(t, lead); strings.Join(vms, ",") != "100" {
		t.Fatalf("team lead sees VMs %v, want 100", vms)
	}
	if s := storages(); !slices.Equal(s, []string{"ceph-rbd"}) {
		t.Fatalf("team lead sees storages %v, want ceph-rbd", s)
	}
	var perms map[string]map[string]int
	lead.OK("GET", "/access/permissions", url.Values{"path": {"/vms/100"}}, &perms)
	if perms["/vms/100"]["VM.PowerMgmt"] != 1 || perms["/vms/100"]["VM.Allocate"] != 0 {
		t.Fatalf("team lead's permissions on VM 100: %v", perms)
	}
	// New disks on the member storage: Datastore.AllocateSpace reaches it
	// through the pool; VM.Allocate on the pool lets a VM be created into
	// it (PVEVMUser has none: refused on the VM, not the storage).
	denied(t, lead, "POST", "/nodes/"+node+"/qemu", url.Values{"vmid": {"4243"}, "pool": {"team-it"}, "scsi0": {"ceph-rbd:1"}},
		"Permission check failed (/vms/4243, VM.Allocate)")

	admin.OK("PUT", "/pools", url.Values{"poolid": {"team-it/dev"}, "vms": {"100"}, "delete": {"1"}}, nil)
	admin.OK("PUT", "/pools", url.Values{"poolid": {"team-it"}, "storage": {"ceph-rbd"}, "delete": {"1"}}, nil)
	denied(t, lead, "GET", status, nil, "Permission check failed (/vms/100, VM.Audit)")
	if s := storages(); len(s) != 0 {
		t.Fatalf("team lead still sees storages %v", s)
	}
}

// TestPoolWritesWithFixedNamespaces: with a `namespace` list the served
// namespaces are pools that cannot be deleted; pools with records can be
// made and deleted all the same.
func TestPoolWritesWithFixedNamespaces(t *testing.T) {
	shared(t)
	a := &testcaddy.PVE{T: t, Base: fmt.Sprintf("https://localhost:%d", fixedPort), C: testcaddy.Client(), Auth: testcaddy.TokenAuth(testToken, testSecret)}
	a.OK("POST", "/pools", url.Values{"poolid": {"extra"}}, nil)
	a.OK("DELETE", "/pools", url.Values{"poolid": {"extra"}}, nil)
	refused(t, a, "POST", "/pools", url.Values{"poolid": {"lab"}}, 500, "create pool failed: pool 'lab' already exists")
	refused(t, a, "DELETE", "/pools", url.Values{"poolid": {"lab"}}, 500, "delete pool failed: pool 'lab' is not empty (contains VM ")
	// What bpg sends to a pool it imported: the comment it read ("").
	a.OK("PUT", "/pools", url.Values{"poolid": {"lab"}, "comment": {""}}, nil)
}
