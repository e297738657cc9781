package kube

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// Guest is one VirtualMachine as the Proxmox API sees it. What it returns
// points into the informer caches: read it, never modify it.
//
// The caches keep specs packed (packed.go): VM and VMI decode the whole
// objects on first use (once per Guest value and its copies), Meta and
// InstanceMeta make the metadata and hot status on first use, without
// decoding; Namespace, Name, UID, ResourceVersion, PVEName, Template and
// PoolAnnotation read the cache directly. Hot paths (lists,
// status/current, the task worker) read these.
type Guest struct {
	VMID int
	Node string
	vm   *packedVM  // nil for a Guest made of a whole VM (GuestOf, WithVM)
	vmi  *packedVMI // nil when no instance exists
	full *guestFull
	key  string // the cache's namespace/name, when read from it
}

// guestFull holds the whole objects once decoded; Guest copies share it.
type guestFull struct {
	vmOnce, vmiOnce, metaOnce, vmMetaOnce sync.Once
	vm, vmMeta                            *kubevirtv1.VirtualMachine
	vmi, vmiMeta                          *kubevirtv1.VirtualMachineInstance
}

// NewGuest is a Guest of whole objects (vmi nil when none exists), for
// tests and for objects just read from the apiserver.
func NewGuest(vmid int, node string, vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) Guest {
	g := Guest{VMID: vmid, Node: node, full: &guestFull{vm: vm, vmi: vmi}}
	g.full.vmOnce.Do(func() {})
	g.full.vmiOnce.Do(func() {})
	return g
}

// WithVM is g with vm, a whole VM (one just written or re-read), as its
// VM; its instance stays.
func (g Guest) WithVM(vm *kubevirtv1.VirtualMachine) Guest {
	vmi := g.VMI()
	return NewGuest(g.VMID, g.Node, vm, vmi)
}

// VM is the whole VirtualMachine (its spec decoded on first use).
func (g Guest) VM() *kubevirtv1.VirtualMachine {
	if g.full == nil {
		return g.Meta()
	}
	g.full.vmOnce.Do(func() {
		if g.vm != nil {
			g.full.vm = g.vm.full()
		}
	})
	return g.full.vm
}

// VMI is the whole instance (its spec decoded on first use), nil when none
// exists.
func (g Guest) VMI() *kubevirtv1.VirtualMachineInstance {
	if g.full == nil {
		return g.InstanceMeta()
	}
	g.full.vmiOnce.Do(func() {
		if g.vmi != nil {
			g.full.vmi = g.vmi.full()
		}
	})
	return g.full.vmi
}

// Summary is what the VM's rows show of its spec and stored config
// (translate.SummarizeVM), without decoding: the cache worked it out when
// it stored this version of the VM.
func (g Guest) Summary() translate.VMSummary {
	if g.vm != nil {
		return g.vm.summary
	}
	return translate.SummarizeVM(g.VM())
}

// InstanceSummary is the instance's translate.InstanceSummary without
// decoding (the zero one when no instance exists).
func (g Guest) InstanceSummary() translate.InstanceSummary {
	if g.vmi != nil {
		return g.vmi.summary
	}
	if g.vm != nil {
		return translate.InstanceSummary{}
	}
	return translate.SummarizeInstance(g.VMI())
}

// Meta is the VM's metadata and status without decoding: of its spec it
// has only Running and RunStrategy, of its status what states, locks and
// tasks read (hotVMStatus: not the volume and snapshot bookkeeping, its
// conditions without their times); its stored PVE config annotation is
// there, but empty. Whatever reads more (the config, its template, disks,
// sizes) reads VM. It is made on first use, once per Guest.
func (g Guest) Meta() *kubevirtv1.VirtualMachine {
	if g.vm != nil {
		if g.full == nil {
			return g.vm.meta()
		}
		g.full.vmMetaOnce.Do(func() { g.full.vmMeta = g.vm.meta() })
		return g.full.vmMeta
	}
	if g.full != nil {
		return g.full.vm
	}
	return nil
}

