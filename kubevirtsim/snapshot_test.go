package kubevirtsim

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
	snapshotv1 "kubevirt.io/api/snapshot/v1beta1"
)

// diskVM is a test VM with a container disk and a PVC volume "data" on
// the PVC <name>-data.
func diskVM(name string, strategy virtv1.VirtualMachineRunStrategy) *virtv1.VirtualMachine {
	return withPVC(testVM(name, strategy), "data", name+"-data")
}

func TestSnapshotOfRunningVM(t *testing.T) {
	e := newCDIEnv(t, testPVC("web-data", "local-lvm", "4Gi")).run(Options{SnapshotDelay: 300 * time.Millisecond})
	vm := e.createVM(withAgent(diskVM("web", virtv1.RunStrategyAlways)))
	e.waitRunning("web")
	rec := recordPhases(t, e.ctx, NewVirtualMachineSnapshotInformer(e.kv, testNS, 0), func(obj any) (string, string) {
		s := obj.(*snapshotv1.VirtualMachineSnapshot)
		if s.Status == nil {
			return s.Name, ""
		}
		return s.Name, string(s.Status.Phase)
	})

	e.createSnapshot("snap1", "web")
	// While in progress the source is locked.
	e.waitSnapshot("snap1", snapshotv1.InProgress)
	e.waitVM("web", "locked", func(vm *virtv1.VirtualMachine) bool {
		return vm.Status.SnapshotInProgress != nil && *vm.Status.SnapshotInProgress == "snap1"
	})
	snap := e.waitSnapshot("snap1", snapshotv1.Succeeded)
	rec.requireSequence(t, "snap1", "InProgress", "Succeeded")

	st := snap.Status
	if st.ReadyToUse == nil || !*st.ReadyToUse || st.CreationTime == nil || st.SourceUID == nil || *st.SourceUID != vm.UID {
		t.Errorf("status = %+v", st)
	}
	if !slices.Equal(st.Indications, []snapshotv1.Indication{snapshotv1.VMSnapshotOnlineSnapshotIndication, snapshotv1.VMSnapshotGuestAgentIndication}) ||
		len(st.SourceIndications) != 2 || st.SourceIndications[0].Message == "" {
		t.Errorf("indications = %v / %+v", st.Indications, st.SourceIndications)
	}
	if sv := st.SnapshotVolumes; sv == nil || !slices.Equal(sv.IncludedVolumes, []string{"data"}) || !slices.Equal(sv.ExcludedVolumes, []string{"root"}) {
		t.Errorf("snapshotVolumes = %+v", sv)
	}
	ready := findSnapshotCondition(st.Conditions, snapshotv1.ConditionReady)
	progressing := findSnapshotCondition(st.Conditions, snapshotv1.ConditionProgressing)
	if ready == nil || ready.Status != corev1.ConditionTrue || progressing == nil || progressing.Status != corev1.ConditionFalse || ready.Reason != msgOperationComplete {
		t.Errorf("conditions = %+v", st.Conditions)
	}
	if !slices.Contains(snap.Finalizers, snapshotFinalizer) {
		t.Errorf("finalizers = %v", snap.Finalizers)
	}
	if st.VirtualMachineSnapshotContentName == nil || *st.VirtualMachineSnapshotContentName != "vmsnapshot-content-"+string(snap.UID) {
		t.Fatalf("content name = %v", st.VirtualMachineSnapshotContentName)
	}

	content := e.getContent(*st.VirtualMachineSnapshotContentName)
	cur := e.getVM("web")
	src := content.Spec.Source.VirtualMachine
	if src == nil || src.Name != "web" || src.UID != vm.UID || !equality.Semantic.DeepEqual(src.Spec, cur.Spec) {
		t.Errorf("content source = %+v", src)
	}
	if *content.Spec.VirtualMachineSnapshotName != "snap1" || len(content.Spec.VolumeBackups) != 1 {
		t.Fatalf("content spec = %+v", content.Spec)
	}
	b := content.Spec.VolumeBackups[0]
	if b.VolumeName != "data" || b.PersistentVolumeClaim.Name != "web-data" || *b.PersistentVolumeClaim.Spec.StorageClassName != "local-lvm" ||
		b.VolumeSnapshotName == nil || !strings.HasPrefix(*b.VolumeSnapshotName, "vmsnapshot-"+string(snap.UID)) {
		t.Errorf("volume backup = %+v", b)
	}
	if content.Status == nil || !*content.Status.ReadyToUse || len(content.Status.VolumeSnapshotStatus) != 1 {
		t.Errorf("content status = %+v", content.Status)
	}
	if ref := metav1.GetControllerOf(content); ref == nil || ref.UID != snap.UID || !slices.Contains(content.Finalizers, contentFinalizer) {
		t.Errorf("content owner %+v finalizers %v", ref, content.Finalizers)
	}

	// The lock is gone; the VM reports which volumes can be snapshotted.
	cur = e.waitVM("web", "unlocked", func(vm *virtv1.VirtualMachine) bool { return vm.Status.SnapshotInProgress == nil })
	want := []virtv1.VolumeSnapshotStatus{
		{Name: "root", Enabled: false, Reason: "Snapshot is not supported for this volumeSource type [root]"},
		{Name: "data", Enabled: true},
	}
	if !equality.Semantic.DeepEqual(cur.Status.VolumeSnapshotStatuses, want) {
		t.Errorf("volumeSnapshotStatuses = %+v", cur.Status.VolumeSnapshotStatuses)
	}
}

