package translate

import (
	"reflect"
	"sort"
	"testing"
)

func TestRoles(t *testing.T) {
	// Expected PVE 8 roles, written out from pve-access-control 8.2.2's
	// privilege table and create_roles rules.
	vmAdmin := []string{
		"VM.Allocate", "VM.Audit", "VM.Backup", "VM.Clone", "VM.Config.CDROM", "VM.Config.CPU",
		"VM.Config.Cloudinit", "VM.Config.Disk", "VM.Config.HWType", "VM.Config.Memory",
		"VM.Config.Network", "VM.Config.Options", "VM.Console", "VM.Migrate", "VM.Monitor",
		"VM.PowerMgmt", "VM.Snapshot", "VM.Snapshot.Rollback",
	}
	want := map[string][]string{
		"NoAccess":          {},
		"PVETemplateUser":   {"VM.Audit", "VM.Clone"},
		"PVEVMAdmin":        vmAdmin,
		"PVEVMUser":         {"VM.Audit", "VM.Backup", "VM.Config.CDROM", "VM.Config.Cloudinit", "VM.Console", "VM.PowerMgmt"},
		"PVESysAdmin":       {"Sys.Audit", "Sys.Console", "Sys.Syslog"},
		"PVEDatastoreAdmin": {"Datastore.Allocate", "Datastore.AllocateSpace", "Datastore.AllocateTemplate", "Datastore.Audit"},
		"PVEDatastoreUser":  {"Datastore.AllocateSpace", "Datastore.Audit"},
		"PVESDNAdmin":       {"SDN.Allocate", "SDN.Audit", "SDN.Use"},
		"PVESDNUser":        {"SDN.Audit", "SDN.Use"},
		"PVEUserAdmin":      {"Group.Allocate", "Realm.AllocateUser", "User.Modify"},
		"PVEPoolAdmin":      {"Pool.Allocate", "Pool.Audit"},
		"PVEPoolUser":       {"Pool.Audit"},
		"PVEMappingAdmin":   {"Mapping.Audit", "Mapping.Modify", "Mapping.Use"},
		"PVEMappingUser":    {"Mapping.Audit", "Mapping.Use"},
		"PVEAuditor":        {"Datastore.Audit", "Mapping.Audit", "Pool.Audit", "SDN.Audit", "Sys.Audit", "VM.Audit"},
	}
	want["PVEAdmin"] = sortedUnion(vmAdmin, want["PVESysAdmin"], want["PVEDatastoreAdmin"], want["PVESDNAdmin"],
		want["PVEUserAdmin"], want["PVEPoolAdmin"], []string{"Mapping.Audit", "Mapping.Use"})
	want["Administrator"] = sortedUnion(want["PVEAdmin"], []string{
		"Mapping.Modify", "Permissions.Modify", "Realm.Allocate",
		"Sys.AccessNetwork", "Sys.Incoming", "Sys.Modify", "Sys.PowerMgmt",
	})

	if len(Roles) != len(want) {
		t.Errorf("Roles has %d roles, want %d", len(Roles), len(want))
	}
	for role, privs := range want {
		if !reflect.DeepEqual(Roles[role], privs) {
			t.Errorf("Roles[%q] = %q, want %q", role, Roles[role], privs)
		}
	}
	for role, privs := range Roles {
		if !sort.StringsAreSorted(privs) || privs == nil {
			t.Errorf("Roles[%q] is nil or not sorted", role)
		}
	}
	if !reflect.DeepEqual(AllPrivileges, want["Administrator"]) {
		t.Errorf("AllPrivileges = %q, want %q", AllPrivileges, want["Administrator"])
	}
	if len(AllPrivileges) != 42 {
		t.Errorf("PVE 8 has 42 privileges, AllPrivileges has %d", len(AllPrivileges))
	}
	// AllPrivileges is a copy: changing it must not change the role.
	if &AllPrivileges[0] == &Roles["Administrator"][0] {
		t.Error("AllPrivileges aliases Roles[Administrator]")
	}
}

