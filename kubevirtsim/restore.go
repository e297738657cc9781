package kubevirtsim

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"time"

	"go.uber.org/zap"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clonev1 "kubevirt.io/api/clone/v1beta1"
	virtv1 "kubevirt.io/api/core/v1"
	snapshotv1 "kubevirt.io/api/snapshot/v1beta1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// Names and messages of KubeVirt v1.8's restore controller.
const (
	restoreFinalizer = "snapshot.kubevirt.io/vmrestore-protection"
	// AnnotationLastRestore is set on a restored VM to
	// "<restore name>-<restore uid>".
	AnnotationLastRestore = "restore.kubevirt.io/lastRestoreUID"

	msgRestoreInitializing = "Initializing VirtualMachineRestore"
	msgWaitingForTarget    = "Waiting for target to be ready"
	// MessageVMMustBeStopped is the message of a restore's conditions while
	// its target VM still runs.
	MessageVMMustBeStopped = "VM must be stopped"
	msgUpdatingTarget      = "Updating target spec"
)

// restores plays KubeVirt's VirtualMachineRestore controller:
//
//   - a new restore gets the vmrestore-protection finalizer, status
//     complete=false and conditions Progressing=True/Ready=False
//     ("Initializing VirtualMachineRestore"); it waits for its snapshot to
//     be ready (a Failed snapshot fails it);
//   - an existing target VM is locked (status.restoreInProgress; the VM
//     controller does not start a locked VM) and must be stopped: a running
//     VM keeps the restore waiting with conditions "Waiting for target to be
//     ready" / MessageVMMustBeStopped, unless targetReadinessPolicy is
//     StopTarget (the restore stops the VM), FailImmediate (it fails) or
//     WaitGracePeriod (the default: it fails after 5 minutes);
//     WaitEventually waits forever;
//   - the target's spec is replaced by the snapshot's (name, UID and
//     metadata stay), the run strategy set to Halted like KubeVirt does, the
//     PVCs of the snapshot that no longer exist are recreated from the
//     volume backups (empty: there are no volume snapshots), DataVolumes the
//     restored spec no longer has are deleted (status.deletedDataVolumes);
//   - a missing target VM is created from the snapshot (clones): volumes get
//     new names per volumeRestorePolicy (RandomizeNames:
//     "restore-<restore uid>-<volume>", PrefixTargetName:
//     "<target>-<volume>", or volumeRestoreOverrides) as
//     dataVolumeTemplates cloning (source.pvc) the snapshot's PVCs; then
//     spec.patches are applied;
//   - it ends with status.complete=true, restoreTime, status.restores and
//     conditions Progressing=False/Ready=True ("Operation complete"), or
//     with a Failure condition.
type restores struct{ c *Controller }

func (r *restores) addHandlers() {
	c := r.c
	e := &c.ext
	mustAddHandler(e.restoreInformer, handlerD(func(m metav1.Object, deleted bool) {
		c.enqueue(keyRestore, m.GetNamespace(), m.GetName())
		if deleted {
			c.ext.seen.forget(m.GetUID())
		}
		if ref := metav1.GetControllerOf(m); ref != nil && ref.Kind == clonev1.VirtualMachineCloneKind.Kind {
			c.enqueue(keyClone, m.GetNamespace(), ref.Name)
		}
	}))
	byTarget := handler(func(m metav1.Object) {
		c.enqueueIndexed(e.restoreInformer, indexTarget, m.GetNamespace()+"/"+m.GetName(), keyRestore)
	})
	mustAddHandler(c.vmInformer, byTarget)
	mustAddHandler(c.vmiInformer, byTarget)
}

func restoreSnapshotIndex(obj any) ([]string, error) {
	r, ok := obj.(*snapshotv1.VirtualMachineRestore)
	if !ok {
		return nil, nil
	}
	return []string{r.Namespace + "/" + r.Spec.VirtualMachineSnapshotName}, nil
}

