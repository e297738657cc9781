package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
)

// asIdentity is a client of the permissions site (PVE roles, no
// impersonation) authenticating with user's token.
func asIdentity(t *testing.T, user string) *testcaddy.PVE {
	shared(t)
	return &testcaddy.PVE{T: t, Base: fmt.Sprintf("https://localhost:%d", permsPort), C: testcaddy.Client(),
		Auth: testcaddy.TokenAuth(user+"!t", permsSecret)}
}

// vmIDs lists the vmids of the VM rows a caller sees in /cluster/resources,
// and the types of the other rows.
func visibleRows(t *testing.T, a *testcaddy.PVE) (vmids []string, types map[string]int) {
	t.Helper()
	var rows []map[string]any
	a.OK("GET", "/cluster/resources", nil, &rows)
	types = map[string]int{}
	for _, r := range rows {
		types[r["type"].(string)]++
		if r["type"] == "qemu" {
			vmids = append(vmids, fmt.Sprintf("%.0f", r["vmid"]))
		}
	}
	sort.Strings(vmids)
	return vmids, types
}

func denied(t *testing.T, a *testcaddy.PVE, method, path string, form url.Values, want string) {
	t.Helper()
	ans := a.Do(method, path, form)
	if ans.Code != http.StatusForbidden || strings.TrimSpace(ans.Message) != want || !strings.Contains(ans.Status, want) {
		t.Fatalf("%s %s: got %s %q, want 403 %q", method, path, ans.Status, ans.Message, want)
	}
}