// InstanceMeta is the instance's metadata and status without decoding,
// nil when no instance exists. Its spec is empty, and of its status it has
// the phase, node, migration state and conditions (without their times:
// hotVMIStatus); whatever reads more (the agent's interfaces and OS, the
// memory and CPU topology, the machine, the phase history) reads VMI.
func (g Guest) InstanceMeta() *kubevirtv1.VirtualMachineInstance {
	if g.vmi != nil {
		if g.full == nil {
			return g.vmi.meta()
		}
		g.full.metaOnce.Do(func() { g.full.vmiMeta = g.vmi.meta() })
		return g.full.vmiMeta
	}
	if g.full != nil && g.vm == nil {
		return g.full.vmi
	}
	return nil
}

// Packed is g without the whole objects it has decoded, for a Guest kept
// beyond a request (a row cache): those would make the cache's packing
// moot. A Guest made of whole objects (NewGuest) stays as it is.
func (g Guest) Packed() Guest {
	if g.vm != nil {
		g.full = &guestFull{}
	}
	return g
}

// objectMeta is the VM's metadata without building a VM (Meta): the
// cached record when there is one. Its labels and annotations are read
// through annotation and Template, without maps.
func (g Guest) objectMeta() metav1.Object {
	if g.vm != nil {
		return g.vm
	}
	return g.Meta()
}

// annotation is the VM's annotation k, and whether it has one.
func (g Guest) annotation(k string) (string, bool) {
	if g.vm != nil {
		return g.vm.Annotations.get(k)
	}
	v, ok := g.Meta().Annotations[k]
	return v, ok
}

// Namespace is the VM's namespace.
func (g Guest) Namespace() string { return g.objectMeta().GetNamespace() }

// UID is the VM's UID.
func (g Guest) UID() types.UID { return g.objectMeta().GetUID() }

// ResourceVersion is the VM's resourceVersion as cached.
func (g Guest) ResourceVersion() string { return g.objectMeta().GetResourceVersion() }

// Key is the VM's namespace/name, as the caches key it: shared with the
// cache for a Guest read from it, made otherwise.
func (g Guest) Key() string {
	if g.key != "" {
		return g.key
	}
	return g.Namespace() + "/" + g.Name()
}

// InstanceVersion is the instance's resourceVersion as cached, "" when
// no instance exists; unlike InstanceMeta it makes nothing.
func (g Guest) InstanceVersion() string {
	if g.vmi != nil {
		return g.vmi.version
	}
	if m := g.InstanceMeta(); m != nil {
		return m.ResourceVersion
	}
	return ""
}

// PoolAnnotation is the pool the VM names (translate.AnnotationPool, ""
// for none); set is false without the annotation, when the namespace
// decides.
func (g Guest) PoolAnnotation() (pool string, set bool) {
	return g.annotation(translate.AnnotationPool)
}

// Name is the VM's Kubernetes name.
func (g Guest) Name() string { return g.objectMeta().GetName() }

// PVEName is the name shown to Proxmox clients: the stored PVE name; for
// a VM made through the API without one "VM <vmid>", as qemu-server's
// vmstatus says; else (made outside the API) the Kubernetes name.
func (g Guest) PVEName() string {
	if n, _ := g.annotation(translate.AnnotationName); n != "" {
		return n
	}
	if _, made := g.annotation(translate.AnnotationConfig); made && g.VMID > 0 {
		return "VM " + strconv.Itoa(g.VMID)
	}
	return g.Name()
}

// Template tells whether the VM is a PVE template.
func (g Guest) Template() bool {
	if g.vm != nil {
		return g.vm.label(translate.LabelTemplate) == "true"
	}
	return g.Meta().Labels[translate.LabelTemplate] == "true"
}

// State is the guest's PVE status, QMP status and KubeVirt-derived lock
// (translate.GuestStateOf); locks recorded on the VM are the caller's to
// overlay.
func (g Guest) State() translate.GuestState {
	if g.vm != nil {
		// Of the VM the state reads its status alone: no Meta needed.
		vm := kubevirtv1.VirtualMachine{Status: g.vm.status.vmStatus()}
		return translate.GuestStateOf(&vm, g.InstanceMeta())
	}
	return translate.GuestStateOf(g.Meta(), g.InstanceMeta())
}

// printableStatus is the VM's KubeVirt printable status.
func (g Guest) printableStatus() kubevirtv1.VirtualMachinePrintableStatus {
	if g.vm != nil {
		return g.vm.status.printable
	}
	return g.Meta().Status.PrintableStatus
}