func restoreTargetIndex(obj any) ([]string, error) {
	r, ok := obj.(*snapshotv1.VirtualMachineRestore)
	if !ok {
		return nil, nil
	}
	return []string{r.Namespace + "/" + r.Spec.Target.Name}, nil
}

// ready keeps a VM that is being restored from starting (vmDependency).
func (r *restores) ready(_ context.Context, vm *virtv1.VirtualMachine) (bool, error) {
	return vm.Status.RestoreInProgress == nil, nil
}

func (r *restores) printableStatus(*virtv1.VirtualMachine, *virtv1.VirtualMachineInstance) (virtv1.VirtualMachinePrintableStatus, bool) {
	return "", false
}

func restoreID(rs *snapshotv1.VirtualMachineRestore) string {
	return rs.Name + "-" + string(rs.UID)
}

func restoreFailed(rs *snapshotv1.VirtualMachineRestore) bool {
	if rs.Status == nil {
		return false
	}
	f := findSnapshotCondition(rs.Status.Conditions, snapshotv1.ConditionFailure)
	return f != nil && f.Status == corev1.ConditionTrue
}

func restoreComplete(rs *snapshotv1.VirtualMachineRestore) bool {
	return rs.Status != nil && rs.Status.Complete != nil && *rs.Status.Complete
}