func TestRolesPVE9(t *testing.T) {
	for _, p := range []string{"VM.GuestAgent.Audit", "VM.GuestAgent.FileRead", "VM.GuestAgent.FileWrite",
		"VM.GuestAgent.FileSystemMgmt", "VM.GuestAgent.Unrestricted", "VM.Replicate"} {
		if !contains(AllPrivilegesPVE9, p) || contains(AllPrivileges, p) {
			t.Errorf("%s must exist in PVE 9 only", p)
		}
	}
	if contains(AllPrivilegesPVE9, "VM.Monitor") || !contains(AllPrivileges, "VM.Monitor") {
		t.Error("VM.Monitor must exist in PVE 8 only")
	}
	if got := RolesPVE9["PVEAuditor"]; !reflect.DeepEqual(got, []string{"Datastore.Audit", "Mapping.Audit",
		"Pool.Audit", "SDN.Audit", "Sys.Audit", "VM.Audit", "VM.GuestAgent.Audit"}) {
		t.Errorf("RolesPVE9[PVEAuditor] = %q", got)
	}
	if got := RolesPVE9["PVEVMUser"]; !reflect.DeepEqual(got, []string{"VM.Audit", "VM.Backup", "VM.Config.CDROM",
		"VM.Config.Cloudinit", "VM.Console", "VM.GuestAgent.Audit", "VM.GuestAgent.FileRead",
		"VM.GuestAgent.FileSystemMgmt", "VM.GuestAgent.FileWrite", "VM.PowerMgmt"}) {
		t.Errorf("RolesPVE9[PVEVMUser] = %q", got)
	}
	if len(RolesPVE9) != len(Roles) {
		t.Errorf("RolesPVE9 has %d roles, Roles %d", len(RolesPVE9), len(Roles))
	}
	if len(AllPrivilegesPVE9) != 47 {
		t.Errorf("PVE 9 has 47 privileges, AllPrivilegesPVE9 has %d", len(AllPrivilegesPVE9))
	}
}

func TestRoleHas(t *testing.T) {
	// The privileges Telmate's provider requires on "/" (clients.md §3.2).
	telmate := []string{
		"Datastore.AllocateSpace", "Datastore.Audit", "Pool.Allocate", "Pool.Audit", "Sys.Audit",
		"Sys.Console", "Sys.Modify", "VM.Allocate", "VM.Audit", "VM.Clone", "VM.Config.CDROM",
		"VM.Config.Cloudinit", "VM.Config.CPU", "VM.Config.Disk", "VM.Config.HWType",
		"VM.Config.Memory", "VM.Config.Network", "VM.Config.Options", "VM.Migrate", "VM.PowerMgmt",
	}
	if len(telmate) != 20 {
		t.Fatalf("telmate list has %d entries", len(telmate))
	}
	for _, p := range telmate {
		if !RoleHas("Administrator", p) {
			t.Errorf("Administrator lacks %s", p)
		}
	}
	tests := []struct {
		role, priv string
		want       bool
	}{
		{"Administrator", "Permissions.Modify", true},
		{"Administrator", "Sys.PowerMgmt", true},
		{"PVEAdmin", "Sys.Modify", false},
		{"PVEAdmin", "Mapping.Modify", false},
		{"PVEAdmin", "Mapping.Use", true},
		{"PVEAdmin", "Permissions.Modify", false},
		{"PVEMappingAdmin", "Mapping.Modify", true},
		{"PVEVMUser", "VM.PowerMgmt", true},
		{"PVEVMUser", "VM.Allocate", false},
		{"PVEAuditor", "VM.Audit", true},
		{"PVEAuditor", "VM.Console", false},
		{"PVETemplateUser", "VM.Clone", true},
		{"PVETemplateUser", "VM.Allocate", false},
		{"NoAccess", "VM.Audit", false},
		{"NoSuchRole", "VM.Audit", false},
		{"Administrator", "vm.audit", false},
		{"Administrator", "", false},
	}
	for _, tt := range tests {
		if got := RoleHas(tt.role, tt.priv); got != tt.want {
			t.Errorf("RoleHas(%q, %q) = %v, want %v", tt.role, tt.priv, got, tt.want)
		}
	}
}

func sortedUnion(lists ...[]string) []string {
	set := map[string]bool{}
	for _, l := range lists {
		for _, p := range l {
			set[p] = true
		}
	}
	return orderedKeys(set)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
