package kubevirtsim

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testutil"
)

func TestRunLeavesNoGoroutines(t *testing.T) {
	before := testutil.GoroutineBaseline()

	k8s, kv := NewFakeClients(Seed()...)
	c := NewController(kv, k8s, Options{StartDelay: testStartDelay, StopDelay: testStopDelay, Resync: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	e := &env{t: t, ctx: context.Background(), k8s: k8s, kv: kv}
	e.waitRunning("debian-12")
	if err := kv.KubevirtV1().VirtualMachines(testNS).Stop(e.ctx, "debian-12", nil); err != nil {
		t.Fatal(err)
	}
	e.waitVMI("debian-12", "shutting down", func(v *virtv1.VirtualMachineInstance) bool { return v.DeletionTimestamp != nil })

	// Shut down in the middle of a graceful stop (a delayed requeue is pending).
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Run did not return after cancel")
	}
	before.Check(t, waitTimeout)

	if err := c.Run(context.Background()); err == nil {
		t.Error("a second Run must fail")
	}
}

func TestRunReturnsWhenCancelledBeforeSync(t *testing.T) {
	k8s, kv := NewFakeClients()
	c := NewController(kv, k8s, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Run(ctx); err != nil {
		t.Fatalf("Run with a cancelled context: %v", err)
	}
}

func TestSeed(t *testing.T) {
	objs := Seed()
	k8s, kv := NewFakeClients(objs...)
	ctx := t.Context()

	nodes, err := k8s.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 3 {
		t.Fatalf("nodes: %v %v", nodes, err)
	}
	for _, n := range nodes.Items {
		if !strings.Contains(n.Name, ".") || !nodeReady(&n) || n.CreationTimestamp.After(time.Now().Add(-24*time.Hour)) ||
			!strings.HasPrefix(n.Status.Addresses[0].Address, "192.0.2.") || n.Status.NodeInfo.KernelVersion == "" ||
			n.Status.Capacity.Cpu().IsZero() || n.Status.Allocatable.Memory().IsZero() {
			t.Errorf("node %s not as specified: %+v", n.Name, n.Status)
		}
	}
	scs, _ := k8s.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{})
	defaults := 0
	for _, sc := range scs.Items {
		if sc.Annotations["storageclass.kubernetes.io/is-default-class"] == "true" {
			defaults++
			if sc.Name != "local-lvm" || sc.AllowVolumeExpansion == nil || !*sc.AllowVolumeExpansion {
				t.Errorf("default storage class %+v", sc)
			}
		}
	}
	if len(scs.Items) != 2 || defaults != 1 {
		t.Errorf("storage classes: %d, defaults %d", len(scs.Items), defaults)
	}
	for _, ns := range []string{"default", "lab"} {
		if _, err := k8s.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
			t.Errorf("namespace %s: %v", ns, err)
		}
	}
	deb, err := kv.KubevirtV1().VirtualMachines("default").Get(ctx, "debian-12", metav1.GetOptions{})
	if err != nil || deb.Labels[labelVMID] != "100" || deb.Annotations[annotationNode] != "kv-node-1-lab-internal" ||
		deb.Spec.Template.Spec.Domain.Devices.Interfaces[0].Name != "net0" ||
		!strings.HasPrefix(deb.Spec.Template.Spec.Domain.Devices.Interfaces[0].MacAddress, "BC:24:11:") {
		t.Errorf("debian-12: %+v %v", deb, err)
	}
	legacy, err := kv.KubevirtV1().VirtualMachines("lab").Get(ctx, "legacy-app", metav1.GetOptions{})
	if err != nil || legacy.Labels[labelVMID] != "" || *legacy.Spec.RunStrategy != virtv1.RunStrategyRerunOnFailure {
		t.Errorf("legacy-app: %+v %v", legacy, err)
	}

	// A controller turns the seed into the intended lab.
	e := &env{t: t, ctx: ctx, k8s: k8s, kv: kv}
	e.run(Options{})
	if vmi := e.waitRunning("debian-12"); vmi.Status.NodeName != "kv-node-1.lab.internal" ||
		!hasVMICondition(vmi, virtv1.VirtualMachineInstanceAgentConnected, "True") || vmi.Status.GuestOSInfo.PrettyName != "Debian GNU/Linux 12 (bookworm)" {
		t.Errorf("debian-12 VMI: %s %+v", describeVMI(vmi), vmi.Status.GuestOSInfo)
	}
	e.waitStopped("win-11")
	eventually(t, "legacy-app running", func() (bool, string) {
		vm, err := kv.KubevirtV1().VirtualMachines("lab").Get(ctx, "legacy-app", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return vm.Status.PrintableStatus == virtv1.VirtualMachineStatusRunning, describeVM(vm)
	})

	// Seed returns fresh objects each time.
	again := Seed()
	again[0].(interface{ SetName(string) }).SetName("changed")
	if objs[0].(interface{ GetName() string }).GetName() == "changed" {
		t.Error("Seed shares objects between calls")
	}
}