// sync reconciles one VirtualMachineRestore (key "namespace/name").
func (r *restores) sync(ctx context.Context, key string) (time.Duration, error) {
	c := r.c
	rs := getCachedKey[*snapshotv1.VirtualMachineRestore](c.ext.restoreInformer, key)
	if rs == nil {
		return 0, nil
	}
	ns, name := rs.Namespace, rs.Name
	var err error
	client := c.kv.SnapshotV1beta1().VirtualMachineRestores(ns)
	if rs.DeletionTimestamp == nil {
		gone, err := c.cloneOwnerGone(ctx, rs)
		if err == nil && !gone {
			if ref := metav1.GetControllerOf(rs); ref != nil && ref.Kind == virtv1.VirtualMachineGroupVersionKind.Kind {
				gone, err = c.vmGone(ctx, ns, ref)
			}
		}
		if err != nil {
			return 0, err
		}
		if gone {
			c.log.Info("deleting restore whose owner is gone", zapKey(rs))
			return 0, preconditionDelete(rs.UID, func(o metav1.DeleteOptions) error { return client.Delete(ctx, name, o) })
		}
	}
	if rs.DeletionTimestamp != nil {
		if !hasFinalizer(rs, restoreFinalizer) {
			return 0, nil
		}
		if err := c.setVMLock(ctx, ns, rs.Spec.Target.Name, lockRestore, name, false); err != nil {
			return 0, err
		}
		patch := finalizerPatch(rs.Finalizers, withoutFinalizers(rs.Finalizers, restoreFinalizer))
		_, err := client.Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{})
		return 0, snapshotWriteErr(err, name)
	}
	if restoreComplete(rs) || restoreFailed(rs) {
		c.ext.seen.forget(rs.UID)
		if vm := getCached[*virtv1.VirtualMachine](c.vmInformer, ns, rs.Spec.Target.Name); vm != nil &&
			vm.Status.RestoreInProgress != nil && *vm.Status.RestoreInProgress == name {
			return 0, c.setVMLock(ctx, ns, vm.Name, lockRestore, name, false)
		}
		return 0, nil
	}
	if !hasFinalizer(rs, restoreFinalizer) {
		patch := finalizerPatch(rs.Finalizers, appendMissing(rs.Finalizers, restoreFinalizer))
		_, err := client.Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{})
		return 0, snapshotWriteErr(err, name)
	}

	now := time.Now()
	orig := rs.DeepCopy()
	if rs.Status == nil {
		rs.Status = &snapshotv1.VirtualMachineRestoreStatus{Complete: ptr(false)}
		setSnapshotCondition(&rs.Status.Conditions, snapshotv1.ConditionProgressing, corev1.ConditionTrue, msgRestoreInitializing, now)
		setSnapshotCondition(&rs.Status.Conditions, snapshotv1.ConditionReady, corev1.ConditionFalse, msgRestoreInitializing, now)
		c.ext.seen.since(rs.UID, now)
		return time.Millisecond, r.writeStatus(ctx, orig, rs)
	}
	st := rs.Status
	waiting := func(reason, message string, requeue time.Duration) (time.Duration, error) {
		setRestoreCondition(st, snapshotv1.ConditionProgressing, corev1.ConditionFalse, reason, message, now)
		setRestoreCondition(st, snapshotv1.ConditionReady, corev1.ConditionFalse, reason, message, now)
		return requeue, r.writeStatus(ctx, orig, rs)
	}
	fail := func(reason string) (time.Duration, error) {
		setRestoreCondition(st, snapshotv1.ConditionProgressing, corev1.ConditionFalse, reason, "", now)
		setRestoreCondition(st, snapshotv1.ConditionReady, corev1.ConditionFalse, reason, "", now)
		setRestoreCondition(st, snapshotv1.ConditionFailure, corev1.ConditionTrue, reason, "", now)
		c.log.Info("restore failed", zapKey(rs), zap.String("reason", reason))
		if err := r.writeStatus(ctx, orig, rs); err != nil {
			return 0, err
		}
		return 0, c.setVMLock(ctx, ns, rs.Spec.Target.Name, lockRestore, name, false)
	}

	if t := rs.Spec.Target; t.Kind != virtv1.VirtualMachineGroupVersionKind.Kind || (t.APIGroup != nil && *t.APIGroup != virtv1.GroupVersion.Group) {
		return fail(fmt.Sprintf("unsupported restore target %s", t.Kind))
	}
	snap := getCached[*snapshotv1.VirtualMachineSnapshot](c.ext.snapshotInformer, ns, rs.Spec.VirtualMachineSnapshotName)
	switch {
	case snap == nil:
		return waiting(fmt.Sprintf("VirtualMachineSnapshot %s does not exist", rs.Spec.VirtualMachineSnapshotName), "", 0)
	case snap.Status != nil && snap.Status.Phase == snapshotv1.Failed:
		return fail(fmt.Sprintf("VirtualMachineSnapshot %s failed", snap.Name))
	case snap.Status == nil || snap.Status.ReadyToUse == nil || !*snap.Status.ReadyToUse || snap.Status.VirtualMachineSnapshotContentName == nil:
		return waiting(fmt.Sprintf("VirtualMachineSnapshot %s not ready", snap.Name), "", 0)
	}
	content := getCached[*snapshotv1.VirtualMachineSnapshotContent](c.ext.contentInformer, ns, *snap.Status.VirtualMachineSnapshotContentName)
	if content == nil {
		content, err = c.kv.SnapshotV1beta1().VirtualMachineSnapshotContents(ns).Get(ctx, *snap.Status.VirtualMachineSnapshotContentName, metav1.GetOptions{})
		if err != nil {
			return 0, err
		}
	}
	if content.Spec.Source.VirtualMachine == nil || content.Spec.Source.VirtualMachine.Spec.Template == nil {
		return fail("unexpected snapshot source")
	}

	vm := getCached[*virtv1.VirtualMachine](c.vmInformer, ns, rs.Spec.Target.Name)
	if vm == nil {
		vm, err = c.kv.KubevirtV1().VirtualMachines(ns).Get(ctx, rs.Spec.Target.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return r.createTarget(ctx, orig, rs, content, now, fail)
		}
		if err != nil {
			return 0, err
		}
	}

	// Restore into the existing VM.
	if len(rs.OwnerReferences) == 0 {
		upd := rs.DeepCopy()
		upd.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(vm, virtv1.VirtualMachineGroupVersionKind)}
		_, err := client.Update(ctx, upd, metav1.UpdateOptions{})
		return 0, err
	}
	if vm.Annotations[AnnotationLastRestore] != restoreID(rs) {
		// As KubeVirt's restore controller: the target is stopped first,
		// and only then locked (UpdateRestoreInProgress), so that its
		// stop is no run-state change under its own lock.
		if ready, requeue, err := r.targetReady(ctx, rs, vm, now); err != nil || !ready {
			if err != nil {
				return 0, err
			}
			if requeue < 0 {
				return fail(fmt.Sprintf("Restore target failed to be ready within %v", r.grace(rs)))
			}
			return waiting(msgWaitingForTarget, MessageVMMustBeStopped, requeue)
		}
		if l := vm.Status.RestoreInProgress; l != nil && *l != name {
			return waiting(fmt.Sprintf("vm restore %s in progress", *l), "", 0)
		}
		if err := c.setVMLock(ctx, ns, vm.Name, lockRestore, name, true); err != nil {
			return 0, err
		}
		restored, deleted, done, err := r.restoreInPlace(ctx, rs, vm, content)
		if done {
			// The VM cache had not caught up with our own update.
			return 50 * time.Millisecond, nil
		}
		if err != nil {
			if apierrors.IsConflict(err) {
				return 0, err
			}
			setRestoreCondition(st, snapshotv1.ConditionProgressing, corev1.ConditionFalse, err.Error(), "", now)
			setRestoreCondition(st, snapshotv1.ConditionReady, corev1.ConditionFalse, err.Error(), "", now)
			if werr := r.writeStatus(ctx, orig, rs); werr != nil {
				return 0, werr
			}
			return 0, err
		}
		st.Restores = restored
		for _, name := range deleted {
			st.DeletedDataVolumes = appendMissing(st.DeletedDataVolumes, name)
		}
		setRestoreCondition(st, snapshotv1.ConditionProgressing, corev1.ConditionTrue, msgUpdatingTarget, "", now)
		setRestoreCondition(st, snapshotv1.ConditionReady, corev1.ConditionFalse, "Waiting for target update", "", now)
		return time.Millisecond, r.writeStatus(ctx, orig, rs)
	}
	if err := r.deleteObsoleteDataVolumes(ctx, vm, st.DeletedDataVolumes); err != nil {
		return 0, err
	}
	if err := c.setVMLock(ctx, ns, vm.Name, lockRestore, name, false); err != nil {
		return 0, err
	}
	return 0, r.complete(ctx, orig, rs, now)
}