func TestSnapshotOfStoppedVMIsOffline(t *testing.T) {
	e := newCDIEnv(t, testPVC("cold-data", "local-lvm", "1Gi")).run(Options{})
	e.createVM(diskVM("cold", virtv1.RunStrategyHalted))
	e.waitStopped("cold")
	e.createSnapshot("s", "cold")
	snap := e.waitSnapshot("s", snapshotv1.Succeeded)
	if len(snap.Status.Indications) != 0 || len(snap.Status.SourceIndications) != 0 {
		t.Errorf("indications of an offline snapshot: %v", snap.Status.Indications)
	}
}

func TestSnapshotUnsupported(t *testing.T) {
	e := newCDIEnv(t, testPVC("web-data", "ceph-rbd", "1Gi")).run(Options{SnapshotUnsupported: true})
	e.createVM(diskVM("web", virtv1.RunStrategyHalted))
	e.waitStopped("web")
	e.createSnapshot("s", "web")
	snap := e.waitSnapshot("s", snapshotv1.Failed)
	reason := "No VolumeSnapshotClass: Volume snapshots are not configured for this StorageClass [ceph-rbd] [data]"
	f := findSnapshotCondition(snap.Status.Conditions, snapshotv1.ConditionFailure)
	if f == nil || f.Status != corev1.ConditionTrue || f.Reason != reason {
		t.Errorf("failure condition = %+v", f)
	}
	if snap.Status.Error == nil || *snap.Status.Error.Message != reason || *snap.Status.ReadyToUse {
		t.Errorf("status = %+v", snap.Status)
	}
	if e.getContent(contentNameFor(snap)) != nil {
		t.Error("a failed snapshot has content")
	}
	vm := e.waitVM("web", "volumeSnapshotStatuses", func(vm *virtv1.VirtualMachine) bool {
		return len(vm.Status.VolumeSnapshotStatuses) == 2
	})
	if st := vm.Status.VolumeSnapshotStatuses[1]; st.Enabled || st.Reason != reason {
		t.Errorf("volume snapshot status = %+v", st)
	}
	if vm.Status.SnapshotInProgress != nil {
		t.Error("VM still locked")
	}
}

func TestSnapshotWaitsForItsSourceUntilTheDeadline(t *testing.T) {
	e := newCDIEnv(t, testPVC("late-data", "local-lvm", "1Gi")).run(Options{})
	e.createSnapshot("early", "late")
	s := e.waitSnapshot("early", snapshotv1.Unknown)
	if c := findSnapshotCondition(s.Status.Conditions, snapshotv1.ConditionReady); c == nil || c.Reason != msgSourceDoesNotExist {
		t.Errorf("conditions = %+v", s.Status.Conditions)
	}
	e.createVM(diskVM("late", virtv1.RunStrategyHalted))
	e.waitSnapshot("early", snapshotv1.Succeeded)

	e.createSnapshot("doomed", "never", func(s *snapshotv1.VirtualMachineSnapshot) {
		s.Spec.FailureDeadline = &metav1.Duration{Duration: 200 * time.Millisecond}
	})
	s = e.waitSnapshot("doomed", snapshotv1.Failed)
	if f := findSnapshotCondition(s.Status.Conditions, snapshotv1.ConditionFailure); f == nil || f.Reason != msgDeadlineExceeded {
		t.Errorf("conditions = %+v", s.Status.Conditions)
	}
}

