package kubevirtsim

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubevirt"
)

// barrierStatus is a printableStatus no VM controller ever writes.
const barrierStatus virtv1.VirtualMachinePrintableStatus = "SyncBarrier"

// SyncBarrier waits until a VM controller has reconciled the VM ns/name
// after every write made to it before the call, and returns the VM as that
// reconcile left it. It overwrites status.printableStatus with a value no
// controller writes; the controller's next reconcile of the VM (which
// that update triggers) puts the real one back, after acting on the spec
// it saw (a VMI it creates exists by then).
//
// Tests call it before asserting that a controller did not do something,
// instead of sleeping for a while. It needs a running controller: this
// package's, or KubeVirt's virt-controller on a real cluster.
func SyncBarrier(ctx context.Context, kv kubevirt.Interface, ns, name string) (*virtv1.VirtualMachine, error) {
	vms := kv.KubevirtV1().VirtualMachines(ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		vm, err := vms.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		vm.Status.PrintableStatus = barrierStatus
		_, err = vms.UpdateStatus(ctx, vm, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sync barrier on VM %s/%s: %w", ns, name, err)
	}
	var synced *virtv1.VirtualMachine
	err = wait.PollUntilContextCancel(ctx, 5*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		vm, err := vms.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		synced = vm
		return vm.Status.PrintableStatus != barrierStatus, nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for a controller to reconcile VM %s/%s: %w", ns, name, err)
	}
	return synced, nil
}