// deleteObsoleteDataVolumes deletes the VM's DataVolumes its restored spec
// no longer has. It runs while the VM is still locked, after the spec
// update, so the VM controller does not recreate them.
func (r *restores) deleteObsoleteDataVolumes(ctx context.Context, vm *virtv1.VirtualMachine, names []string) error {
	c := r.c
	if c.ext.cdi == nil {
		return nil
	}
	for _, name := range names {
		dv, err := c.ext.cdi.CdiV1beta1().DataVolumes(vm.Namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return err
		}
		if !ownedBy(dv, vm.UID) {
			continue
		}
		if err := preconditionDelete(dv.UID, func(o metav1.DeleteOptions) error {
			return c.ext.cdi.CdiV1beta1().DataVolumes(vm.Namespace).Delete(ctx, dv.Name, o)
		}); err != nil {
			return err
		}
		c.log.Info("restore deleted an obsolete DataVolume", zapKey(dv))
	}
	return nil
}

func (r *restores) complete(ctx context.Context, orig, rs *snapshotv1.VirtualMachineRestore, now time.Time) error {
	st := rs.Status
	st.Complete = ptr(true)
	st.RestoreTime = ptr(metav1.NewTime(now))
	setRestoreCondition(st, snapshotv1.ConditionProgressing, corev1.ConditionFalse, msgOperationComplete, "", now)
	setRestoreCondition(st, snapshotv1.ConditionReady, corev1.ConditionTrue, msgOperationComplete, "", now)
	r.c.ext.seen.forget(rs.UID)
	r.c.log.Info("restore complete", zapKey(rs), zap.String("target", rs.Spec.Target.Name))
	return r.writeStatus(ctx, orig, rs)
}

