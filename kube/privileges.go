package kube

import "strings"

// API groups the privilege table refers to.
const (
	groupKubeVirt = "kubevirt.io"
	groupSub      = "subresources.kubevirt.io"
	groupSnapshot = "snapshot.kubevirt.io"
	groupCDI      = "cdi.kubevirt.io"
	groupStorage  = "storage.k8s.io"
)

// PrivilegeAccess is the Kubernetes permission that stands for a PVE
// privilege in namespace ns ("" for cluster-wide paths), following the
// RBAC rules KubeVirt's own roles grant for the same operations. virtAPI
// tells whether power actions go through virt-api (subresource verbs) or
// patch the VM (the fallback). Privileges without a KubeVirt counterpart
// (user, realm and host administration) map to full rights on everything,
// i.e. cluster-admin.
func PrivilegeAccess(priv, ns string, virtAPI bool) Access {
	vm := func(verb string) Access {
		return Access{Namespace: ns, Group: groupKubeVirt, Resource: "virtualmachines", Verb: verb}
	}
	switch {
	case priv == "VM.Audit", priv == "Pool.Audit":
		return vm("list")
	case priv == "VM.PowerMgmt":
		if virtAPI {
			return Access{Namespace: ns, Group: groupSub, Resource: "virtualmachines", Subresource: "start", Verb: "update"}
		}
		return vm("patch")
	case priv == "VM.Console":
		return Access{Namespace: ns, Group: groupSub, Resource: "virtualmachineinstances", Subresource: "vnc", Verb: "get"}
	case priv == "VM.Allocate":
		return vm("create")
	case strings.HasPrefix(priv, "VM.Config."):
		// RBAC is not field-granular: every VM.Config.* is a VM patch.
		return vm("patch")
	case priv == "VM.Snapshot", priv == "VM.Backup":
		return Access{Namespace: ns, Group: groupSnapshot, Resource: "virtualmachinesnapshots", Verb: "create"}
	case priv == "VM.Snapshot.Rollback":
		return Access{Namespace: ns, Group: groupSnapshot, Resource: "virtualmachinerestores", Verb: "create"}
	case priv == "VM.Clone":
		return Access{Namespace: ns, Group: groupCDI, Resource: "datavolumes", Verb: "create"}
	case priv == "VM.Monitor", priv == "VM.GuestAgent.Audit":
		return Access{Namespace: ns, Group: groupSub, Resource: "virtualmachineinstances", Subresource: "guestosinfo", Verb: "get"}
	case priv == "VM.Migrate":
		return Access{Namespace: ns, Group: groupKubeVirt, Resource: "virtualmachineinstancemigrations", Verb: "create"}
	case priv == "Sys.Audit":
		return Access{Group: "", Resource: "nodes", Verb: "list"}
	case priv == "Datastore.Audit":
		return Access{Group: groupStorage, Resource: "storageclasses", Verb: "list"}
	case priv == "Pool.Allocate":
		// Pools are namespaces: making one is creating a namespace, a
		// cluster-wide right (the write itself, create, patch or delete,
		// is then made as the caller).
		return Access{Group: "", Resource: "namespaces", Verb: "create"}
	case priv == "Datastore.AllocateSpace":
		return Access{Namespace: ns, Group: "", Resource: "persistentvolumeclaims", Verb: "create"}
	case priv == "Datastore.AllocateTemplate":
		// Templates here are ISO images, downloaded as DataVolumes.
		return Access{Namespace: ns, Group: groupCDI, Resource: "datavolumes", Verb: "create"}
	case priv == "Datastore.Allocate":
		// The storage itself is a StorageClass; what the API allocates
		// and frees on it are claims (an ISO image is deleted as one).
		return Access{Namespace: ns, Group: "", Resource: "persistentvolumeclaims", Verb: "delete"}
	}
	return Access{Group: "*", Resource: "*", Verb: "*"}
}
