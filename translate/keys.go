package translate

// Label and annotation keys stored on KubeVirt VirtualMachine objects. They
// make the PVE identity of a VM (vmid, node, name, raw config) survive
// restarts of the emulator, because Kubernetes object names are immutable and
// carry none of it.
const (
	// KeyPrefix begins every label and annotation key of the plugin's own.
	KeyPrefix = "pve.caddy-proxmox.io/"

	// LabelVMID holds the decimal PVE vmid. It is a label so that the
	// emulator can select a VM by vmid and find used ids for nextid.
	LabelVMID = "pve.caddy-proxmox.io/vmid"

	// LabelTemplate is "true" on VMs converted to PVE templates, so that
	// listings can report template=1 and start requests can be refused.
	LabelTemplate = "pve.caddy-proxmox.io/template"

	// AnnotationNode holds the stable PVE home node of the VM. Clients force
	// replacement when the node of a VM changes, so the live VMI node must
	// not be reported.
	AnnotationNode = "pve.caddy-proxmox.io/node"

	// AnnotationName holds the PVE name of the VM, which unlike the
	// Kubernetes object name can be changed by a config update.
	AnnotationName = "pve.caddy-proxmox.io/name"

	// AnnotationConfig holds the raw PVE config keys as a JSON object string,
	// so that keys with no KubeVirt equivalent round-trip unchanged and
	// clients that diff their config converge.
	AnnotationConfig = "pve.caddy-proxmox.io/config"

	// AnnotationLock holds a PVE config lock (e.g. "clone", "create") set by
	// the emulator while a long-running task owns the VM.
	AnnotationLock = "pve.caddy-proxmox.io/lock"

	// AnnotationDiskKeys pins the PVE keys of disks not made through this
	// API (JSON object, key -> disk name), written with every config
	// update, so that such a disk keeps its key when disks or keys before
	// it go away: a client that repeats a delete must never hit the disk
	// that moved into the freed key.
	AnnotationDiskKeys = "pve.caddy-proxmox.io/disk-keys"
)

// Snapshot annotations: PVE snapshot names allow what Kubernetes names do
// not, so the PVE name is kept beside a derived object name.
const (
	AnnotationSnapName    = "pve.caddy-proxmox.io/snapname"
	AnnotationDescription = "pve.caddy-proxmox.io/description"
)
