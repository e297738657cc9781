package kubevirtsim

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
)

func (e *env) createMigration(vmi string, sel map[string]string) *virtv1.VirtualMachineInstanceMigration {
	e.t.Helper()
	m, err := e.kv.KubevirtV1().VirtualMachineInstanceMigrations(testNS).Create(e.ctx, &virtv1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "mig-", Namespace: testNS},
		Spec:       virtv1.VirtualMachineInstanceMigrationSpec{VMIName: vmi, AddedNodeSelector: sel},
	}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create migration: %v", err)
	}
	return m
}

// waitMigration waits until the migration has ended and returns it.
func (e *env) waitMigration(name string) *virtv1.VirtualMachineInstanceMigration {
	e.t.Helper()
	var m *virtv1.VirtualMachineInstanceMigration
	eventually(e.t, "migration "+name+" ends", func() (bool, string) {
		var err error
		m, err = e.kv.KubevirtV1().VirtualMachineInstanceMigrations(testNS).Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return m.IsFinal() && len(m.Finalizers) == 0, fmt.Sprintf("phase=%s finalizers=%v", m.Status.Phase, m.Finalizers)
	})
	return m
}

func phasesOf(m *virtv1.VirtualMachineInstanceMigration) []string {
	var out []string
	for _, p := range m.Status.PhaseTransitionTimestamps {
		out = append(out, string(p.Phase))
	}
	return out
}

func TestMigrationMovesTheGuestToTheSelectedNode(t *testing.T) {
	e := newEnv(t, testVM("mig", virtv1.RunStrategyAlways)).run(Options{MigrationDelay: 150 * time.Millisecond})
	rec := recordStatuses(e)
	src := e.waitRunning("mig")
	target := "node-a"
	if src.Status.NodeName == target {
		target = "node-b"
	}
	m := e.createMigration("mig", map[string]string{"kubernetes.io/hostname": target})
	if m.Labels[virtv1.MigrationSelectorLabel] != "" {
		t.Fatalf("label set by the client: %v", m.Labels)
	}
	m = e.waitMigration(m.Name)
	if m.Status.Phase != virtv1.MigrationSucceeded {
		t.Fatalf("phase %s, state %+v", m.Status.Phase, m.Status.MigrationState)
	}
	if got, want := strings.Join(phasesOf(m), ","), "Pending,Scheduling,Scheduled,PreparingTarget,TargetReady,Running,Succeeded"; got != want {
		t.Fatalf("phases %s, want %s", got, want)
	}
	if m.Labels[virtv1.MigrationSelectorLabel] != "mig" {
		t.Fatalf("selector label %v", m.Labels)
	}
	vmi := e.getVMI("mig")
	st := vmi.Status.MigrationState
	if vmi.Status.NodeName != target || vmi.Labels[virtv1.NodeNameLabel] != target || vmi.UID != src.UID || !vmi.IsRunning() {
		t.Fatalf("after migration: %s labels %v", describeVMI(vmi), vmi.Labels)
	}
	if st == nil || !st.Completed || st.Failed || st.MigrationUID != m.UID || st.SourceNode != src.Status.NodeName ||
		st.TargetNode != target || st.StartTimestamp == nil || st.EndTimestamp == nil {
		t.Fatalf("VMI migration state %+v", st)
	}
	if len(vmi.Status.ActivePods) != 1 {
		t.Fatalf("active pods %v", vmi.Status.ActivePods)
	}
	for _, node := range vmi.Status.ActivePods {
		if node != target {
			t.Fatalf("active pods %v", vmi.Status.ActivePods)
		}
	}
	if ms := m.Status.MigrationState; ms == nil || !ms.Completed || ms.TargetNode != target {
		t.Fatalf("migration's state %+v", ms)
	}
	rec.requireSequence(t, "mig", virtv1.VirtualMachineStatusRunning, virtv1.VirtualMachineStatusMigrating, virtv1.VirtualMachineStatusRunning)

	// The VM keeps running where it went; a second migration without a
	// selector goes to another node than the current one.
	m2 := e.waitMigration(e.createMigration("mig", nil).Name)
	if m2.Status.Phase != virtv1.MigrationSucceeded {
		t.Fatalf("second migration %s: %+v", m2.Status.Phase, m2.Status.MigrationState)
	}
	if n := e.getVMI("mig").Status.NodeName; n == target {
		t.Fatalf("second migration stayed on %s", n)
	}
}