func (r *restores) grace(rs *snapshotv1.VirtualMachineRestore) time.Duration {
	if p := rs.Spec.TargetReadinessPolicy; p != nil && *p == snapshotv1.VirtualMachineRestoreFailImmediate {
		return 0
	}
	return r.c.ext.restoreGrace
}

// targetReady reports whether the target VM is stopped. When it is not,
// requeue says when to look again; a negative requeue means the readiness
// policy gives up.
func (r *restores) targetReady(ctx context.Context, rs *snapshotv1.VirtualMachineRestore, vm *virtv1.VirtualMachine, now time.Time) (bool, time.Duration, error) {
	vmi := getCached[*virtv1.VirtualMachineInstance](r.c.vmiInformer, vm.Namespace, vm.Name)
	if vmi == nil || !isControlledBy(vmi, vm) || vmi.IsFinal() {
		return true, 0, nil
	}
	policy := snapshotv1.VirtualMachineRestoreWaitGracePeriodAndFail
	if rs.Spec.TargetReadinessPolicy != nil {
		policy = *rs.Spec.TargetReadinessPolicy
	}
	switch policy {
	case snapshotv1.VirtualMachineRestoreStopTarget:
		// KubeVirt's vmRestoreTarget.Stop: virt-api's stop subresource
		// (a stop request for Manual VMs, Halted for Always ones).
		r.c.log.Info("restore stops its target VM", zapKey(rs), zap.String("vm", vm.Name))
		err := r.c.kv.KubevirtV1().VirtualMachines(vm.Namespace).Stop(ctx, vm.Name, &virtv1.StopOptions{})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return false, 0, err
		}
		return false, 0, nil
	case snapshotv1.VirtualMachineRestoreWaitEventually:
		return false, 0, nil
	}
	left := r.c.ext.seen.since(rs.UID, now).Add(r.grace(rs)).Sub(now)
	if left <= 0 {
		return false, -1, nil
	}
	return false, left, nil
}

// restoreInPlace replaces the target's spec by the snapshot's: the restored
// VM keeps its name, UID and metadata and is Halted. It returns the volume
// restores and the DataVolume templates the restored spec drops; done
// reports a VM that this restore has already updated.
func (r *restores) restoreInPlace(ctx context.Context, rs *snapshotv1.VirtualMachineRestore, vm *virtv1.VirtualMachine,
	content *snapshotv1.VirtualMachineSnapshotContent) (restored []snapshotv1.VolumeRestore, deleted []string, done bool, err error) {
	c := r.c
	// The lock was just written (and the cache may lag): work on the
	// current object.
	upd, err := c.kv.KubevirtV1().VirtualMachines(vm.Namespace).Get(ctx, vm.Name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, false, err
	}
	if upd.Annotations[AnnotationLastRestore] == restoreID(rs) {
		return nil, nil, true, nil
	}
	if upd.UID != vm.UID {
		return nil, nil, false, apierrors.NewConflict(vmGroupResource, vm.Name, fmt.Errorf("VM %s was replaced", vm.Name))
	}
	src := content.Spec.Source.VirtualMachine
	spec := src.Spec.DeepCopy()
	keepRunStrategy(spec, upd)

	dvBacked := map[string]bool{} // volume name → DataVolume-backed
	for _, v := range spec.Template.Spec.Volumes {
		if v.DataVolume != nil {
			dvBacked[v.Name] = true
		}
	}
	for _, b := range content.Spec.VolumeBackups {
		vr := snapshotv1.VolumeRestore{VolumeName: b.VolumeName, PersistentVolumeClaimName: b.PersistentVolumeClaim.Name}
		if b.VolumeSnapshotName != nil {
			vr.VolumeSnapshotName = *b.VolumeSnapshotName
		}
		if dvBacked[b.VolumeName] {
			vr.DataVolumeName = ptr(b.PersistentVolumeClaim.Name)
		}
		restored = append(restored, vr)
		if getCached[*corev1.PersistentVolumeClaim](c.ext.pvcInformer, vm.Namespace, b.PersistentVolumeClaim.Name) != nil {
			continue
		}
		if err := r.recreatePVC(ctx, rs, vm, b, dvBacked[b.VolumeName]); err != nil {
			return nil, nil, false, err
		}
	}

	// DataVolumes the restored spec no longer has are deleted once the
	// update is through (see deleteObsoleteDataVolumes).
	keep := map[string]bool{}
	for _, t := range spec.DataVolumeTemplates {
		keep[t.Name] = true
	}
	for _, t := range upd.Spec.DataVolumeTemplates {
		if !keep[t.Name] {
			deleted = append(deleted, t.Name)
		}
	}
	upd.Spec = *spec
	if upd.Annotations == nil {
		upd.Annotations = map[string]string{}
	}
	upd.Annotations[AnnotationLastRestore] = restoreID(rs)
	if _, err := c.kv.KubevirtV1().VirtualMachines(vm.Namespace).Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
		return nil, nil, false, err
	}
	c.log.Info("restored VM spec from snapshot", zapKey(vm), zap.String("restore", rs.Name))

	return restored, deleted, false, nil
}