func TestDeletingSnapshotDeletesItsContent(t *testing.T) {
	e := newCDIEnv(t, testPVC("web-data", "local-lvm", "1Gi")).run(Options{})
	e.createVM(diskVM("web", virtv1.RunStrategyHalted))
	e.createSnapshot("gone", "web")
	e.createSnapshot("kept", "web", func(s *snapshotv1.VirtualMachineSnapshot) {
		s.Spec.DeletionPolicy = ptr(snapshotv1.VirtualMachineSnapshotContentRetain)
	})
	gone := e.waitSnapshot("gone", snapshotv1.Succeeded)
	kept := e.waitSnapshot("kept", snapshotv1.Succeeded)
	if metav1.GetControllerOf(e.getContent(contentNameFor(kept))) != nil {
		t.Error("a retained content has an owner")
	}
	for _, name := range []string{"gone", "kept"} {
		if err := e.kv.SnapshotV1beta1().VirtualMachineSnapshots(testNS).Delete(e.ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitGone(t, "snapshot gone", func() bool { return e.getSnapshot("gone") != nil })
	waitGone(t, "snapshot kept", func() bool { return e.getSnapshot("kept") != nil })
	waitGone(t, "content of gone", func() bool { return e.getContent(contentNameFor(gone)) != nil })
	if c := e.getContent(contentNameFor(kept)); c == nil || !slices.Contains(c.Finalizers, contentFinalizer) {
		t.Errorf("retained content: %+v", c)
	}
}

// TestSnapshotWithoutSnapshotClass: with the VolumeSnapshotClasses read
// (Options.Dynamic), a volume whose StorageClass's provisioner has none
// is reported as KubeVirt reports it, and a snapshot succeeds without its
// data (excludedVolumes, no volume backup), as KubeVirt's does; volumes of
// a class that has one are backed up.
func TestSnapshotWithoutSnapshotClass(t *testing.T) {
	e := newCDIEnv(t, testPVC("web-data", "local-lvm", "1Gi"), testPVC("web-fast", "ceph-rbd", "1Gi")).
		run(Options{Dynamic: NewFakeDynamic(SeedSnapshotClasses()...)})
	e.createVM(withPVC(diskVM("web", virtv1.RunStrategyHalted), "fast", "web-fast"))
	e.waitStopped("web")
	vm := e.waitVM("web", "volumeSnapshotStatuses", func(vm *virtv1.VirtualMachine) bool {
		return len(vm.Status.VolumeSnapshotStatuses) == 3
	})
	want := []virtv1.VolumeSnapshotStatus{
		{Name: "root", Enabled: false, Reason: "Snapshot is not supported for this volumeSource type [root]"},
		{Name: "data", Enabled: false, Reason: "No VolumeSnapshotClass: Volume snapshots are not configured for this StorageClass [local-lvm] [data]"},
		{Name: "fast", Enabled: true},
	}
	if !equality.Semantic.DeepEqual(vm.Status.VolumeSnapshotStatuses, want) {
		t.Errorf("volumeSnapshotStatuses = %+v", vm.Status.VolumeSnapshotStatuses)
	}
	e.createSnapshot("s", "web")
	snap := e.waitSnapshot("s", snapshotv1.Succeeded)
	if v := snap.Status.SnapshotVolumes; v == nil || !slices.Equal(v.IncludedVolumes, []string{"fast"}) || !slices.Equal(v.ExcludedVolumes, []string{"root", "data"}) {
		t.Errorf("snapshotVolumes = %+v", snap.Status.SnapshotVolumes)
	}
	content := e.getContent(*snap.Status.VirtualMachineSnapshotContentName)
	if len(content.Spec.VolumeBackups) != 1 || content.Spec.VolumeBackups[0].VolumeName != "fast" {
		t.Errorf("volume backups = %+v", content.Spec.VolumeBackups)
	}
}
