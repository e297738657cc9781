package kubevirtsim

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
	snapshotv1 "kubevirt.io/api/snapshot/v1beta1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// changeCores updates the VM's template CPU cores.
func (e *env) changeCores(name string, cores uint32) {
	e.t.Helper()
	eventually(e.t, "update VM", func() (bool, string) {
		vm := e.getVM(name)
		vm.Spec.Template.Spec.Domain.CPU.Cores = cores
		_, err := e.kv.KubevirtV1().VirtualMachines(testNS).Update(e.ctx, vm, metav1.UpdateOptions{})
		return err == nil, describeErr(err)
	})
}

func describeErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func isComplete(r *snapshotv1.VirtualMachineRestore) bool {
	return r.Status.Complete != nil && *r.Status.Complete
}

func TestRestoreStoppedVM(t *testing.T) {
	e := newCDIEnv(t, testPVC("web-data", "local-lvm", "2Gi")).run(Options{})
	vm := e.createVM(diskVM("web", virtv1.RunStrategyManual))
	e.waitStopped("web")
	e.createSnapshot("before", "web")
	e.waitSnapshot("before", snapshotv1.Succeeded)
	e.changeCores("web", 8)

	e.createRestore("rollback", "web", "before")
	r := e.waitRestore("rollback", "complete", isComplete)
	if r.Status.RestoreTime == nil || restoreCond(r, snapshotv1.ConditionReady).Status != corev1.ConditionTrue ||
		restoreCond(r, snapshotv1.ConditionProgressing).Status != corev1.ConditionFalse ||
		restoreCond(r, snapshotv1.ConditionReady).Reason != msgOperationComplete {
		t.Errorf("restore status: %s", describeRestore(r))
	}
	if len(r.Status.Restores) != 1 || r.Status.Restores[0].VolumeName != "data" || r.Status.Restores[0].PersistentVolumeClaimName != "web-data" ||
		r.Status.Restores[0].VolumeSnapshotName == "" {
		t.Errorf("restores = %+v", r.Status.Restores)
	}
	if ref := metav1.GetControllerOf(r); ref == nil || ref.UID != vm.UID || !slices.Contains(r.Finalizers, restoreFinalizer) {
		t.Errorf("owner %+v finalizers %v", ref, r.Finalizers)
	}
	got := e.waitVM("web", "unlocked", func(vm *virtv1.VirtualMachine) bool { return vm.Status.RestoreInProgress == nil })
	// The VM keeps its run strategy, as KubeVirt's restore keeps it.
	if got.UID != vm.UID || got.Spec.Template.Spec.Domain.CPU.Cores != 2 || *got.Spec.RunStrategy != virtv1.RunStrategyManual ||
		got.Annotations[AnnotationLastRestore] != "rollback-"+string(r.UID) {
		t.Errorf("restored VM: uid %s cores %d runStrategy %s annotations %v", got.UID, got.Spec.Template.Spec.Domain.CPU.Cores,
			*got.Spec.RunStrategy, got.Annotations)
	}
	e.waitStopped("web")

	// Deleting the restore drops its finalizer.
	if err := e.kv.SnapshotV1beta1().VirtualMachineRestores(testNS).Delete(e.ctx, "rollback", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "restore", func() bool { return e.getRestore("rollback") != nil })
}