func TestMigrationFailsWhenNoNodeFits(t *testing.T) {
	e := newEnv(t, testVM("mig", virtv1.RunStrategyAlways)).run(Options{})
	src := e.waitRunning("mig")
	for _, sel := range []map[string]string{
		{"kubernetes.io/hostname": "node-x"},                 // no such node
		{"kubernetes.io/hostname": src.Status.NodeName},      // only the source: anti-affinity
		{"kubernetes.io/hostname": "node-a", "disk": "fast"}, // a label no node has
	} {
		m := e.waitMigration(e.createMigration("mig", sel).Name)
		st := m.Status.MigrationState
		if m.Status.Phase != virtv1.MigrationFailed || st == nil || !st.Failed ||
			!strings.Contains(st.FailureReason, "is unschedulable: 0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector") {
			t.Fatalf("%v: phase %s state %+v", sel, m.Status.Phase, st)
		}
		if got := strings.Join(phasesOf(m), ","); got != "Pending,Scheduling,Failed" {
			t.Fatalf("%v: phases %s", sel, got)
		}
		if vmi := e.getVMI("mig"); vmi.Status.NodeName != src.Status.NodeName || !vmi.IsRunning() {
			t.Fatalf("%v: the guest moved: %s", sel, describeVMI(vmi))
		}
	}
	e.waitPrintable("mig", virtv1.VirtualMachineStatusRunning)
}

func TestMigrationRefusals(t *testing.T) {
	bridged := testVM("bridged", virtv1.RunStrategyAlways)
	iface := &bridged.Spec.Template.Spec.Domain.Devices.Interfaces[0]
	iface.InterfaceBindingMethod = virtv1.InterfaceBindingMethod{Bridge: &virtv1.InterfaceBridge{}}
	e := newEnv(t, bridged, testVM("stopped", virtv1.RunStrategyHalted)).run(Options{})
	e.waitRunning("bridged")

	m := e.waitMigration(e.createMigration("bridged", nil).Name)
	if m.Status.Phase != virtv1.MigrationFailed || !strings.Contains(m.Status.MigrationState.FailureReason, "Cannot migrate VMI, Reason: InterfaceNotLiveMigratable") {
		t.Fatalf("bridged: %s %+v", m.Status.Phase, m.Status.MigrationState)
	}
	m = e.waitMigration(e.createMigration("stopped", nil).Name)
	if m.Status.Phase != virtv1.MigrationFailed || m.Status.MigrationState.FailureReason != msgMigrationNoVMI {
		t.Fatalf("stopped: %s %+v", m.Status.Phase, m.Status.MigrationState)
	}

	// virt-api's migrate subresource wants a running VMI.
	vms := e.kv.KubevirtV1().VirtualMachines(testNS)
	requireStatus(t, vms.Migrate(e.ctx, "stopped", &virtv1.MigrateOptions{}), 404, "not found")
	requireStatus(t, vms.Migrate(e.ctx, "nope", &virtv1.MigrateOptions{}), 404, "not found")
}