// recreatePVC creates an empty stand-in for a PVC of the snapshot that is
// gone (the simulator has no volume snapshots to restore data from). A
// DataVolume-backed one is left for the DataVolume to adopt; others belong
// to the VM unless volumeOwnershipPolicy is None.
func (r *restores) recreatePVC(ctx context.Context, rs *snapshotv1.VirtualMachineRestore, vm *virtv1.VirtualMachine, b snapshotv1.VolumeBackup, dvBacked bool) error {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:        b.PersistentVolumeClaim.Name,
			Namespace:   vm.Namespace,
			Labels:      maps.Clone(b.PersistentVolumeClaim.Labels),
			Annotations: map[string]string{},
		},
		Spec: *b.PersistentVolumeClaim.Spec.DeepCopy(),
	}
	for k, v := range b.PersistentVolumeClaim.Annotations {
		if !restoreDropsAnnotation(k) {
			pvc.Annotations[k] = v
		}
	}
	pvc.Annotations["restore.kubevirt.io/name"] = rs.Name
	pvc.Spec.VolumeName = ""
	pvc.Spec.DataSource, pvc.Spec.DataSourceRef = nil, nil
	if dvBacked {
		pvc.Annotations[AnnotationPopulatedFor] = pvc.Name
	} else if p := rs.Spec.VolumeOwnershipPolicy; p == nil || *p == snapshotv1.VolumeOwnershipPolicyVm {
		pvc.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(vm, virtv1.VirtualMachineGroupVersionKind)}
	}
	_, err := r.c.createBoundPVC(ctx, pvc)
	return err
}

// restoreDropAnnotationPrefixes are the annotations KubeVirt drops from the
// PVCs it restores.
var restoreDropAnnotationPrefixes = []string{
	"pv.kubernetes.io", "volume.beta.kubernetes.io", "cdi.kubevirt.io",
	"volume.kubernetes.io", "k8s.io/CloneRequest", "k8s.io/CloneOf",
}

