package kube

import (
	"testing"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// TestPrivilegeAccess pins the Kubernetes permission of every PVE 8 and
// PVE 9 privilege, in a namespace and cluster-wide, with and without
// virt-api: the access checks of the API and the permission views rest on
// it.
func TestPrivilegeAccess(t *testing.T) {
	type rule struct {
		group, resource, sub, verb string
		namespaced                 bool
	}
	vm := func(verb string) rule { return rule{"kubevirt.io", "virtualmachines", "", verb, true} }
	admin := rule{"*", "*", "", "*", false}
	want := map[string]rule{
		"VM.Audit":                   vm("list"),
		"Pool.Audit":                 {"pve.caddy-proxmox.io", "pools", "", "get", false},
		"VM.PowerMgmt":               {"subresources.kubevirt.io", "virtualmachines", "start", "update", true},
		"VM.Console":                 {"subresources.kubevirt.io", "virtualmachineinstances", "vnc", "get", true},
		"VM.Allocate":                vm("create"),
		"VM.Config.Disk":             vm("patch"),
		"VM.Config.CDROM":            vm("patch"),
		"VM.Config.CPU":              vm("patch"),
		"VM.Config.Memory":           vm("patch"),
		"VM.Config.Network":          vm("patch"),
		"VM.Config.HWType":           vm("patch"),
		"VM.Config.Options":          vm("patch"),
		"VM.Config.Cloudinit":        vm("patch"),
		"VM.Snapshot":                {"snapshot.kubevirt.io", "virtualmachinesnapshots", "", "create", true},
		"VM.Backup":                  {"snapshot.kubevirt.io", "virtualmachinesnapshots", "", "create", true},
		"VM.Snapshot.Rollback":       {"snapshot.kubevirt.io", "virtualmachinerestores", "", "create", true},
		"VM.Clone":                   {"cdi.kubevirt.io", "datavolumes", "", "create", true},
		"VM.Monitor":                 {"subresources.kubevirt.io", "virtualmachineinstances", "guestosinfo", "get", true},
		"VM.GuestAgent.Audit":        {"subresources.kubevirt.io", "virtualmachineinstances", "guestosinfo", "get", true},
		"VM.Migrate":                 {"kubevirt.io", "virtualmachineinstancemigrations", "", "create", true},
		"Sys.Audit":                  {"", "nodes", "", "list", false},
		"Datastore.Audit":            {"storage.k8s.io", "storageclasses", "", "list", false},
		"Pool.Allocate":              {"pve.caddy-proxmox.io", "pools", "", "update", false},
		"Datastore.AllocateSpace":    {"", "persistentvolumeclaims", "", "create", true},
		"Datastore.AllocateTemplate": {"cdi.kubevirt.io", "datavolumes", "", "create", true},
		"Datastore.Allocate":         {"", "persistentvolumeclaims", "", "delete", true},
		// No KubeVirt counterpart: cluster-admin.
		"VM.GuestAgent.Unrestricted":   admin,
		"VM.GuestAgent.FileRead":       admin,
		"VM.GuestAgent.FileWrite":      admin,
		"VM.GuestAgent.FileSystemMgmt": admin,
		"VM.Replicate":                 admin,
		"Sys.PowerMgmt":                admin,
		"Sys.Modify":                   admin,
		"Sys.Incoming":                 admin,
		"Sys.AccessNetwork":            admin,
		"Sys.Console":                  admin,
		"Sys.Syslog":                   admin,
		"SDN.Allocate":                 admin,
		"SDN.Audit":                    admin,
		"SDN.Use":                      admin,
		"Realm.Allocate":               admin,
		"Realm.AllocateUser":           admin,
		"User.Modify":                  admin,
		"Group.Allocate":               admin,
		"Mapping.Modify":               admin,
		"Mapping.Use":                  admin,
		"Mapping.Audit":                admin,
		"Permissions.Modify":           admin,
		"":                             admin,
		"VM.Unknown":                   admin,
	}
	// Without virt-api a power action patches the VM's run strategy.
	withoutVirtAPI := map[string]rule{"VM.PowerMgmt": vm("patch")}

	for _, list := range [][]string{translate.AllPrivileges, translate.AllPrivilegesPVE9} {
		for _, p := range list {
			if _, ok := want[p]; !ok {
				t.Errorf("privilege %s has no expected permission here", p)
			}
		}
	}
	for priv, r := range want {
		for _, virtAPI := range []bool{true, false} {
			r := r
			if o, ok := withoutVirtAPI[priv]; ok && !virtAPI {
				r = o
			}
			for _, ns := range []string{"", "pool1"} {
				exp := Access{Group: r.group, Resource: r.resource, Subresource: r.sub, Verb: r.verb}
				if r.namespaced {
					exp.Namespace = ns
				}
				if got := PrivilegeAccess(priv, ns, virtAPI); got != exp {
					t.Errorf("PrivilegeAccess(%q, %q, %v) = %+v, want %+v", priv, ns, virtAPI, got, exp)
				}
			}
		}
	}
}
