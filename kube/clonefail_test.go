package kube

import (
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	k8stesting "k8s.io/client-go/testing"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubevirt"

	"github.com/caddy-proxmox/caddy-proxmox/kubevirtsim"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// TestFailedCloneRemovesItsVM: a clone whose volumes fail ends with the
// failure and its half-made VM is deleted, as PVE's clone worker destroys
// its target; a create that fails the same way keeps its VM (PVE keeps a
// created VM whose start failed, and the create endpoint undoes its own).
func TestFailedCloneRemovesItsVM(t *testing.T) {
	// KubeVirt's finalizer holds a deleted VM a while: the delete returns
	// before the VM leaves the cluster, and the cache.
	e := newEnv(t, envOptions{beforeController: func(_ kubernetes.Interface, kv kubevirt.Interface) {
		fake := kv.(*kubevirtsim.FakeKubeVirtClientset)
		fake.PrependReactor("delete", "virtualmachines", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
			d := a.(k8stesting.DeleteAction)
			go func() {
				time.Sleep(300 * time.Millisecond)
				_ = fake.Tracker().Delete(d.GetResource(), d.GetNamespace(), d.GetName())
			}()
			return true, nil, nil
		})
	}})
	c := e.cluster(Options{}, false)
	fail := func(vmid int, typ string) (*Task, Guest) {
		t.Helper()
		g := mustGuest(t, c, vmid)
		task, err := c.Tasks.Begin(e.ctx, specFor(g, GoalProvisioned, typ))
		if err != nil {
			t.Fatal(err)
		}
		vm := g.VM().DeepCopy()
		vm.Status.PrintableStatus = kubevirtv1.VirtualMachineStatusDataVolumeError
		if _, err := e.kv.KubevirtV1().VirtualMachines(vm.Namespace).UpdateStatus(e.ctx, vm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		end := waitTaskEnd(t, c, task.UPID.String())
		if !strings.HasPrefix(end.ExitStatus, "volume provisioning failed") {
			t.Fatalf("%s: exit %q", typ, end.ExitStatus)
		}
		return end, g
	}

	end, clone := fail(100, translate.TaskClone)
	if !slices.Contains(end.Log, "removing the partly cloned VM "+clone.Namespace()+"/"+clone.Name()) {
		t.Fatalf("clone log: %q", end.Log)
	}
	// Gone before the end was seen: a client that reads the end and
	// destroys the VM finds none, as on PVE.
	if g, err := c.Guest(clone.VMID); err == nil && g.UID() == clone.UID() {
		t.Fatalf("the failed clone's end was read while its VM %s is still cached", g.Name())
	}
	if _, err := e.kv.KubevirtV1().VirtualMachines(clone.Namespace()).Get(e.ctx, clone.Name(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the failed clone's VM after its end: %v", err)
	}

	_, created := fail(101, translate.TaskCreate)
	waitPasses(t, c, 2)
	if _, err := e.kv.KubevirtV1().VirtualMachines(created.Namespace()).Get(e.ctx, created.Name(), metav1.GetOptions{}); err != nil {
		t.Fatalf("a failed create's VM: %v", err)
	}
}

// TestInterruptTask: a stopped task ends at once with PVE's "received
// interrupt"; a clone stopped so is a failed clone, and its VM goes.
func TestInterruptTask(t *testing.T) {
	e := newEnv(t, envOptions{}) // no controller: nothing reaches a goal
	c := e.cluster(Options{}, false)
	start, err := c.Tasks.Begin(e.ctx, specFor(mustGuest(t, c, 100), GoalRunning, translate.TaskStart))
	if err != nil {
		t.Fatal(err)
	}
	clone := mustGuest(t, c, 101)
	cloning, err := c.Tasks.Begin(e.ctx, specFor(clone, GoalProvisioned, translate.TaskClone))
	if err != nil {
		t.Fatal(err)
	}
	waitPasses(t, c, 1)
	for _, task := range []*Task{start, cloning} {
		if got, _ := c.Tasks.Get(e.ctx, task.UPID.String()); !got.Running() {
			t.Fatalf("%s ended before it was stopped: %q", task.UPID.Type, got.ExitStatus)
		}
		c.Tasks.Interrupt(e.ctx, task.UPID.String())
		waitRecord(t, e, "default", task.UPID, ExitInterrupted)
	}
	eventually(t, "the stopped clone's VM to go", func() (bool, string) {
		_, err := e.kv.KubevirtV1().VirtualMachines(clone.Namespace()).Get(e.ctx, clone.Name(), metav1.GetOptions{})
		return apierrors.IsNotFound(err), "VM still there"
	})
	if _, err := e.kv.KubevirtV1().VirtualMachines("default").Get(e.ctx, mustGuest(t, c, 100).Name(), metav1.GetOptions{}); err != nil {
		t.Fatalf("the stopped start's VM: %v", err)
	}
}