func restoreDropsAnnotation(key string) bool {
	for _, p := range restoreDropAnnotationPrefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// createTarget creates the missing target VM from the snapshot, with
// renamed volumes cloned from the snapshot's PVCs and spec.patches applied.
func (r *restores) createTarget(ctx context.Context, orig, rs *snapshotv1.VirtualMachineRestore, content *snapshotv1.VirtualMachineSnapshotContent,
	now time.Time, fail func(string) (time.Duration, error)) (time.Duration, error) {
	c := r.c
	src := content.Spec.Source.VirtualMachine
	vm := &virtv1.VirtualMachine{
		TypeMeta: metav1.TypeMeta{APIVersion: virtv1.GroupVersion.String(), Kind: virtv1.VirtualMachineGroupVersionKind.Kind},
		ObjectMeta: metav1.ObjectMeta{
			Name:        rs.Spec.Target.Name,
			Namespace:   rs.Namespace,
			Labels:      maps.Clone(src.Labels),
			Annotations: maps.Clone(src.Annotations),
		},
		Spec: *src.Spec.DeepCopy(),
	}
	halt(&vm.Spec)
	if vm.Annotations == nil {
		vm.Annotations = map[string]string{}
	}
	vm.Annotations[AnnotationLastRestore] = restoreID(rs)
	restored := renameVolumes(vm, rs, content)
	patched, err := patchVM(vm, rs.Spec.Patches)
	if err != nil {
		return fail(fmt.Sprintf("error patching VM %s: %v", vm.Name, err))
	}
	patched.Namespace = rs.Namespace
	patched.ResourceVersion, patched.UID = "", ""
	created, err := c.kv.KubevirtV1().VirtualMachines(rs.Namespace).Create(ctx, patched, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		return 50 * time.Millisecond, nil // restore into it in place next time
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		return fail(fmt.Sprintf("error creating VM %s: %v", patched.Name, err))
	case err != nil:
		return 0, err
	}
	c.log.Info("created VM from snapshot", zapKey(created), zap.String("restore", rs.Name))
	rs.Status.Restores = restored
	return 0, r.complete(ctx, orig, rs, now)
}

// renameVolumes gives every PVC/DataVolume volume of a new VM its own
// DataVolume, cloned from the snapshot's PVC and named per the restore's
// volume policy, and returns the volume restores.
func renameVolumes(vm *virtv1.VirtualMachine, rs *snapshotv1.VirtualMachineRestore, content *snapshotv1.VirtualMachineSnapshotContent) []snapshotv1.VolumeRestore {
	src := content.Spec.Source.VirtualMachine
	srcNS := src.Namespace
	if srcNS == "" {
		srcNS = rs.Namespace
	}
	backups := map[string]snapshotv1.VolumeBackup{}
	for _, b := range content.Spec.VolumeBackups {
		backups[b.VolumeName] = b
	}
	overrides := map[string]snapshotv1.VolumeRestoreOverride{}
	for _, o := range rs.Spec.VolumeRestoreOverrides {
		overrides[o.VolumeName] = o
	}
	newName := func(volume string) string {
		if o, ok := overrides[volume]; ok && o.RestoreName != "" {
			return o.RestoreName
		}
		if p := rs.Spec.VolumeRestorePolicy; p != nil && *p == snapshotv1.VolumeRestorePolicyPrefixTargetName {
			return vm.Name + "-" + volume
		}
		return fmt.Sprintf("restore-%s-%s", rs.UID, volume)
	}
	templates := map[string]int{}
	for i, t := range vm.Spec.DataVolumeTemplates {
		templates[t.Name] = i
	}
	renamed := map[int]bool{}
	var restored []snapshotv1.VolumeRestore
	spec := &vm.Spec.Template.Spec
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		claim := claimOf(*v)
		if claim == "" {
			continue
		}
		to := newName(v.Name)
		source := dataVolumeSourcePVC(srcNS, claim)
		b, backed := backups[v.Name]
		if backed {
			source = dataVolumeSourcePVC(srcNS, b.PersistentVolumeClaim.Name)
		}
		if j, ok := templates[claim]; ok && !renamed[j] {
			t := &vm.Spec.DataVolumeTemplates[j]
			t.Name = to
			t.Spec.Source = source
			t.Spec.SourceRef = nil
			if t.Spec.Storage == nil && t.Spec.PVC == nil && backed {
				t.Spec.Storage = storageFromClaim(&b.PersistentVolumeClaim.Spec)
			}
			applyOverride(&t.ObjectMeta, overrides[v.Name])
			renamed[j] = true
		} else {
			t := virtv1.DataVolumeTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Name: to},
				Spec:       cdiv1.DataVolumeSpec{Source: source},
			}
			if backed {
				t.Spec.Storage = storageFromClaim(&b.PersistentVolumeClaim.Spec)
			} else {
				t.Spec.Storage = &cdiv1.StorageSpec{}
			}
			applyOverride(&t.ObjectMeta, overrides[v.Name])
			vm.Spec.DataVolumeTemplates = append(vm.Spec.DataVolumeTemplates, t)
		}
		if v.DataVolume != nil {
			v.DataVolume.Name = to
		} else {
			v.PersistentVolumeClaim.ClaimName = to
		}
		vr := snapshotv1.VolumeRestore{VolumeName: v.Name, PersistentVolumeClaimName: to, DataVolumeName: ptr(to)}
		if backed && b.VolumeSnapshotName != nil {
			vr.VolumeSnapshotName = *b.VolumeSnapshotName
		}
		restored = append(restored, vr)
	}
	// Templates no volume uses get new names too, so that they do not
	// collide with the source's DataVolumes.
	for j := range vm.Spec.DataVolumeTemplates {
		if _, orig := templates[vm.Spec.DataVolumeTemplates[j].Name]; orig && !renamed[j] && j < len(templates) {
			vm.Spec.DataVolumeTemplates[j].Name = newName(vm.Spec.DataVolumeTemplates[j].Name)
		}
	}
	return restored
}