func TestMigrateSubresourceCreatesAMigration(t *testing.T) {
	e := newEnv(t, testVM("mig", virtv1.RunStrategyAlways)).run(Options{})
	src := e.waitRunning("mig")
	if err := e.kv.KubevirtV1().VirtualMachines(testNS).Migrate(e.ctx, "mig", &virtv1.MigrateOptions{}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	list, err := e.kv.KubevirtV1().VirtualMachineInstanceMigrations(testNS).List(e.ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 || !strings.HasPrefix(list.Items[0].Name, "kubevirt-migrate-vm-") || list.Items[0].Spec.VMIName != "mig" {
		t.Fatalf("migrations %v %v", list, err)
	}
	m := e.waitMigration(list.Items[0].Name)
	if vmi := e.getVMI("mig"); m.Status.Phase != virtv1.MigrationSucceeded || vmi.Status.NodeName == src.Status.NodeName {
		t.Fatalf("%s, guest on %s (was %s)", m.Status.Phase, vmi.Status.NodeName, src.Status.NodeName)
	}
}

func TestDeletedMigrationIsAborted(t *testing.T) {
	e := newEnv(t, testVM("mig", virtv1.RunStrategyAlways)).run(Options{MigrationDelay: time.Hour})
	src := e.waitRunning("mig")
	m := e.createMigration("mig", nil)
	e.waitPrintable("mig", virtv1.VirtualMachineStatusMigrating)
	migs := e.kv.KubevirtV1().VirtualMachineInstanceMigrations(testNS)
	if err := migs.Delete(e.ctx, m.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "migration gone", func() (bool, string) {
		_, err := migs.Get(e.ctx, m.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	vmi := e.waitVMI("mig", "migration failed", func(v *virtv1.VirtualMachineInstance) bool {
		return v.Status.MigrationState != nil && v.Status.MigrationState.Failed
	})
	if vmi.Status.NodeName != src.Status.NodeName {
		t.Fatalf("aborted migration moved the guest: %s", describeVMI(vmi))
	}
	e.waitPrintable("mig", virtv1.VirtualMachineStatusRunning)
}

// KubeVirt live-migrates only guests whose claims are all ReadWriteMany,
// the read-only CD-ROM's included (virt-handler's
// checkVolumesForMigration): the others are LiveMigratable=False and their
// migrations fail.
func TestMigrationNeedsSharedClaims(t *testing.T) {
	rwx := func(p *corev1.PersistentVolumeClaim) *corev1.PersistentVolumeClaim {
		p.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
		block := corev1.PersistentVolumeBlock
		p.Spec.VolumeMode = &block
		return p
	}
	withDisk := func(vm *virtv1.VirtualMachine, volume, claim string, cdrom bool) *virtv1.VirtualMachine {
		d := virtv1.Disk{Name: volume, DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusSCSI}}}
		if cdrom {
			d.DiskDevice = virtv1.DiskDevice{CDRom: &virtv1.CDRomTarget{Bus: virtv1.DiskBusSATA}}
		}
		vm.Spec.Template.Spec.Domain.Devices.Disks = append(vm.Spec.Template.Spec.Domain.Devices.Disks, d)
		return withPVC(vm, volume, claim)
	}
	local := withDisk(testVM("local", virtv1.RunStrategyAlways), "scsi0", "local-disk", false)
	shared := withDisk(testVM("shared", virtv1.RunStrategyAlways), "scsi0", "shared-disk", false)
	iso := withDisk(withDisk(testVM("iso", virtv1.RunStrategyAlways), "scsi0", "iso-vm-disk", false), "ide2", "debian-iso", true)
	e := newCDIEnv(t, testPVC("local-disk", "local-lvm", "1Gi"), rwx(testPVC("shared-disk", "ceph-rbd", "1Gi")),
		rwx(testPVC("iso-vm-disk", "ceph-rbd", "1Gi")), testPVC("debian-iso", "local-lvm", "1Gi"), local, shared, iso).run(Options{})

	for _, c := range []struct{ vm, claim string }{{"local", "local-disk"}, {"iso", "debian-iso"}} {
		vmi := e.waitRunning(c.vm)
		cond := findVMICondition(vmi, virtv1.VirtualMachineInstanceIsMigratable)
		want := "cannot migrate VMI: PVC " + c.claim + " is not shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)"
		if cond == nil || cond.Status != corev1.ConditionFalse || cond.Reason != virtv1.VirtualMachineInstanceReasonDisksNotMigratable || cond.Message != want {
			t.Fatalf("%s: LiveMigratable %+v", c.vm, cond)
		}
		m := e.waitMigration(e.createMigration(c.vm, nil).Name)
		if m.Status.Phase != virtv1.MigrationFailed || !strings.Contains(m.Status.MigrationState.FailureReason, want) {
			t.Fatalf("%s: migration %s %+v", c.vm, m.Status.Phase, m.Status.MigrationState)
		}
	}
	vmi := e.waitRunning("shared")
	if cond := findVMICondition(vmi, virtv1.VirtualMachineInstanceIsMigratable); cond == nil || cond.Status != corev1.ConditionTrue {
		t.Fatalf("shared: LiveMigratable %+v", cond)
	}
	var info *virtv1.PersistentVolumeClaimInfo
	for _, st := range vmi.Status.VolumeStatus {
		if st.Name == "scsi0" {
			info = st.PersistentVolumeClaimInfo
		}
	}
	if info == nil || info.ClaimName != "shared-disk" || len(info.AccessModes) != 1 || info.AccessModes[0] != corev1.ReadWriteMany ||
		info.VolumeMode == nil || *info.VolumeMode != corev1.PersistentVolumeBlock || info.FilesystemOverhead == nil || *info.FilesystemOverhead != "0" {
		t.Fatalf("shared: claim info %+v", info)
	}
	if m := e.waitMigration(e.createMigration("shared", nil).Name); m.Status.Phase != virtv1.MigrationSucceeded {
		t.Fatalf("shared: migration %s %+v", m.Status.Phase, m.Status.MigrationState)
	}
}

// A VMI whose launcher pod virt-controller cannot render stays Pending
// with its reason in Synchronized=False: a claim that does not exist
// (the VM ErrorPvcNotFound) or a Multus network without its
// NetworkAttachmentDefinition; it starts once that is there.
func TestPendingWhileLauncherCannotRender(t *testing.T) {
	claim := withPVC(testVM("claim", virtv1.RunStrategyAlways), "data", "missing")
	bridged := testVM("bridged", virtv1.RunStrategyAlways)
	bridged.Spec.Template.Spec.Networks = append(bridged.Spec.Template.Spec.Networks,
		virtv1.Network{Name: "net1", NetworkSource: virtv1.NetworkSource{Multus: &virtv1.MultusNetwork{NetworkName: "vmbr1"}}})
	nads := map[string]bool{}
	var mu sync.Mutex
	e := newCDIEnv(t, claim, bridged).run(Options{NetworkAttachmentDefinition: func(ns, name string) bool {
		mu.Lock()
		defer mu.Unlock()
		return nads[ns+"/"+name]
	}})
	for _, c := range []struct{ vm, reason, msg string }{
		{"claim", "FailedPvcNotFound", "PVC " + testNS + "/missing does not exist, waiting for it to appear"},
		{"bridged", "FailedCreate", "failed to render launch manifest: failed to locate network attachment definition " + testNS + "/vmbr1"},
	} {
		vmi := e.waitVMI(c.vm, "sync failure", func(v *virtv1.VirtualMachineInstance) bool {
			return findVMICondition(v, virtv1.VirtualMachineInstanceSynchronized) != nil
		})
		cond := findVMICondition(vmi, virtv1.VirtualMachineInstanceSynchronized)
		if vmi.Status.Phase != virtv1.Pending || cond.Status != corev1.ConditionFalse || cond.Reason != c.reason || cond.Message != c.msg {
			t.Fatalf("%s: %s %+v", c.vm, vmi.Status.Phase, cond)
		}
	}
	e.waitPrintable("claim", virtv1.VirtualMachineStatusPvcNotFound)
	e.waitPrintable("bridged", virtv1.VirtualMachineStatusStarting)

	mu.Lock()
	nads[testNS+"/vmbr1"] = true
	mu.Unlock()
	if _, err := e.k8s.CoreV1().PersistentVolumeClaims(testNS).Create(e.ctx, testPVC("missing", "local-lvm", "1Gi"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, vm := range []string{"claim", "bridged"} {
		if vmi := e.waitRunning(vm); findVMICondition(vmi, virtv1.VirtualMachineInstanceSynchronized) != nil {
			t.Fatalf("%s still failing: %+v", vm, vmi.Status.Conditions)
		}
	}
}
