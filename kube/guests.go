package kube

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// Guest is one VirtualMachine as the Proxmox API sees it. VM and VMI point
// into the informer caches: read them, never modify them.
type Guest struct {
	VMID int
	Node string
	VM   *kubevirtv1.VirtualMachine
	VMI  *kubevirtv1.VirtualMachineInstance // nil when no instance exists
}

// Namespace is the VM's namespace.
func (g Guest) Namespace() string { return g.VM.Namespace }

// PoolAnnotation is the pool the VM names (translate.AnnotationPool, ""
// for none); set is false without the annotation, when the namespace
// decides.
func (g Guest) PoolAnnotation() (pool string, set bool) {
	pool, set = g.VM.Annotations[translate.AnnotationPool]
	return pool, set
}

// Name is the VM's Kubernetes name.
func (g Guest) Name() string { return g.VM.Name }

// PVEName is the name shown to Proxmox clients: the stored PVE name; for
// a VM made through the API without one "VM <vmid>", as qemu-server's
// vmstatus says; else (made outside the API) the Kubernetes name.
func (g Guest) PVEName() string {
	if n := g.VM.Annotations[translate.AnnotationName]; n != "" {
		return n
	}
	if _, made := g.VM.Annotations[translate.AnnotationConfig]; made && g.VMID > 0 {
		return "VM " + strconv.Itoa(g.VMID)
	}
	return g.VM.Name
}

// Template tells whether the VM is a PVE template.
func (g Guest) Template() bool { return g.VM.Labels[translate.LabelTemplate] == "true" }

// State is the guest's PVE status, QMP status and KubeVirt-derived lock
// (translate.GuestStateOf); locks recorded on the VM are the caller's to
// overlay.
func (g Guest) State() translate.GuestState { return translate.GuestStateOf(g.VM, g.VMI) }

// Guests lists every served VM with its vmid, in vmid order.
func (c *Cluster) Guests() []Guest {
	t := c.table()
	nt := c.nodeTable()
	objs := c.vms.list()
	out := make([]Guest, 0, len(objs))
	for _, o := range objs {
		vm := o.(*kubevirtv1.VirtualMachine)
		id, ok := t.byKey[vm.Namespace+"/"+vm.Name]
		if !ok {
			continue // added after the table was built; shows on the next call
		}
		out = append(out, c.guest(id, vm, nt))
	}
	sortGuests(out)
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
	ns, name, _ := strings.Cut(key, "/")
	o := c.vms.get(ns, name)
	if o == nil {
		return Guest{}, ErrNotFound
	}
	return c.guest(vmid, o.(*kubevirtv1.VirtualMachine), c.nodeTable()), nil
}

// GuestOf is the Guest of vm under vmid, as Guest would show it: for a VM
// just written, whose id the cache may not resolve to it alone yet.
func (c *Cluster) GuestOf(vmid int, vm *kubevirtv1.VirtualMachine) Guest {
	return c.guest(vmid, vm, c.nodeTable())
}

func (c *Cluster) guest(id int, vm *kubevirtv1.VirtualMachine, nt *nodeTable) Guest {
	g := Guest{VMID: id, VM: vm}
	if o := c.vmis.get(vm.Namespace, vm.Name); o != nil {
		g.VMI = o.(*kubevirtv1.VirtualMachineInstance)
	}
	g.Node = vm.Annotations[translate.AnnotationNode]
	if g.Node == "" {
		g.Node = homeNode(nt, string(vm.UID))
	}
	return g
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
	if apierrors.IsNotFound(err) || (err == nil && vm.UID != g.VM.UID) {
		return Guest{}, ErrNotFound
	}
	if err != nil {
		return Guest{}, err
	}
	g.VM = vm
	return g, nil
}
