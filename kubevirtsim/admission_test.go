package kubevirtsim

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/internal/admissiontest"
)

// TestAdmissionTable: the stand-in's webhooks refuse and admit what
// KubeVirt's own virt-api does, in its words (the same table runs on the
// real one in integration's TestAdmissionTableOnVirtAPI).
func TestAdmissionTable(t *testing.T) {
	_, kv := NewFakeClients()
	admissiontest.Run(t, admissiontest.Cluster{
		KubeVirt:  kv,
		Namespace: testNS,
		Gates:     []string{gateSnapshot},
		SetGates: func(t *testing.T, gates ...string) {
			t.Helper()
			ctx := context.Background()
			kvs := kv.KubevirtV1().KubeVirts("kubevirt")
			cr, err := kvs.Get(ctx, "kubevirt", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				cr, err = kvs.Create(ctx, &virtv1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Name: "kubevirt", Namespace: "kubevirt"}}, metav1.CreateOptions{})
			}
			if err != nil {
				t.Fatal(err)
			}
			cr.Spec.Configuration.DeveloperConfiguration = &virtv1.DeveloperConfiguration{FeatureGates: gates}
			if _, err := kvs.Update(ctx, cr, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		},
	})
}

// TestAdmissionConfig: with no KubeVirt CR (the simulated lab, unit
// tests) snapshots are on, declarative hotplug off and the rollout
// strategy LiveUpdate; a CR's gates and strategy count as KubeVirt counts
// them.
func TestAdmissionConfig(t *testing.T) {
	_, kv := NewFakeClients()
	a := &admission{tracker: kv.(*FakeKubeVirtClientset).Tracker()}
	if c := a.config(); !c.gate(gateSnapshot) || c.gate(gateDeclarativeHotplugVolumes) || !c.liveUpdate {
		t.Fatalf("lab config %+v", c)
	}
	stage := virtv1.VMRolloutStrategyStage
	cr := &virtv1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Name: "kubevirt", Namespace: "kubevirt"}}
	cr.Spec.Configuration.VMRolloutStrategy = &stage
	cr.Spec.Configuration.DeveloperConfiguration = &virtv1.DeveloperConfiguration{
		FeatureGates: []string{gateDeclarativeHotplugVolumes}, DisabledFeatureGates: []string{gateSnapshot}}
	if _, err := kv.KubevirtV1().KubeVirts("kubevirt").Create(context.Background(), cr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if c := a.config(); c.gate(gateSnapshot) || !c.gate(gateDeclarativeHotplugVolumes) || c.liveUpdate {
		t.Fatalf("CR config %+v", c)
	}
	// Under Stage, CPU hotplug's rule is checked once.
	vm := testVM("sockets", virtv1.RunStrategyHalted)
	vm.Spec.Template.Spec.Domain.CPU = &virtv1.CPU{Sockets: 4, MaxSockets: 2}
	_, err := kv.KubevirtV1().VirtualMachines(testNS).Create(context.Background(), vm, metav1.CreateOptions{})
	const want = `admission webhook "virtualmachine-validator.kubevirt.io" denied the request: Number of sockets in CPU topology is greater than the maximum sockets allowed`
	if err == nil || err.Error() != want {
		t.Fatalf("sockets above max under Stage: %v", err)
	}
}

// TestDenialNamesTenCauses: as KubeVirt's ToAdmissionResponse, a denial
// gives the first ten causes and counts the rest.
func TestDenialNamesTenCauses(t *testing.T) {
	vm := testVM("many", virtv1.RunStrategyHalted)
	for i := range 12 {
		vm.Spec.Template.Spec.Domain.Devices.Disks = append(vm.Spec.Template.Spec.Domain.Devices.Disks,
			virtv1.Disk{Name: "d" + string(rune('a'+i)), DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{}}})
	}
	_, kv := NewFakeClients()
	_, err := kv.KubevirtV1().VirtualMachines(testNS).Create(context.Background(), vm, metav1.CreateOptions{})
	st, ok := err.(*apierrors.StatusError)
	if !ok || st.ErrStatus.Code != 422 || len(st.ErrStatus.Details.Causes) != 10 {
		t.Fatalf("%v", err)
	}
	const tail = "spec.template.spec.domain.devices.disks[9].Name 'dj' not found., and 2 more validation errors"
	if msg := st.ErrStatus.Message; len(msg) < len(tail) || msg[len(msg)-len(tail):] != tail {
		t.Fatalf("message %q", msg)
	}
}

// TestSeedIsAdmitted: the simulated lab's VMs (seeded past admission) are
// ones KubeVirt admits, so that updates of them are not refused for what
// they already were.
func TestSeedIsAdmitted(t *testing.T) {
	objs := append(Seed(), BulkVMs("default", 3, 1000, []string{"node1"})...)
	n := 0
	for _, obj := range objs {
		vm, ok := obj.(*virtv1.VirtualMachine)
		if !ok {
			continue
		}
		n++
		if causes := vmCauses(nil, vm, clusterConfig{gates: labGates, liveUpdate: true}); len(causes) > 0 {
			t.Errorf("%s/%s: %v", vm.Namespace, vm.Name, causes)
		}
	}
	if n < 4 {
		t.Fatalf("%d VMs seeded", n)
	}
}
