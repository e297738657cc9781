package translate

import "strings"

// API groups the privilege table refers to.
const (
	groupKubeVirt = "kubevirt.io"
	groupSub      = "subresources.kubevirt.io"
	groupSnapshot = "snapshot.kubevirt.io"
	groupCDI      = "cdi.kubevirt.io"
	groupStorage  = "storage.k8s.io"
)

// GroupPVE is the API group of the plugin's own RBAC resource, pools: no
// API serves it, RBAC rules name it, and the plugin asks about it in
// access reviews (with the pool id as the resource name).
const (
	GroupPVE      = "pve.caddy-proxmox.io"
	ResourcePools = "pools"
)

// RBACRule is the Kubernetes permission that stands for a PVE privilege:
// a verb on a resource (and subresource) of an API group. A namespaced
// rule applies in the namespace of the PVE path (a pool); the others are
// cluster-wide whatever the path.
type RBACRule struct {
	Group       string
	Resource    string
	Subresource string
	Verb        string
	Namespaced  bool
}

// clusterAdmin is full rights on everything.
var clusterAdmin = RBACRule{Group: "*", Resource: "*", Verb: "*"}

// PrivilegeRule maps a PVE privilege onto the RBAC rule KubeVirt's own
// roles grant for the same operations. virtAPI tells whether power
// actions go through virt-api (subresource verbs) or patch the VM (the
// fallback). Privileges without a KubeVirt counterpart (user, realm and
// host administration) map to full rights on everything, i.e.
// cluster-admin, so that only a cluster administrator holds them.
func PrivilegeRule(priv string, virtAPI bool) RBACRule {
	vm := func(verb string) RBACRule {
		return RBACRule{Group: groupKubeVirt, Resource: "virtualmachines", Verb: verb, Namespaced: true}
	}
	switch {
	case priv == "VM.Audit":
		return vm("list")
	case priv == "Pool.Audit":
		// Pools are records of the plugin, not Kubernetes objects: a
		// cluster-wide rule on the plugin's own resource, whose resource
		// names may limit it to some pools.
		return RBACRule{Group: GroupPVE, Resource: ResourcePools, Verb: "get"}
	case priv == "VM.PowerMgmt":
		if virtAPI {
			return RBACRule{Group: groupSub, Resource: "virtualmachines", Subresource: "start", Verb: "update", Namespaced: true}
		}
		return vm("patch")
	case priv == "VM.Console":
		return RBACRule{Group: groupSub, Resource: "virtualmachineinstances", Subresource: "vnc", Verb: "get", Namespaced: true}
	case priv == "VM.Allocate":
		return vm("create")
	case strings.HasPrefix(priv, "VM.Config."):
		// RBAC is not field-granular: every VM.Config.* is a VM patch.
		return vm("patch")
	case priv == "VM.Snapshot", priv == "VM.Backup":
		return RBACRule{Group: groupSnapshot, Resource: "virtualmachinesnapshots", Verb: "create", Namespaced: true}
	case priv == "VM.Snapshot.Rollback":
		return RBACRule{Group: groupSnapshot, Resource: "virtualmachinerestores", Verb: "create", Namespaced: true}
	case priv == "VM.Clone":
		return RBACRule{Group: groupCDI, Resource: "datavolumes", Verb: "create", Namespaced: true}
	case priv == "VM.Monitor", priv == "VM.GuestAgent.Audit":
		return RBACRule{Group: groupSub, Resource: "virtualmachineinstances", Subresource: "guestosinfo", Verb: "get", Namespaced: true}
	case priv == "VM.Migrate":
		return RBACRule{Group: groupKubeVirt, Resource: "virtualmachineinstancemigrations", Verb: "create", Namespaced: true}
	case priv == "Sys.Audit":
		return RBACRule{Group: "", Resource: "nodes", Verb: "list"}
	case priv == "Datastore.Audit":
		return RBACRule{Group: groupStorage, Resource: "storageclasses", Verb: "list"}
	case priv == "Pool.Allocate":
		// Creating, changing and deleting pools (see Pool.Audit).
		return RBACRule{Group: GroupPVE, Resource: ResourcePools, Verb: "update"}
	case priv == "Datastore.AllocateSpace":
		return RBACRule{Group: "", Resource: "persistentvolumeclaims", Verb: "create", Namespaced: true}
	case priv == "Datastore.AllocateTemplate":
		// Templates here are ISO images, downloaded as DataVolumes.
		return RBACRule{Group: groupCDI, Resource: "datavolumes", Verb: "create", Namespaced: true}
	case priv == "Datastore.Allocate":
		// The storage itself is a StorageClass; what the API allocates
		// and frees on it are claims (an ISO image is deleted as one).
		return RBACRule{Group: "", Resource: "persistentvolumeclaims", Verb: "delete", Namespaced: true}
	}
	return clusterAdmin
}