func TestRolesLimitWhatEachIdentitySeesAndDoes(t *testing.T) {
	admin := asIdentity(t, "admin@pve")
	all, types := visibleRows(t, admin)
	if len(all) < 3 || types["node"] == 0 || types["storage"] == 0 {
		t.Fatalf("Administrator sees %v %v, want every VM, node and storage", all, types)
	}
	node := firstNodeOf(t, admin)
	legacy := vmidOf(t, admin, "legacy-app")
	before := admin.Status(node, "100")["status"]

	t.Run("auditor", func(t *testing.T) {
		a := asIdentity(t, "auditor@pve")
		vms, types := visibleRows(t, a)
		if strings.Join(vms, ",") != strings.Join(all, ",") || types["node"] == 0 || types["storage"] == 0 {
			t.Fatalf("auditor sees %v %v, want all of %v", vms, types, all)
		}
		a.Status(node, "100")
		denied(t, a, "POST", "/nodes/"+node+"/qemu/100/status/stop", nil, "Permission check failed (/vms/100, VM.PowerMgmt)")
		denied(t, a, "PUT", "/nodes/"+node+"/qemu/100/config", url.Values{"memory": {"4096"}}, "Permission check failed (/vms/100, VM.Config.Memory)")
		denied(t, a, "DELETE", "/nodes/"+node+"/qemu/100", nil, "Permission check failed (/vms/100, VM.Allocate)")
		denied(t, a, "POST", "/nodes/"+node+"/qemu", url.Values{"vmid": {"777"}}, "Permission check failed (/vms/777, VM.Allocate)")
		if got := admin.Status(node, "100")["status"]; got != before {
			t.Fatalf("refused stop changed the VM: %v -> %v", before, got)
		}
	})

	t.Run("vm user on one VM", func(t *testing.T) {
		a := asIdentity(t, "vmuser@pve")
		vms, types := visibleRows(t, a)
		if strings.Join(vms, ",") != "101" || types["node"] != 0 || types["storage"] != 0 {
			t.Fatalf("vmuser sees %v %v, want only VM 101", vms, types)
		}
		denied(t, a, "GET", "/nodes/"+node+"/qemu/100/status/current", nil, "Permission check failed (/vms/100, VM.Audit)")
		denied(t, a, "GET", "/nodes/"+node+"/status", nil, "Permission check failed (/nodes/"+node+", Sys.Audit)")
		// VM.Config.CDROM yes, VM.Config.Memory no: checked per key.
		denied(t, a, "PUT", "/nodes/"+nodeOf(t, admin, "101")+"/qemu/101/config", url.Values{"ide2": {"none,media=cdrom"}, "memory": {"4096"}}, "Permission check failed (/vms/101, VM.Config.Memory)")
		// VM.Console is granted: the refusal is about the VM, not the caller.
		if ans := a.Do("POST", "/nodes/"+nodeOf(t, admin, "101")+"/qemu/101/vncproxy", url.Values{"websocket": {"1"}}); ans.Code != 500 || !strings.Contains(ans.Message, "not running") {
			t.Fatalf("vncproxy on a stopped VM the user may use: %s %s", ans.Status, ans.Raw)
		}
		var perms map[string]map[string]int
		a.OK("GET", "/access/permissions", nil, &perms)
		if len(perms["/"]) != 0 || perms["/vms/101"]["VM.PowerMgmt"] != 1 || perms["/vms/101"]["VM.Allocate"] != 0 {
			t.Fatalf("permissions of vmuser: %v", perms)
		}
		var users []map[string]any
		a.OK("GET", "/access/users", nil, &users)
		if len(users) != 1 || users[0]["userid"] != "vmuser@pve" {
			t.Fatalf("vmuser lists users %v, want only itself", users)
		}
		denied(t, a, "GET", "/access/permissions", url.Values{"userid": {"admin@pve"}}, "Permission check failed (/access, Sys.Audit)")
	})

	t.Run("pool admin", func(t *testing.T) {
		a := asIdentity(t, "pooladmin@pve")
		vms, _ := visibleRows(t, a)
		if strings.Join(vms, ",") != legacy {
			t.Fatalf("pool admin of lab sees %v, want only %s", vms, legacy)
		}
		var cfg map[string]any
		a.OK("GET", "/nodes/"+nodeOf(t, admin, legacy)+"/qemu/"+legacy+"/config", nil, &cfg)
		denied(t, a, "POST", "/nodes/"+node+"/qemu/100/status/start", nil, "Permission check failed (/vms/100, VM.PowerMgmt)")
		// New disks need Datastore.AllocateSpace on their storage, which a
		// VM admin of the pool does not hold; re-attaching needs none.
		denied(t, a, "POST", "/nodes/"+node+"/qemu", url.Values{"vmid": {"4242"}, "pool": {"lab"}, "scsi0": {"local-lvm:1"}},
			"Permission check failed (/storage/local-lvm, Datastore.AllocateSpace)")
		denied(t, a, "PUT", "/nodes/"+nodeOf(t, admin, legacy)+"/qemu/"+legacy+"/config", url.Values{"scsi5": {"ceph-block:1"}},
			"Permission check failed (/storage/ceph-block, Datastore.AllocateSpace)")
		var pools []map[string]any
		a.OK("GET", "/pools", nil, &pools)
		if len(pools) != 1 || pools[0]["poolid"] != "lab" {
			t.Fatalf("pool admin sees pools %v, want lab", pools)
		}
	})

	t.Run("acl", func(t *testing.T) {
		type entry struct {
			Path      string `json:"path"`
			UGID      string `json:"ugid"`
			Type      string `json:"type"`
			RoleID    string `json:"roleid"`
			Propagate int    `json:"propagate"`
		}
		var acl []entry
		admin.OK("GET", "/access/acl", nil, &acl)
		// ghost@sso has an identity block only (a Caddy auth handler
		// would sign it in): its grant is listed like everyone's.
		for _, want := range []entry{
			{"/vms/100", "ghost@sso", "user", "PVEVMUser", 1},
			{"/", "auditor@pve", "user", "PVEAuditor", 1},
			{"/pool/lab", "pooladmin@pve", "user", "PVEVMAdmin", 1},
			{"/", "nobody@pve", "user", "NoAccess", 1},
		} {
			found := false
			for _, e := range acl {
				found = found || e == want
			}
			if !found {
				t.Fatalf("admin's /access/acl lacks %+v: %+v", want, acl)
			}
		}
		var users []map[string]any
		admin.OK("GET", "/access/users", nil, &users)
		var ids []string
		for _, u := range users {
			ids = append(ids, u["userid"].(string))
		}
		if !slices.Contains(ids, "ghost@sso") || !slices.Contains(ids, "nobody@pve") || !slices.Contains(ids, "vmuser@pve") {
			t.Fatalf("admin lists users %v", ids)
		}
		// Without rights on /access a caller sees its own entries only.
		acl = nil
		asIdentity(t, "vmuser@pve").OK("GET", "/access/acl", nil, &acl)
		if len(acl) != 1 || acl[0] != (entry{"/vms/101", "vmuser@pve", "user", "PVEVMUser", 1}) {
			t.Fatalf("vmuser's /access/acl: %+v", acl)
		}
	})

	t.Run("realms and groups", func(t *testing.T) {
		var realm map[string]any
		admin.OK("GET", "/access/domains/pam", nil, &realm)
		if realm["type"] != "pam" || len(fmt.Sprint(realm["digest"])) != 40 {
			t.Fatalf("realm pam: %v", realm)
		}
		if ans := admin.Do("GET", "/access/domains/nope", nil); ans.Code != 500 || ans.Status != "500 domain 'nope' does not exist" {
			t.Fatalf("unknown realm: %s", ans.Status)
		}
		vmuser := asIdentity(t, "vmuser@pve")
		denied(t, vmuser, "GET", "/access/domains/pam", nil, "Permission check failed (/access/realm/pam, Realm.Allocate|Sys.Audit)")
		var group map[string]any
		for _, a := range []*testcaddy.PVE{admin, vmuser, asIdentity(t, "auditor@pve")} {
			group = nil
			a.OK("GET", "/access/groups/lab-users", nil, &group)
			if fmt.Sprint(group["members"]) != "[vmuser@pve]" {
				t.Fatalf("group lab-users: %v", group)
			}
		}
		denied(t, asIdentity(t, "pooladmin@pve"), "GET", "/access/groups/lab-users", nil, "Permission check failed (/access/groups/lab-users, Sys.Audit|Group.Allocate)")
		if ans := admin.Do("GET", "/access/groups/nope", nil); ans.Code != 500 || ans.Status != "500 group 'nope' does not exist" {
			t.Fatalf("unknown group: %s", ans.Status)
		}
	})

	t.Run("user without grants", func(t *testing.T) {
		a := &testcaddy.PVE{T: t, Base: fmt.Sprintf("https://localhost:%d", permsPort), C: testcaddy.Client()}
		var login map[string]any
		a.OK("POST", "/access/ticket", url.Values{"username": {"nobody@pve"}, "password": {"nobody-pass"}}, &login)
		capJSON, _ := json.Marshal(login["cap"])
		if strings.Contains(string(capJSON), "VM.") || strings.Contains(string(capJSON), "Sys.") {
			t.Fatalf("NoAccess user got capabilities %s", capJSON)
		}
		a.Auth = func(r *http.Request) {
			r.AddCookie(&http.Cookie{Name: "PVEAuthCookie", Value: login["ticket"].(string)})
		}
		vms, types := visibleRows(t, a)
		if len(vms) != 0 || len(types) != 0 {
			t.Fatalf("NoAccess user sees %v %v", vms, types)
		}
	})

	t.Run("tasks of others", func(t *testing.T) {
		root := shared(t)
		deadline := time.Now().Add(20 * time.Second)
		for root.Status(node, "100")["status"] != "running" && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		var proxy map[string]any
		root.OK("POST", "/nodes/"+node+"/qemu/100/vncproxy", url.Values{"websocket": {"1"}}, &proxy)
		upid := proxy["upid"].(string)
		a := asIdentity(t, "vmuser@pve")
		parts := strings.Split(upid, ":")
		denied(t, a, "GET", "/nodes/"+parts[1]+"/tasks/"+upid+"/status", nil, "Permission check failed (/nodes/"+parts[1]+", Sys.Audit)")
		var rows []map[string]any
		a.OK("GET", "/cluster/tasks", nil, &rows)
		for _, r := range rows {
			if r["upid"] == upid {
				t.Fatalf("vmuser lists root's task %s", upid)
			}
		}
		asIdentity(t, "auditor@pve").OK("GET", "/nodes/"+parts[1]+"/tasks/"+upid+"/status", nil, nil)
	})
}

func firstNodeOf(t *testing.T, a *testcaddy.PVE) string {
	t.Helper()
	var nodes []map[string]any
	a.OK("GET", "/nodes", nil, &nodes)
	return nodes[0]["node"].(string)
}

func vmidOf(t *testing.T, a *testcaddy.PVE, name string) string {
	t.Helper()
	var rows []map[string]any
	a.OK("GET", "/cluster/resources", url.Values{"type": {"vm"}}, &rows)
	for _, r := range rows {
		if r["name"] == name {
			return fmt.Sprintf("%.0f", r["vmid"])
		}
	}
	t.Fatalf("no VM named %s", name)
	return ""
}

func nodeOf(t *testing.T, a *testcaddy.PVE, vmid string) string {
	t.Helper()
	var rows []map[string]any
	a.OK("GET", "/cluster/resources", url.Values{"type": {"vm"}}, &rows)
	for _, r := range rows {
		if fmt.Sprintf("%.0f", r["vmid"]) == vmid {
			return r["node"].(string)
		}
	}
	t.Fatalf("no VM %s", vmid)
	return ""
}
