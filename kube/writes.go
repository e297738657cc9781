package kube

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// CreateVM creates a VirtualMachine. The caller has built it from PVE
// parameters; this only writes it.
func (c *Cluster) CreateVM(ctx context.Context, vm *kubevirtv1.VirtualMachine) (*kubevirtv1.VirtualMachine, error) {
	if !c.Serves(vm.Namespace) {
		return nil, fmt.Errorf("namespace %q is not served", vm.Namespace)
	}
	out, err := c.KubeVirt.KubevirtV1().VirtualMachines(vm.Namespace).Create(ctx, vm, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	// Read-your-writes: put it in the cache now so that the vmid resolves
	// for the client's next call even before the watch event arrives.
	if inf := c.vms.informerFor(out.Namespace); inf != nil {
		if cp, err := stripVM(out.DeepCopy()); err == nil {
			_ = inf.GetStore().Add(cp)
		}
	}
	c.vmidGen.Add(1)
	return out, nil
}

// DeleteVM deletes the VM, guarded by its UID. Owned objects (the VMI,
// DataVolumes created with it) are removed by the garbage collector.
func (c *Cluster) DeleteVM(ctx context.Context, g Guest) error {
	uid := g.VM.UID
	// Background, not foreground: foreground deletion waits on the garbage
	// collector, and the delete task must end when the VM object is gone.
	bg := metav1.DeletePropagationBackground
	return c.KubeVirt.KubevirtV1().VirtualMachines(g.Namespace()).Delete(ctx, g.Name(), metav1.DeleteOptions{
		Preconditions:     &metav1.Preconditions{UID: &uid},
		PropagationPolicy: &bg,
	})
}
