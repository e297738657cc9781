package translate

import "testing"

func TestPrivilegeRule(t *testing.T) {
	vm := func(verb string) RBACRule {
		return RBACRule{Group: "kubevirt.io", Resource: "virtualmachines", Verb: verb, Namespaced: true}
	}
	ns := func(group, resource, sub, verb string) RBACRule {
		return RBACRule{Group: group, Resource: resource, Subresource: sub, Verb: verb, Namespaced: true}
	}
	cluster := func(group, resource, verb string) RBACRule {
		return RBACRule{Group: group, Resource: resource, Verb: verb}
	}
	admin := RBACRule{Group: "*", Resource: "*", Verb: "*"}
	tests := []struct {
		priv    string
		virtAPI bool
		want    RBACRule
	}{
		{"VM.Audit", true, vm("list")},
		{"Pool.Audit", true, cluster("pve.caddy-proxmox.io", "pools", "get")},
		{"VM.PowerMgmt", true, ns("subresources.kubevirt.io", "virtualmachines", "start", "update")},
		{"VM.PowerMgmt", false, vm("patch")},
		{"VM.Console", true, ns("subresources.kubevirt.io", "virtualmachineinstances", "vnc", "get")},
		{"VM.Allocate", true, vm("create")},
		{"VM.Config.Disk", true, vm("patch")},
		{"VM.Config.CDROM", true, vm("patch")},
		{"VM.Config.CPU", true, vm("patch")},
		{"VM.Config.Memory", true, vm("patch")},
		{"VM.Config.Network", true, vm("patch")},
		{"VM.Config.HWType", true, vm("patch")},
		{"VM.Config.Options", true, vm("patch")},
		{"VM.Config.Cloudinit", true, vm("patch")},
		{"VM.Snapshot", true, ns("snapshot.kubevirt.io", "virtualmachinesnapshots", "", "create")},
		{"VM.Backup", true, ns("snapshot.kubevirt.io", "virtualmachinesnapshots", "", "create")},
		{"VM.Snapshot.Rollback", true, ns("snapshot.kubevirt.io", "virtualmachinerestores", "", "create")},
		{"VM.Clone", true, ns("cdi.kubevirt.io", "datavolumes", "", "create")},
		{"VM.Monitor", true, ns("subresources.kubevirt.io", "virtualmachineinstances", "guestosinfo", "get")},
		{"VM.GuestAgent.Audit", true, ns("subresources.kubevirt.io", "virtualmachineinstances", "guestosinfo", "get")},
		{"VM.Migrate", true, ns("kubevirt.io", "virtualmachineinstancemigrations", "", "create")},
		{"Sys.Audit", true, cluster("", "nodes", "list")},
		{"Datastore.Audit", true, cluster("storage.k8s.io", "storageclasses", "list")},
		{"Pool.Allocate", true, cluster("pve.caddy-proxmox.io", "pools", "update")},
		{"Datastore.AllocateSpace", true, ns("", "persistentvolumeclaims", "", "create")},
		{"Datastore.AllocateTemplate", true, ns("cdi.kubevirt.io", "datavolumes", "", "create")},
		{"Datastore.Allocate", true, ns("", "persistentvolumeclaims", "", "delete")},
		{"VM.GuestAgent.Unrestricted", true, admin},
		{"VM.GuestAgent.FileRead", true, admin},
		{"VM.GuestAgent.FileWrite", true, admin},
		{"VM.GuestAgent.FileSystemMgmt", true, admin},
		{"VM.Replicate", true, admin},
		{"Sys.PowerMgmt", true, admin},
		{"Sys.Modify", true, admin},
		{"Sys.Incoming", true, admin},
		{"Sys.AccessNetwork", true, admin},
		{"Sys.Console", true, admin},
		{"Sys.Syslog", true, admin},
		{"SDN.Allocate", true, admin},
		{"SDN.Audit", true, admin},
		{"SDN.Use", true, admin},
		{"Realm.Allocate", true, admin},
		{"Realm.AllocateUser", true, admin},
		{"User.Modify", true, admin},
		{"Group.Allocate", true, admin},
		{"Mapping.Modify", true, admin},
		{"Mapping.Use", true, admin},
		{"Mapping.Audit", true, admin},
		{"Permissions.Modify", true, admin},
		{"", true, admin},
		{"VM.Unknown", true, admin},
	}
	covered := map[string]bool{}
	for _, tt := range tests {
		covered[tt.priv] = true
		if got := PrivilegeRule(tt.priv, tt.virtAPI); got != tt.want {
			t.Errorf("PrivilegeRule(%q, %v) = %+v, want %+v", tt.priv, tt.virtAPI, got, tt.want)
		}
		// Only power actions depend on virt-api.
		if tt.priv != "VM.PowerMgmt" {
			if got := PrivilegeRule(tt.priv, !tt.virtAPI); got != tt.want {
				t.Errorf("PrivilegeRule(%q, %v) = %+v, want %+v", tt.priv, !tt.virtAPI, got, tt.want)
			}
		}
	}
	for _, list := range [][]string{AllPrivileges, AllPrivilegesPVE9} {
		for _, p := range list {
			if !covered[p] {
				t.Errorf("privilege %s is not in the table", p)
			}
		}
	}
}