func applyOverride(m *metav1.ObjectMeta, o snapshotv1.VolumeRestoreOverride) {
	if len(o.Labels) > 0 {
		if m.Labels == nil {
			m.Labels = map[string]string{}
		}
		maps.Copy(m.Labels, o.Labels)
	}
	if len(o.Annotations) > 0 {
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		maps.Copy(m.Annotations, o.Annotations)
	}
}

// halt sets the run strategy of a restored VM to Halted (or running to
// false), as KubeVirt does in case the snapshot was taken online.
func halt(spec *virtv1.VirtualMachineSpec) {
	if spec.RunStrategy != nil {
		spec.RunStrategy = ptr(virtv1.RunStrategyHalted)
	} else if spec.Running != nil {
		spec.Running = ptr(false)
	}
}

// keepRunStrategy gives a restored spec the run strategy the existing VM
// has, as KubeVirt's generateRestoredVMSpec does ("make sure an existing
// VM keeps the same run strategy as before the restore"; its webhook
// refuses a run strategy change while the restore holds the VM).
func keepRunStrategy(spec *virtv1.VirtualMachineSpec, vm *virtv1.VirtualMachine) {
	if vm.Spec.Running != nil {
		spec.Running, spec.RunStrategy = ptr(false), nil
		return
	}
	rs, err := vm.RunStrategy()
	if err != nil {
		rs = virtv1.RunStrategyHalted
	}
	spec.RunStrategy, spec.Running = ptr(rs), nil
}

// patchVM applies JSON patch operations (each a JSON object) to the VM.
func patchVM(vm *virtv1.VirtualMachine, patches []string) (*virtv1.VirtualMachine, error) {
	if len(patches) == 0 {
		return vm, nil
	}
	p, err := jsonpatch.DecodePatch([]byte("[" + strings.Join(patches, ",") + "]"))
	if err != nil {
		return nil, err
	}
	doc, err := json.Marshal(vm)
	if err != nil {
		return nil, err
	}
	out, err := p.Apply(doc)
	if err != nil {
		return nil, err
	}
	patched := &virtv1.VirtualMachine{}
	if err := json.Unmarshal(out, patched); err != nil {
		return nil, err
	}
	return patched, nil
}

func (r *restores) writeStatus(ctx context.Context, orig, rs *snapshotv1.VirtualMachineRestore) error {
	return writeStatusIfChanged(ctx, orig.Status, rs.Status, rs, r.c.kv.SnapshotV1beta1().VirtualMachineRestores(rs.Namespace).UpdateStatus)
}

// setRestoreCondition is setSnapshotCondition with a message.
func setRestoreCondition(st *snapshotv1.VirtualMachineRestoreStatus, t snapshotv1.ConditionType, status corev1.ConditionStatus, reason, message string, now time.Time) {
	setSnapshotCondition(&st.Conditions, t, status, reason, now)
	if c := findSnapshotCondition(st.Conditions, t); c != nil {
		c.Message = message
	}
}