func TestRestoreWaitsForTheTargetToStop(t *testing.T) {
	e := newCDIEnv(t, testPVC("web-data", "local-lvm", "2Gi")).run(Options{})
	e.createVM(diskVM("web", virtv1.RunStrategyAlways))
	e.waitRunning("web")
	e.createSnapshot("s", "web")
	e.waitSnapshot("s", snapshotv1.Succeeded)

	e.createRestore("r", "web", "s")
	r := e.waitRestore("r", "waiting for the target", func(r *snapshotv1.VirtualMachineRestore) bool {
		return restoreCond(r, snapshotv1.ConditionReady).Message == MessageVMMustBeStopped
	})
	if isComplete(r) || restoreCond(r, snapshotv1.ConditionReady).Reason != msgWaitingForTarget {
		t.Errorf("restore: %s", describeRestore(r))
	}
	// KubeVirt locks the VM only once it is ready to be restored, so
	// that stopping it is no run-state change under the restore's lock.
	if vm := e.getVM("web"); vm.Status.RestoreInProgress != nil {
		t.Errorf("locked while waiting for the target: %s", describeVM(vm))
	}
	if vmi := e.getVMI("web"); vmi == nil || !vmi.IsRunning() {
		t.Fatal("the restore stopped the VM on its own")
	}

	if err := e.kv.KubevirtV1().VirtualMachines(testNS).Stop(e.ctx, "web", &virtv1.StopOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitRestore("r", "complete", isComplete)
	e.waitStopped("web")
}

func TestRestoreStopTarget(t *testing.T) {
	e := newCDIEnv(t, testPVC("web-data", "local-lvm", "2Gi")).run(Options{})
	e.createVM(diskVM("web", virtv1.RunStrategyRerunOnFailure))
	e.waitRunning("web")
	e.createSnapshot("s", "web")
	e.waitSnapshot("s", snapshotv1.Succeeded)
	e.changeCores("web", 6)

	e.createRestore("r", "web", "s", func(r *snapshotv1.VirtualMachineRestore) {
		r.Spec.TargetReadinessPolicy = ptr(snapshotv1.VirtualMachineRestoreStopTarget)
	})
	e.waitRestore("r", "complete", isComplete)
	// Stopped with a stop request (virt-api's stop of a RerunOnFailure
	// VM), so the run strategy stays.
	vm := e.waitStopped("web")
	if vm.Spec.Template.Spec.Domain.CPU.Cores != 2 || *vm.Spec.RunStrategy != virtv1.RunStrategyRerunOnFailure || vm.Status.RestoreInProgress != nil {
		t.Errorf("VM after restore: %s cores %d", describeVM(vm), vm.Spec.Template.Spec.Domain.CPU.Cores)
	}
}

func TestRestoreReadinessPolicyFailures(t *testing.T) {
	e := newCDIEnv(t, testPVC("web-data", "local-lvm", "2Gi")).run(Options{}, func(c *Controller) {
		c.ext.restoreGrace = 300 * time.Millisecond
	})
	e.createVM(diskVM("web", virtv1.RunStrategyAlways))
	e.waitRunning("web")
	e.createSnapshot("s", "web")
	e.waitSnapshot("s", snapshotv1.Succeeded)

	failed := func(r *snapshotv1.VirtualMachineRestore) bool {
		return restoreCond(r, snapshotv1.ConditionFailure).Status == corev1.ConditionTrue
	}
	e.createRestore("now", "web", "s", func(r *snapshotv1.VirtualMachineRestore) {
		r.Spec.TargetReadinessPolicy = ptr(snapshotv1.VirtualMachineRestoreFailImmediate)
	})
	r := e.waitRestore("now", "failed", failed)
	if restoreCond(r, snapshotv1.ConditionFailure).Reason != "Restore target failed to be ready within 0s" || isComplete(r) {
		t.Errorf("restore: %s", describeRestore(r))
	}
	// The failed restore released the VM, so the next one can lock it.
	e.createRestore("later", "web", "s")
	r = e.waitRestore("later", "failed", failed)
	if restoreCond(r, snapshotv1.ConditionFailure).Reason != "Restore target failed to be ready within 300ms" {
		t.Errorf("restore: %s", describeRestore(r))
	}
	e.waitVM("web", "unlocked", func(vm *virtv1.VirtualMachine) bool { return vm.Status.RestoreInProgress == nil })
	e.waitRunning("web")
}

func TestRestoreOfMissingOrFailedSnapshot(t *testing.T) {
	e := newCDIEnv(t, testPVC("web-data", "local-lvm", "2Gi")).run(Options{SnapshotUnsupported: true})
	e.createVM(diskVM("web", virtv1.RunStrategyHalted))
	e.createRestore("nosnap", "web", "missing")
	e.waitRestore("nosnap", "waiting for the snapshot", func(r *snapshotv1.VirtualMachineRestore) bool {
		return restoreCond(r, snapshotv1.ConditionReady).Reason == "VirtualMachineSnapshot missing does not exist"
	})
	e.createSnapshot("bad", "web")
	e.waitSnapshot("bad", snapshotv1.Failed)
	e.createRestore("fromfailed", "web", "bad")
	e.waitRestore("fromfailed", "failed", func(r *snapshotv1.VirtualMachineRestore) bool {
		return restoreCond(r, snapshotv1.ConditionFailure).Reason == "VirtualMachineSnapshot bad failed"
	})
}

func TestRestoreBringsBackDataVolumes(t *testing.T) {
	e := newCDIEnv(t).run(Options{})
	e.createVM(withDataVolume(testVM("web", virtv1.RunStrategyHalted), "disk", blankDVT("web-disk-a", "1Gi", nil)))
	e.waitDVPhase("web-disk-a", cdiv1.Succeeded)
	e.waitStopped("web")
	e.createSnapshot("s", "web")
	e.waitSnapshot("s", snapshotv1.Succeeded)

	// Replace the disk by another one and drop the old DataVolume.
	eventually(t, "swap disks", func() (bool, string) {
		vm := e.getVM("web")
		vm.Spec.DataVolumeTemplates = []virtv1.DataVolumeTemplateSpec{blankDVT("web-disk-b", "2Gi", nil)}
		vm.Spec.Template.Spec.Volumes[1].DataVolume.Name = "web-disk-b"
		_, err := e.kv.KubevirtV1().VirtualMachines(testNS).Update(e.ctx, vm, metav1.UpdateOptions{})
		return err == nil, describeErr(err)
	})
	e.waitDVPhase("web-disk-b", cdiv1.Succeeded)
	if err := e.cdi.CdiV1beta1().DataVolumes(testNS).Delete(e.ctx, "web-disk-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "PVC web-disk-a", func() bool { return e.getPVC("web-disk-a") != nil })

	e.createRestore("r", "web", "s")
	r := e.waitRestore("r", "complete", isComplete)
	if !slices.Equal(r.Status.DeletedDataVolumes, []string{"web-disk-b"}) || len(r.Status.Restores) != 1 ||
		r.Status.Restores[0].DataVolumeName == nil || *r.Status.Restores[0].DataVolumeName != "web-disk-a" {
		t.Errorf("restore status: %+v", r.Status)
	}
	// The old disk is back (an empty stand-in adopted by its DataVolume),
	// the newer one is gone.
	dv := e.waitDVPhase("web-disk-a", cdiv1.Succeeded)
	pvc := e.waitPVC("web-disk-a")
	if ref := metav1.GetControllerOf(pvc); ref == nil || ref.UID != dv.UID || pvc.Annotations[AnnotationPopulatedFor] != "web-disk-a" {
		t.Errorf("restored PVC: owner %+v annotations %v", ref, pvc.Annotations)
	}
	waitGone(t, "DataVolume web-disk-b", func() bool { return e.getDV("web-disk-b") != nil })
	waitGone(t, "PVC web-disk-b", func() bool { return e.getPVC("web-disk-b") != nil })
	e.waitStopped("web")
}

func TestRestoreLockKeepsVMFromStarting(t *testing.T) {
	e := newCDIEnv(t).run(Options{})
	e.createVM(testVM("web", virtv1.RunStrategyManual))
	e.waitStopped("web")
	setLock := func(v *string) {
		eventually(t, "set restore lock", func() (bool, string) {
			vm := e.getVM("web")
			vm.Status.RestoreInProgress = v
			_, err := e.kv.KubevirtV1().VirtualMachines(testNS).UpdateStatus(e.ctx, vm, metav1.UpdateOptions{})
			return err == nil, describeErr(err)
		})
	}
	setLock(ptr("someone"))
	if err := e.kv.KubevirtV1().VirtualMachines(testNS).Start(e.ctx, "web", &virtv1.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	// The controller has seen the start request under the lock.
	if vm := e.synced("web"); len(vm.Status.StateChangeRequests) == 0 {
		t.Fatalf("the start request is gone: %s", describeVM(vm))
	}
	if vmi := e.getVMI("web"); vmi != nil {
		t.Fatalf("a locked VM started: %s", describeVMI(vmi))
	}
	setLock(nil)
	e.waitRunning("web")
}
