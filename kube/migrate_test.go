package kube

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	k8stesting "k8s.io/client-go/testing"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubevirt"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testutil"
	"github.com/caddy-proxmox/caddy-proxmox/kubevirtsim"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// preferredHost is the hostname a template's first preferred node
// affinity term names (the seeded VMs prefer their home node).
func preferredHost(vm *kubevirtv1.VirtualMachine) string {
	aff := vm.Spec.Template.Spec.Affinity
	if aff == nil || aff.NodeAffinity == nil || len(aff.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) == 0 {
		return ""
	}
	return strings.Join(aff.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].Preference.MatchExpressions[0].Values, ",")
}

func TestSetHomeNodeMovesAnnotationAndPins(t *testing.T) {
	e := newEnv(t, envOptions{controller: true})
	c := e.cluster(Options{}, true)
	g := mustGuest(t, c, 101) // win-11: stopped, home kv-node-2, prefers it
	if g.Node != seedNode2 || preferredHost(g.VM()) != "kv-node-2.lab.internal" {
		t.Fatalf("seed: node %s, preference %q", g.Node, preferredHost(g.VM()))
	}
	to, _ := c.Node(seedNode3)
	if !c.NodeAllows(g, to, true) {
		t.Fatal("an unpinned node is not allowed")
	}
	spec := specFor(g, GoalHomeNode, translate.TaskMigrate)
	spec.Target = seedNode3
	if err := c.SetHomeNode(e.ctx, g, seedNode3); err != nil {
		t.Fatal(err)
	}
	task, err := c.Tasks.Begin(e.ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if end := waitTaskEnd(t, c, task.UPID.String()); end.ExitStatus != translate.ExitOK {
		t.Fatalf("task: %q %q", end.ExitStatus, end.Log)
	}
	g = mustGuest(t, c, 101)
	vm := e.mustGetVM("default", "win-11")
	if g.Node != seedNode3 || vm.Annotations[translate.AnnotationNode] != seedNode3 || preferredHost(vm) != "kv-node-3.lab.internal" {
		t.Fatalf("after: node %s, annotation %q, preference %q", g.Node, vm.Annotations[translate.AnnotationNode], preferredHost(vm))
	}

	// A required pin elsewhere is not moved, and it forbids the node.
	vm.Spec.Template.Spec.NodeSelector = map[string]string{translate.LabelHostname: "kv-node-1.lab.internal", "zone": "a"}
	if _, err := e.kv.KubevirtV1().VirtualMachines("default").Update(e.ctx, vm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the cache to see the selector", func() (bool, string) {
		g = mustGuest(t, c, 101)
		return g.VM().Spec.Template.Spec.NodeSelector["zone"] == "a", g.VM().ResourceVersion
	})
	if to, _ := c.Node(seedNode2); c.NodeAllows(g, to, true) {
		t.Fatal("a node outside the VM's selector is allowed")
	}
}

