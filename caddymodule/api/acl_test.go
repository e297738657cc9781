package api

import (
	"strconv"
	"strings"
	"testing"
)

func TestNewPermissionsRefusesBadGrants(t *testing.T) {
	for _, tc := range []struct {
		ids  []IdentityConfig
		role string
		want string
	}{
		{role: "Root", want: "unknown role"},
		{ids: []IdentityConfig{{ID: "alice"}}, want: "want user@realm"},
		{ids: []IdentityConfig{{ID: "alice@pve!"}}, want: "want user@realm"},
		{ids: []IdentityConfig{{ID: "a@pve"}, {ID: "a@pve"}}, want: "twice"},
		{ids: []IdentityConfig{{ID: "a@pve", Roles: []GrantConfig{{Path: "/", Role: "God"}}}}, want: "unknown role"},
		{ids: []IdentityConfig{{ID: "a@pve", Roles: []GrantConfig{{Path: "/vms/abc", Role: "PVEAuditor"}}}}, want: "bad ACL path"},
		{ids: []IdentityConfig{{ID: "a@pve", Roles: []GrantConfig{{Path: "/pool/", Role: "PVEAuditor"}}}}, want: "bad ACL path"},
		{ids: []IdentityConfig{{ID: "a@pve", Roles: []GrantConfig{{Path: "vms/1", Role: "PVEAuditor"}}}}, want: "bad ACL path"},
	} {
		_, err := newPermissions(false, tc.ids, tc.role)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v %q: error %v, want %q", tc.ids, tc.role, err, tc.want)
		}
	}
}

func TestGrantsPropagate(t *testing.T) {
	grants := []GrantConfig{{Path: "/pool/team", Role: "PVEVMUser"}, {Path: "/vms/7", Role: "PVEVMAdmin"}, {Path: "/storage/ceph", Role: "PVEDatastoreUser"}}
	// pool is the pool whose grants reach the path: a VM's, or one a
	// storage is member of.
	for _, tc := range []struct {
		path, pool, priv string
		want             bool
	}{
		{"/vms/1", "team", "VM.PowerMgmt", true},
		{"/vms/1", "team", "VM.Allocate", false},
		{"/vms/1", "other", "VM.PowerMgmt", false},
		{"/vms/1", "", "VM.PowerMgmt", false},
		{"/vms/1", "team/dev", "VM.PowerMgmt", true},
		{"/vms/1", "team/dev/x", "VM.PowerMgmt", true},
		{"/vms/1", "teamx", "VM.PowerMgmt", false},
		{"/vms/1", "teamx/dev", "VM.PowerMgmt", false},
		{"/vms/7", "other", "VM.Allocate", true},
		{"/vms/70", "other", "VM.Allocate", false},
		{"/storage/ceph", "", "Datastore.AllocateSpace", true},
		{"/storage/cephx", "", "Datastore.AllocateSpace", false},
		{"/storage/nfs", "team", "VM.Audit", true},
		{"/", "", "VM.Audit", false},
		{"/pool/team", "", "VM.Audit", true},
		{"/pool/team/dev", "", "VM.Audit", true},
		{"/pool/teamx", "", "VM.Audit", false},
		{"/nodes/n1", "team", "VM.Audit", false},
	} {
		if got := granted(grants, tc.path, tc.pool, tc.priv); got != tc.want {
			t.Errorf("%s (pool %s) %s = %v, want %v", tc.path, tc.pool, tc.priv, got, tc.want)
		}
	}
	p, err := newPermissions(false, []IdentityConfig{{ID: "a@pve", KubeUser: "alice", KubeGroups: []string{"ops"}}, {ID: "a@pve!ci", Roles: grants}}, "PVEAuditor")
	if err != nil {
		t.Fatal(err)
	}
	if p.allAdmin {
		t.Fatal("allAdmin with non-admin grants")
	}
	if g := p.grants(identity{UserID: "a@pve"}); len(g) != 1 || g[0].Role != "PVEAuditor" {
		t.Fatalf("user without grants: %v, want the default role on /", g)
	}
	if g := p.grants(identity{UserID: "a@pve", TokenID: "a@pve!ci"}); len(g) != 3 {
		t.Fatalf("token with its own grants: %v", g)
	}
	if k := p.kubeIdentity(identity{UserID: "a@pve", TokenID: "a@pve!other"}); k.User != "alice" || len(k.Groups) != 1 {
		t.Fatalf("token without an entry acts as its user: %+v", k)
	}
	if k := p.kubeIdentity(identity{UserID: "b@pve"}); k.User != "pve:b@pve" {
		t.Fatalf("default kube user: %+v", k)
	}
}

// TestRowSeesAsSees: the per-request memo of the VM rows' audit check
// decides every row as sees does, whether the grants name pools, single
// VMs (which set VMs of one pool apart) or neither.
func TestRowSeesAsSees(t *testing.T) {
	rows := []*guestRow{}
	for i, pool := range []string{"", "team", "team/dev", "other", "team", "", "other", "team/dev"} {
		rows = append(rows, &guestRow{ns: "default", acl: "/vms/" + strconv.Itoa(100+i), in: rowInputs{pool: pool}})
	}
	for _, grants := range [][]GrantConfig{
		{{Path: "/", Role: "PVEAuditor"}},
		{{Path: "/pool/team", Role: "PVEVMUser"}},
		{{Path: "/pool/team", Role: "PVEVMUser"}, {Path: "/vms/103", Role: "PVEAuditor"}, {Path: "/vms/105", Role: "PVEVMAdmin"}},
		{{Path: "/pool/other", Role: "PVEVMUser"}, {Path: "/vms/101", Role: "NoAccess"}},
		{{Path: "/vms/100", Role: "NoAccess"}, {Path: "/vms/106", Role: "PVEAuditor"}},
		{{Path: "/storage/local", Role: "PVEDatastoreAdmin"}, {Path: "/nodes/n1", Role: "PVEAuditor"}},
	} {
		perms, err := newPermissions(false, []IdentityConfig{{ID: "u@pve", Roles: grants}}, "")
		if err != nil {
			t.Fatal(err)
		}
		h := &APIHandler{perms: perms, auth: newAuthenticator([]byte("k"))}
		q := &request{id: identity{UserID: "u@pve"}}
		sees, shown := h.rowSees(q), 0
		for _, r := range rows {
			want := h.sees(q, r.acl, r.ns, r.in.pool, "VM.Audit")
			if got := sees(r); got != want {
				t.Errorf("grants %v: row %s (pool %q) seen %v, want %v", grants, r.acl, r.in.pool, got, want)
			}
			if want {
				shown++
			}
		}
		if got := len(h.visibleRows(q, rows)); got != shown {
			t.Errorf("grants %v: visibleRows kept %d rows, want %d", grants, got, shown)
		}
	}
}
