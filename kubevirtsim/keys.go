// Package kubevirtsim is a small stand-in for KubeVirt's virt-controller,
// virt-handler and the lifecycle subresources of virt-api
// (subresources.kubevirt.io). It is used by the integration tests (a real
// kube-apiserver with the KubeVirt CRDs but no KubeVirt components) and by the
// "simulate" mode, which runs the production code over in-memory fake
// clientsets.
//
// The behaviour follows KubeVirt v1.8.0 as far as a client can observe it:
// run strategies and state change requests (pkg/virt-controller/watch/vm),
// VMI phases and conditions (pkg/virt-controller/watch/vmi, pkg/virt-handler)
// and the start/stop/restart/pause/unpause/softreboot/reset handlers
// (pkg/virt-api/rest/lifecycle.go).
package kubevirtsim

// Keys shared with the translation layer. These mirror translate's keys;
// translate is written concurrently and must not be imported from here.
const (
	labelVMID      = "pve.caddy-proxmox.io/vmid"
	annotationNode = "pve.caddy-proxmox.io/node"
	// annotationConfig holds the PVE config the caddy-proxmox API keeps
	// (JSON, key → value); its agent key says whether the guest runs one.
	annotationConfig = "pve.caddy-proxmox.io/config"
)

// Annotations understood (or written) by the simulator. They only exist in
// this simulator; real KubeVirt ignores them.
const (
	// AnnotationAgent set to "true" on a VMI, on the VM template metadata or
	// on the VM itself simulates a connected QEMU guest agent: the VMI gets
	// the AgentConnected condition, status.guestOSInfo and guest-side
	// interface details.
	AnnotationAgent = "kubevirtsim.caddy-proxmox.io/agent"
	// AnnotationPodIP on a VMI (or its VM's template metadata) is the
	// IPv4 address the pod network's CNI gives the VMI's pod, which
	// KubeVirt reports for its pod-network interface. Tests set a
	// loopback address they serve on; without it the address is made up.
	// Nodes' kubelet gives it to the VMI's virt-launcher pod.
	AnnotationPodIP = "kubevirtsim.caddy-proxmox.io/pod-ip"
	// AnnotationGuestOS selects the guest OS fixture reported through the
	// agent: "debian" (default) or "windows".
	AnnotationGuestOS = "kubevirtsim.caddy-proxmox.io/guest-os"
	// AnnotationGuestInterfaces on a VMI (or its VM's template metadata)
	// lists interfaces that exist only inside the guest (Docker's docker0,
	// bridges the guest makes, tunnels), as "name[@mac]=ip;ip,name,...",
	// "name@=..." for one without a MAC (else one is made up): with the
	// agent connected, virt-handler reports them after the VMI's NICs.
	AnnotationGuestInterfaces = "kubevirtsim.caddy-proxmox.io/guest-interfaces"
	// AnnotationReboots counts soft reboots (softreboot subresource) of a VMI.
	AnnotationReboots = "kubevirtsim.caddy-proxmox.io/reboots"
	// AnnotationResets counts hard resets (reset subresource) of a VMI.
	AnnotationResets = "kubevirtsim.caddy-proxmox.io/resets"
	// AnnotationTemplateHash records a hash of the VM template spec a VMI
	// was started from; the controller derives the VM's RestartRequired
	// condition from it.
	AnnotationTemplateHash = "kubevirtsim.caddy-proxmox.io/template-hash"
)

// Values the simulator reports where real KubeVirt reports build or host
// specific data.
const (
	launcherImage      = "quay.io/kubevirt/virt-launcher:v1.8.0"
	defaultMachineType = "pc-q35-rhel9.6.0"
	kubevirtVersion    = "v1.8.0"
	// nonRootUser is the qemu user id virt-launcher runs as (KubeVirt's
	// default non-root mode sets status.runtimeUser to it).
	nonRootUser = 107
)