// Guests lists every served VM with its vmid, in vmid order.
func (c *Cluster) Guests() []Guest {
	t := c.table()
	nt := c.nodeTable()
	// The table's VMs, in its (vmid) order: a VM added after the table was
	// built shows on the next call, one removed since is skipped.
	objs := c.vms.getKeys(t.keys)
	out := make([]Guest, 0, len(objs))
	for i, o := range objs {
		if vm, ok := o.(*packedVM); ok {
			out = append(out, c.guestAt(int(t.ids[i]), t.keys[i], vm, nt))
		}
	}
	return out
}

// GuestsVersion changes whenever what Guests and Guest return may have:
// a VM or an instance was added, changed or removed (by an informer event
// or by a write of this process), or the node table changed. Views built
// from guests stay valid while it stays the same; usage readings have
// their own (MetricsVersion).
func (c *Cluster) GuestsVersion() uint64 { return c.guestGen.Load() }

// Guest resolves a vmid. It returns ErrNotFound or an *AmbiguousError.
func (c *Cluster) Guest(vmid int) (Guest, error) {
	key, err := c.table().resolve(vmid)
	if err != nil {
		return Guest{}, err
	}
	vm, ok := c.vms.getKey(key).(*packedVM)
	if !ok {
		return Guest{}, ErrNotFound
	}
	return c.guestAt(vmid, key, vm, c.nodeTable()), nil
}

// GuestOf is the Guest of vm under vmid, as Guest would show it: for a VM
// just written, whose id the cache may not resolve to it alone yet.
func (c *Cluster) GuestOf(vmid int, vm *kubevirtv1.VirtualMachine) Guest {
	var vmi *kubevirtv1.VirtualMachineInstance
	if p := c.cachedVMI(vm.Namespace, vm.Name); p != nil {
		vmi = p.full()
	}
	return NewGuest(vmid, guestNode(c.nodeTable(), vm), vm, vmi)
}

func (c *Cluster) guest(id int, vm *packedVM, nt *nodeTable) Guest {
	return c.guestAt(id, vm.Namespace+"/"+vm.Name, vm, nt)
}

// guestAt is guest of the VM cached under key: its instance has the same.
func (c *Cluster) guestAt(id int, key string, vm *packedVM, nt *nodeTable) Guest {
	g := Guest{VMID: id, vm: vm, full: &guestFull{}, key: key}
	g.vmi, _ = c.vmis.getKey(key).(*packedVMI)
	if recorded := vm.annotation(translate.AnnotationNode); recorded != "" {
		g.Node = recorded
	} else {
		g.Node = homeNode(nt, string(vm.GetUID()))
	}
	return g
}

// guestNode is the PVE node a VM shows on: the one recorded on it, else
// its home node.
func guestNode(nt *nodeTable, vm *kubevirtv1.VirtualMachine) string {
	return guestNodeOf(nt, vm.Annotations[translate.AnnotationNode], vm.UID)
}

// guestNodeOf is guestNode of a VM with the node annotation recorded and
// uid.
func guestNodeOf(nt *nodeTable, recorded string, uid types.UID) string {
	if recorded != "" {
		return recorded
	}
	return homeNode(nt, string(uid))
}

func sortGuests(gs []Guest) {
	slices.SortFunc(gs, func(a, b Guest) int { return cmp.Compare(a.VMID, b.VMID) })
}

// VMNameTaken tells whether a VM named name exists in namespace ns.
func (c *Cluster) VMNameTaken(ns, name string) bool { return c.vms.get(ns, name) != nil }

// Refresh re-reads g's VM from the apiserver (not the cache), for a write
// that lost a race with another writer (KubeVirt updates VMs often). It
// fails with ErrNotFound when the VM is gone or was replaced by a namesake.
func (c *Cluster) Refresh(ctx context.Context, g Guest) (Guest, error) {
	vm, err := c.as(ctx).kv.KubevirtV1().VirtualMachines(g.Namespace()).Get(ctx, g.Name(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && vm.UID != g.UID()) {
		return Guest{}, ErrNotFound
	}
	if err != nil {
		return Guest{}, err
	}
	return g.WithVM(vm), nil
}
