package testenv

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
	snapshotv1 "kubevirt.io/api/snapshot/v1beta1"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testutil"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// VMByID returns the one VirtualMachine labelled with PVE vmid id, read
// straight from kube-apiserver, and fails t unless exactly one has it.
func (e *Env) VMByID(t testing.TB, id string) *virtv1.VirtualMachine {
	t.Helper()
	list, err := e.DirectKubeVirt.KubevirtV1().VirtualMachines(metav1.NamespaceAll).List(context.Background(), metav1.ListOptions{LabelSelector: translate.LabelVMID + "=" + id})
	if err != nil {
		t.Fatalf("VM with vmid %s: %v", id, err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("VM with vmid %s: %d found", id, len(list.Items))
	}
	return &list.Items[0]
}

// KubectlSnapshot takes a VirtualMachineSnapshot name of vm as a user
// would with kubectl, past the plugin, deletes it when t ends, and waits
// until KubeVirt says it succeeded and has let go of the VM (a client
// calling next sees no snapshot in progress). It returns the snapshot
// then.
func (e *Env) KubectlSnapshot(t testing.TB, vm *virtv1.VirtualMachine, name string) *snapshotv1.VirtualMachineSnapshot {
	t.Helper()
	ctx := context.Background()
	snaps := e.KubeVirt.SnapshotV1beta1().VirtualMachineSnapshots(vm.Namespace)
	group := virtv1.SchemeGroupVersion.Group
	snap := &snapshotv1.VirtualMachineSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: vm.Namespace},
		Spec:       snapshotv1.VirtualMachineSnapshotSpec{Source: corev1.TypedLocalObjectReference{APIGroup: &group, Kind: "VirtualMachine", Name: vm.Name}},
	}
	if _, err := snaps.Create(ctx, snap, metav1.CreateOptions{}); err != nil {
		t.Fatalf("kubectl snapshot %s/%s: %v", vm.Namespace, name, err)
	}
	t.Cleanup(func() { _ = snaps.Delete(ctx, name, metav1.DeleteOptions{}) })
	testutil.Wait(t, time.Minute, "kubectl snapshot "+name+" to succeed", func() (bool, string) {
		s, err := snaps.Get(ctx, name, metav1.GetOptions{})
		if err != nil || s.Status == nil || s.Status.Phase != snapshotv1.Succeeded {
			return false, fmt.Sprintf("%v %+v", err, s.Status)
		}
		cur, err := e.KubeVirt.KubevirtV1().VirtualMachines(vm.Namespace).Get(ctx, vm.Name, metav1.GetOptions{})
		if err != nil {
			return false, "VM: " + err.Error()
		}
		if cur.Status.SnapshotInProgress != nil {
			return false, "the VM's snapshot in progress: " + *cur.Status.SnapshotInProgress
		}
		snap = s
		return true, ""
	})
	return snap
}

// NoRestoreOf fails t if a VirtualMachineRestore in ns names the snapshot:
// for a rollback that must be refused before KubeVirt is asked.
func (e *Env) NoRestoreOf(t testing.TB, ns, snapshot string) {
	t.Helper()
	restores, err := e.KubeVirt.SnapshotV1beta1().VirtualMachineRestores(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, rs := range restores.Items {
		if rs.Spec.VirtualMachineSnapshotName == snapshot {
			t.Errorf("a restore was asked for: %s", rs.Name)
		}
	}
}