func TestLiveMigrationTask(t *testing.T) {
	// debian-12's disk on shared storage: KubeVirt live-migrates only
	// guests whose claims are all ReadWriteMany.
	e := newEnv(t, envOptions{controller: true, beforeController: func(kube kubernetes.Interface, _ kubevirt.Interface) {
		pvcs := kube.CoreV1().PersistentVolumeClaims("default")
		pvc, err := pvcs.Get(context.Background(), "vm-100-disk-0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pvc.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
		if _, err := pvcs.Update(context.Background(), pvc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}})
	c := e.cluster(Options{}, true)
	g := waitRunning(t, c, 100) // debian-12, home kv-node-1, runs there
	if g.Node != seedNode1 || g.VMI().Status.NodeName != "kv-node-1.lab.internal" {
		t.Fatalf("seed: node %s, instance on %s", g.Node, g.VMI().Status.NodeName)
	}

	// A node the guest cannot go to: the task ends with KubeVirt's reason,
	// and nothing moves.
	cordon := func(name string, on bool) {
		t.Helper()
		n, err := e.kube.CoreV1().Nodes().Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Spec.Unschedulable = on
		if _, err := e.kube.CoreV1().Nodes().Update(e.ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The controller places from its own node cache, as the
		// scheduler does: a migration created before that cache has the
		// change would go where the test says it cannot.
		testutil.WaitFor(t, waitTimeout, "the controller to see the cordon", func() bool {
			return e.ctrl.NodeCached(name, func(n *corev1.Node) bool { return n.Spec.Unschedulable == on })
		})
	}
	cordon("kv-node-3.lab.internal", true)
	to, _ := c.Node(seedNode3)
	m, err := c.CreateMigration(e.ctx, g, to)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(m.Name, MigrationPrefix+"100-") || m.Spec.AddedNodeSelector[translate.LabelHostname] != "kv-node-3.lab.internal" {
		t.Fatalf("migration %s: %v", m.Name, m.Spec.AddedNodeSelector)
	}
	spec := specFor(g, GoalMigrated, translate.TaskMigrate)
	spec.Object, spec.Target = m.Name, seedNode3
	task, err := c.Tasks.Begin(e.ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	end := waitTaskEnd(t, c, task.UPID.String())
	if !strings.HasPrefix(end.ExitStatus, "migration aborted: Migration target pod for VMI [default/debian-12] is unschedulable: 0/3 nodes are available:") ||
		!strings.Contains(end.ExitStatus, "node(s) were unschedulable") {
		t.Fatalf("failed migration: %q", end.ExitStatus)
	}
	if g := mustGuest(t, c, 100); g.Node != seedNode1 || g.VMI().Status.NodeName != "kv-node-1.lab.internal" {
		t.Fatalf("after a failed migration: node %s, instance on %s", g.Node, g.VMI().Status.NodeName)
	}
	cordon("kv-node-3.lab.internal", false)

	// Now it goes: the task ends once the instance runs there, and the VM's
	// PVE node and preference have followed.
	g = mustGuest(t, c, 100)
	m, err = c.CreateMigration(e.ctx, g, to)
	if err != nil {
		t.Fatal(err)
	}
	spec.Object = m.Name
	task, err = c.Tasks.Begin(e.ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	end = waitTaskEnd(t, c, task.UPID.String())
	if end.ExitStatus != translate.ExitOK || !strings.HasPrefix(end.Log[len(end.Log)-2], "migration finished successfully (duration 00:00:") {
		t.Fatalf("migration: %q %q", end.ExitStatus, end.Log)
	}
	g = mustGuest(t, c, 100)
	if g.Node != seedNode3 || g.VMI().Status.NodeName != "kv-node-3.lab.internal" || preferredHost(g.VM()) != "kv-node-3.lab.internal" {
		t.Fatalf("after: node %s, instance on %s, preference %q", g.Node, g.VMI().Status.NodeName, preferredHost(g.VM()))
	}
	if end.UPID.Node != seedNode1 {
		t.Fatalf("the task runs on the source node in PVE: %s", end.UPID)
	}
}

// Without the rights to list migrations the plugin starts anyway.
func TestMigrationStoreNeedsListRights(t *testing.T) {
	e := newEnv(t, envOptions{beforeController: func(_ kubernetes.Interface, kv kubevirt.Interface) {
		kv.(*kubevirtsim.FakeKubeVirtClientset).PrependReactor("list", "virtualmachineinstancemigrations",
			func(k8stesting.Action) (bool, k8sruntime.Object, error) {
				return true, nil, apierrors.NewForbidden(kubevirtv1.Resource("virtualmachineinstancemigrations"), "", errors.New("RBAC says no"))
			})
	}})
	c := e.cluster(Options{}, true)
	if c.migrations != nil {
		t.Fatal("a migration store without list rights")
	}
	if c.migrationOf("default", "x") != nil {
		t.Fatal("a migration from nowhere")
	}
}
