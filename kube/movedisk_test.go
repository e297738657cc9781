package kube

import (
	"context"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/caddy-proxmox/caddy-proxmox/kubevirtsim"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// A move_disk with delete=1 ends only once its source claim is gone from
// the cache, as PVE's move frees the source volume before its task ends:
// a content list read after the end must not show it. kube-apiserver
// takes the claim's delete here but keeps the claim (a finalizer, or the
// garbage collector behind its DataVolume, would) until the test lets go.
func TestMoveWithDeleteEndsWithTheSourceGone(t *testing.T) {
	checkGoroutines(t)
	owner := metav1.OwnerReference{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: "mover", UID: "mover-uid"}
	vm := vmOnDataVolume("mover", "vm-900-disk-1", kubevirtv1.VirtualMachineStatusStopped)
	target := &cdiv1.DataVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "vm-900-disk-1", Namespace: "default", UID: "target-uid", OwnerReferences: []metav1.OwnerReference{owner}},
		Status:     cdiv1.DataVolumeStatus{Phase: cdiv1.Succeeded},
	}
	source := claim("default", "vm-900-disk-0", nil)
	source.UID, source.Status.Phase = "source-uid", corev1.ClaimBound
	kc, kv, cdi := kubevirtsim.NewFakeClientsWithCDI(append(kubevirtsim.Seed(), []k8sruntime.Object{vm, target, source}...)...)
	var held atomic.Bool
	var deletes atomic.Int32
	held.Store(true)
	kc.(*k8sfake.Clientset).PrependReactor("delete", "persistentvolumeclaims", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		if a.(k8stesting.DeleteAction).GetName() != source.Name || !held.Load() {
			return false, nil, nil
		}
		deletes.Add(1)
		return true, nil, nil
	})
	c := startWithCDI(t, kc, kv, cdi)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	task, err := c.Tasks.Begin(ctx, TaskSpec{
		Node: seedNode1, Type: translate.TaskMove, ID: "900", User: "root@pam", Goal: GoalMoved,
		Namespace: "default", Name: "mover", UID: "mover-uid", Target: "vm-900-disk-1", Object: "local-lvm:vm-900-disk-0",
	})
	if err != nil {
		t.Fatal(err)
	}
	upid := task.UPID.String()
	read := func() *Task {
		got, err := c.Tasks.Get(ctx, upid)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	// The copy is done and the source's delete was sent: the task still
	// waits while the claim is there.
	eventually(t, "the source claim's delete", func() (bool, string) {
		return deletes.Load() > 0, "no delete yet"
	})
	if got := read(); !got.Running() || c.CachedPVC("default", source.Name) == nil {
		t.Fatalf("with the source claim still there: task %s %q, claim cached %v", got.Status, got.ExitStatus, c.CachedPVC("default", source.Name) != nil)
	}
	// The claim goes: the task ends OK, saying it removed the source.
	held.Store(false)
	if err := kc.CoreV1().PersistentVolumeClaims("default").Delete(ctx, source.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the move's end", func() (bool, string) {
		got := read()
		return !got.Running(), got.Status
	})
	if got := read(); got.ExitStatus != translate.ExitOK || c.CachedPVC("default", source.Name) != nil {
		t.Fatalf("task ended %q with the source claim cached: %v", got.ExitStatus, c.CachedPVC("default", source.Name) != nil)
	}
}
