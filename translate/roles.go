package translate

import (
	"sort"
)

// privGroup is one category of pve-access-control's privilege table. PVE
// derives its built-in roles from these groups, so the roles below are
// derived the same way instead of being listed by hand.
type privGroup struct {
	name  string   // category, used in the PVE<name>Admin/User role names
	root  []string // only root@pam and Administrator
	admin []string
	user  []string
	audit []string
}

// privGroupsPVE8 is the privilege table of pve-access-control 8.x
// (src/PVE/AccessControl.pm, last 8.x release 8.2.2), matching the PVE 8.x
// version the emulator reports.
var privGroupsPVE8 = []privGroup{
	{
		name: "VM",
		admin: []string{
			"VM.Config.Disk", "VM.Config.CPU", "VM.Config.Memory", "VM.Config.Network",
			"VM.Config.HWType", "VM.Config.Options", "VM.Allocate", "VM.Clone",
			"VM.Migrate", "VM.Monitor", "VM.Snapshot", "VM.Snapshot.Rollback",
		},
		user: []string{
			"VM.Config.CDROM", "VM.Config.Cloudinit", "VM.Console", "VM.Backup", "VM.PowerMgmt",
		},
		audit: []string{"VM.Audit"},
	},
	{
		name:  "Sys",
		root:  []string{"Sys.PowerMgmt", "Sys.Modify", "Sys.Incoming", "Sys.AccessNetwork"},
		admin: []string{"Sys.Console", "Sys.Syslog"},
		audit: []string{"Sys.Audit"},
	},
	{
		name:  "Datastore",
		admin: []string{"Datastore.Allocate", "Datastore.AllocateTemplate"},
		user:  []string{"Datastore.AllocateSpace"},
		audit: []string{"Datastore.Audit"},
	},
	{
		name:  "SDN",
		admin: []string{"SDN.Allocate", "SDN.Audit"},
		user:  []string{"SDN.Use"},
		audit: []string{"SDN.Audit"},
	},
	{
		name:  "User",
		root:  []string{"Realm.Allocate"},
		admin: []string{"User.Modify", "Group.Allocate", "Realm.AllocateUser"},
	},
	{
		name:  "Pool",
		admin: []string{"Pool.Allocate"},
		user:  []string{"Pool.Audit"},
		audit: []string{"Pool.Audit"},
	},
	{
		name:  "Mapping",
		admin: []string{"Mapping.Modify"},
		user:  []string{"Mapping.Use"},
		audit: []string{"Mapping.Audit"},
	},
}

// privGroupsPVE9 is the PVE 9 table (pve-access-control 9.x, the one
// kubevirt.md §7 quotes): VM.Monitor was replaced by the VM.GuestAgent.*
// privileges and VM.Replicate was added; the other groups are unchanged.
var privGroupsPVE9 = func() []privGroup {
	g := append([]privGroup(nil), privGroupsPVE8...)
	g[0] = privGroup{
		name: "VM",
		admin: []string{
			"VM.Config.Disk", "VM.Config.CPU", "VM.Config.Memory", "VM.Config.Network",
			"VM.Config.HWType", "VM.Config.Options", "VM.Allocate", "VM.Clone",
			"VM.GuestAgent.Unrestricted", "VM.Migrate", "VM.Replicate", "VM.Snapshot",
			"VM.Snapshot.Rollback",
		},
		user: []string{
			"VM.Config.CDROM", "VM.Config.Cloudinit", "VM.Console", "VM.Backup",
			"VM.GuestAgent.FileRead", "VM.GuestAgent.FileSystemMgmt", "VM.GuestAgent.FileWrite",
			"VM.PowerMgmt",
		},
		audit: []string{"VM.Audit", "VM.GuestAgent.Audit"},
	}
	return g
}()

// Roles maps each PVE 8 built-in role to its sorted privileges, for
// /access/roles and /access/permissions. The emulator reports PVE 8.x, so
// clients that create roles with PVE 8 privilege names (such as VM.Monitor)
// must find them here.
var Roles map[string][]string

// AllPrivileges lists every PVE 8 privilege, sorted; Administrator has all
// of them.
var AllPrivileges []string

// RolesPVE9 and AllPrivilegesPVE9 are the PVE 9 equivalents of Roles and
// AllPrivileges, for when the emulator reports a PVE 9 version.
var (
	RolesPVE9         map[string][]string
	AllPrivilegesPVE9 []string
)

func init() {
	Roles, AllPrivileges = buildRoles(privGroupsPVE8)
	RolesPVE9, AllPrivilegesPVE9 = buildRoles(privGroupsPVE9)
}

// buildRoles derives the built-in roles from a privilege table the way
// pve-access-control's create_roles does:
//
//   - PVE<cat>Admin = admin + user + audit privileges of the category;
//   - PVE<cat>User = user + audit, only for categories with user privileges;
//   - PVEAuditor = every audit privilege;
//   - PVEAdmin = every admin, user and audit privilege except Mapping.Modify;
//   - Administrator = every privilege, including root-only ones and
//     Permissions.Modify, which belongs to no category;
//   - NoAccess = none; PVETemplateUser = VM.Clone and VM.Audit.
func buildRoles(groups []privGroup) (map[string][]string, []string) {
	sets := map[string]map[string]bool{
		"Administrator":   {"Permissions.Modify": true},
		"NoAccess":        {},
		"PVEAdmin":        {},
		"PVEAuditor":      {},
		"PVETemplateUser": {"VM.Clone": true, "VM.Audit": true},
	}
	add := func(role string, privs ...[]string) {
		if sets[role] == nil {
			sets[role] = map[string]bool{}
		}
		for _, list := range privs {
			for _, p := range list {
				sets[role][p] = true
			}
		}
	}
	for _, g := range groups {
		add("Administrator", g.root, g.admin, g.user, g.audit)
		add("PVE"+g.name+"Admin", g.admin, g.user, g.audit)
		add("PVEAdmin", g.admin, g.user, g.audit)
		if len(g.user) > 0 {
			add("PVE"+g.name+"User", g.user, g.audit)
		}
		add("PVEAuditor", g.audit)
	}
	delete(sets["PVEAdmin"], "Mapping.Modify")

	roles := make(map[string][]string, len(sets))
	for role, set := range sets {
		roles[role] = orderedKeys(set)
	}
	return roles, append([]string(nil), roles["Administrator"]...)
}

// RoleHas reports whether the PVE 8 built-in role grants priv; unknown roles
// grant nothing.
func RoleHas(role, priv string) bool {
	privs := Roles[role]
	i := sort.SearchStrings(privs, priv)
	return i < len(privs) && privs[i] == priv
}
