package kubevirtsim

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	clonev1 "kubevirt.io/api/clone/v1beta1"
	virtv1 "kubevirt.io/api/core/v1"
	snapshotv1 "kubevirt.io/api/snapshot/v1beta1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// Finalizers, names and messages of KubeVirt v1.8's snapshot controllers.
const (
	snapshotFinalizer = "snapshot.kubevirt.io/vmsnapshot-protection"
	contentFinalizer  = "snapshot.kubevirt.io/vmsnapshotcontent-protection"

	msgSourceDoesNotExist = "Source does not exist"
	msgSourceLocked       = "Source locked and operation in progress"
	msgNotReady           = "Not ready"
	msgOperationComplete  = "Operation complete"
	msgDeadlineExceeded   = "Failed to create snapshot within failure deadline"
	msgSnapshotDeleting   = "VM snapshot is deleting"

	msgIndicationOnline       = "Snapshot was taken while the VM was running"
	msgIndicationGuestAgent   = "The guest agent froze the guest filesystems for the snapshot"
	msgIndicationNoGuestAgent = "No guest agent was connected: the snapshot is crash-consistent"
	msgIndicationPaused       = "The VM was paused when the snapshot was taken"
)

var snapshotGVK = snapshotv1.SchemeGroupVersion.WithKind("VirtualMachineSnapshot")

// noSnapshotClassReason is KubeVirt's reason for a volume whose StorageClass
// has no VolumeSnapshotClass.
func noSnapshotClassReason(class, volume string) string {
	return fmt.Sprintf("No VolumeSnapshotClass: Volume snapshots are not configured for this StorageClass [%s] [%s]", class, volume)
}

// snapshots plays KubeVirt's VirtualMachineSnapshot and
// VirtualMachineSnapshotContent controllers:
//
//   - a new snapshot gets the vmsnapshot-protection finalizer, then phase
//     InProgress with sourceUID, indications (Online while a VMI runs,
//     GuestAgent/NoGuestAgent, Paused), snapshotVolumes and conditions
//     Progressing=True/Ready=False; the source VM is locked
//     (status.snapshotInProgress) meanwhile;
//   - after Options.SnapshotDelay it creates the VirtualMachineSnapshotContent
//     "vmsnapshot-content-<snapshot uid>" holding the VM (metadata and spec)
//     and a volumeBackup per PVC/DataVolume volume, and the snapshot becomes
//     Succeeded, readyToUse, with creationTime and
//     virtualMachineSnapshotContentName;
//   - with Options.SnapshotUnsupported it fails at once (Failure condition
//     and error naming the missing VolumeSnapshotClass); a missing source
//     keeps it waiting until spec.failureDeadline (default 5m);
//   - deleting a snapshot deletes its content (deletionPolicy Delete, the
//     default) or releases it (Retain).
type snapshots struct{ c *Controller }

func (s *snapshots) addHandlers() {
	c := s.c
	e := &c.ext
	mustAddHandler(e.snapshotInformer, handlerD(func(m metav1.Object, deleted bool) {
		c.enqueue(keySnapshot, m.GetNamespace(), m.GetName())
		if snap, ok := m.(*snapshotv1.VirtualMachineSnapshot); ok && deleted {
			c.ext.seen.forget(snap.UID)
			c.enqueue(keyContent, snap.Namespace, contentNameFor(snap))
		}
		if ref := metav1.GetControllerOf(m); ref != nil && ref.Kind == clonev1.VirtualMachineCloneKind.Kind {
			c.enqueue(keyClone, m.GetNamespace(), ref.Name)
		}
		c.enqueueIndexed(e.restoreInformer, indexSnapshot, m.GetNamespace()+"/"+m.GetName(), keyRestore)
		c.enqueueIndexed(e.cloneInformer, indexSource, "snapshot:"+m.GetNamespace()+"/"+m.GetName(), keyClone)
	}))
	mustAddHandler(e.contentInformer, handler(func(m metav1.Object) {
		c.enqueue(keyContent, m.GetNamespace(), m.GetName())
		if content, ok := m.(*snapshotv1.VirtualMachineSnapshotContent); ok && content.Spec.VirtualMachineSnapshotName != nil {
			c.enqueue(keySnapshot, m.GetNamespace(), *content.Spec.VirtualMachineSnapshotName)
		}
	}))
	mustAddHandler(c.vmInformer, handler(func(m metav1.Object) {
		c.enqueueIndexed(e.snapshotInformer, indexSource, m.GetNamespace()+"/"+m.GetName(), keySnapshot)
	}))
}

func snapshotSourceIndex(obj any) ([]string, error) {
	snap, ok := obj.(*snapshotv1.VirtualMachineSnapshot)
	if !ok {
		return nil, nil
	}
	return []string{snap.Namespace + "/" + snap.Spec.Source.Name}, nil
}

func contentNameFor(snap *snapshotv1.VirtualMachineSnapshot) string {
	return "vmsnapshot-content-" + string(snap.UID)
}

// syncSnapshot reconciles one VirtualMachineSnapshot (key "namespace/name").
func (s *snapshots) syncSnapshot(ctx context.Context, key string) (time.Duration, error) {
	c := s.c
	snap := getCachedKey[*snapshotv1.VirtualMachineSnapshot](c.ext.snapshotInformer, key)
	if snap == nil {
		return 0, nil
	}
	ns, name := snap.Namespace, snap.Name
	var err error
	if snap.DeletionTimestamp == nil {
		if gone, err := c.cloneOwnerGone(ctx, snap); err != nil || gone {
			if gone {
				c.log.Info("deleting snapshot whose clone is gone", zapKey(snap))
				err = preconditionDelete(snap.UID, func(o metav1.DeleteOptions) error {
					return c.kv.SnapshotV1beta1().VirtualMachineSnapshots(ns).Delete(ctx, name, o)
				})
			}
			return 0, err
		}
	}
	if snap.DeletionTimestamp != nil {
		return 0, s.deleteSnapshot(ctx, snap)
	}
	st := snap.Status
	if st != nil && (st.Phase == snapshotv1.Succeeded || st.Phase == snapshotv1.Failed) {
		if vm := getCached[*virtv1.VirtualMachine](c.vmInformer, ns, snap.Spec.Source.Name); vm != nil &&
			vm.Status.SnapshotInProgress != nil && *vm.Status.SnapshotInProgress == name {
			// KubeVirt lets go of the source in a later pass than the
			// one that marks the snapshot done (updateVMSnapshot unlocks
			// once the snapshot no longer progresses); a loaded
			// controller takes a while: SnapshotDelay after it is done.
			if wait := c.ext.seen.since(snap.UID, time.Now()).Add(c.opts.SnapshotDelay).Sub(time.Now()); wait > 0 && st.Phase == snapshotv1.Succeeded {
				return wait, nil
			}
			c.ext.seen.forget(snap.UID)
			return 0, c.setVMLock(ctx, ns, vm.Name, lockSnapshot, name, false)
		}
		c.ext.seen.forget(snap.UID)
		return 0, nil
	}
	if !hasFinalizer(snap, snapshotFinalizer) {
		patch := finalizerPatch(snap.Finalizers, appendMissing(snap.Finalizers, snapshotFinalizer))
		_, err := c.kv.SnapshotV1beta1().VirtualMachineSnapshots(ns).Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{})
		return 0, snapshotWriteErr(err, name)
	}

	now := time.Now()
	orig := snap.DeepCopy()
	if snap.Status == nil {
		snap.Status = &snapshotv1.VirtualMachineSnapshotStatus{ReadyToUse: ptr(false)}
	}
	st = snap.Status
	fail := func(reason string) (time.Duration, error) {
		st.Phase = snapshotv1.Failed
		st.ReadyToUse = ptr(false)
		st.Error = &snapshotv1.Error{Time: ptr(metav1.NewTime(now)), Message: ptr(reason)}
		setSnapshotCondition(&st.Conditions, snapshotv1.ConditionProgressing, corev1.ConditionFalse, reason, now)
		setSnapshotCondition(&st.Conditions, snapshotv1.ConditionReady, corev1.ConditionFalse, reason, now)
		setSnapshotCondition(&st.Conditions, snapshotv1.ConditionFailure, corev1.ConditionTrue, reason, now)
		c.log.Info("snapshot failed", zapKey(snap), zap.String("reason", reason))
		if err := s.writeSnapshotStatus(ctx, orig, snap); err != nil {
			return 0, err
		}
		return 0, c.setVMLock(ctx, ns, snap.Spec.Source.Name, lockSnapshot, name, false)
	}

	src := snap.Spec.Source
	if src.Kind != virtv1.VirtualMachineGroupVersionKind.Kind || (src.APIGroup != nil && *src.APIGroup != virtv1.GroupVersion.Group) {
		return fail(fmt.Sprintf("unsupported snapshot source %s", src.Kind))
	}
	deadline := snapshotv1.DefaultFailureDeadline
	if snap.Spec.FailureDeadline != nil {
		deadline = snap.Spec.FailureDeadline.Duration
	}
	if deadline > 0 && now.After(snap.CreationTimestamp.Add(deadline)) {
		return fail(msgDeadlineExceeded)
	}
	untilDeadline := time.Duration(0)
	if deadline > 0 {
		untilDeadline = time.Until(snap.CreationTimestamp.Add(deadline)) + 10*time.Millisecond
	}

	vm := getCached[*virtv1.VirtualMachine](c.vmInformer, ns, src.Name)
	if vm == nil || vm.DeletionTimestamp != nil || (st.SourceUID != nil && *st.SourceUID != vm.UID) {
		if st.Phase == snapshotv1.PhaseUnset {
			st.Phase = snapshotv1.Unknown
		}
		setSnapshotCondition(&st.Conditions, snapshotv1.ConditionProgressing, corev1.ConditionFalse, msgSourceDoesNotExist, now)
		setSnapshotCondition(&st.Conditions, snapshotv1.ConditionReady, corev1.ConditionFalse, msgSourceDoesNotExist, now)
		return untilDeadline, s.writeSnapshotStatus(ctx, orig, snap)
	}
	if c.opts.SnapshotUnsupported {
		return fail(s.unsupportedReason(vm))
	}

	if st.Phase != snapshotv1.InProgress {
		// Lock the source, then report the snapshot in progress.
		if err := c.setVMLock(ctx, ns, vm.Name, lockSnapshot, name, true); err != nil {
			return 0, err
		}
		c.ext.seen.forget(snap.UID)
		c.ext.seen.since(snap.UID, now)
		st.Phase = snapshotv1.InProgress
		st.SourceUID = ptr(vm.UID)
		st.ReadyToUse = ptr(false)
		//lint:ignore SA1019 KubeVirt 1.8 still fills the deprecated field next to its successor.
		st.Indications, st.SourceIndications = s.indications(vm)
		st.SnapshotVolumes = s.snapshotVolumes(vm)
		setSnapshotCondition(&st.Conditions, snapshotv1.ConditionProgressing, corev1.ConditionTrue, msgSourceLocked, now)
		setSnapshotCondition(&st.Conditions, snapshotv1.ConditionReady, corev1.ConditionFalse, msgNotReady, now)
		c.log.Info("snapshot in progress", zapKey(snap))
		return max(c.opts.SnapshotDelay, time.Millisecond), s.writeSnapshotStatus(ctx, orig, snap)
	}
	if wait := c.ext.seen.since(snap.UID, now).Add(c.opts.SnapshotDelay).Sub(now); wait > 0 {
		return wait, nil
	}

	content, err := s.ensureContent(ctx, snap, vm, now)
	if err != nil {
		return 0, err
	}
	st.Phase = snapshotv1.Succeeded
	st.ReadyToUse = ptr(true)
	st.CreationTime = ptr(metav1.NewTime(now))
	st.VirtualMachineSnapshotContentName = ptr(content.Name)
	st.SnapshotVolumes = volumesOfContent(vm, content)
	setSnapshotCondition(&st.Conditions, snapshotv1.ConditionProgressing, corev1.ConditionFalse, msgOperationComplete, now)
	setSnapshotCondition(&st.Conditions, snapshotv1.ConditionReady, corev1.ConditionTrue, msgOperationComplete, now)
	if err := s.writeSnapshotStatus(ctx, orig, snap); err != nil {
		return 0, err
	}
	c.log.Info("snapshot succeeded", zapKey(snap), zap.String("content", content.Name))
	// The source stays locked a while longer (see above).
	c.ext.seen.forget(snap.UID)
	c.ext.seen.since(snap.UID, now)
	return max(c.opts.SnapshotDelay, time.Millisecond), nil
}

// unsupportedReason names the first PVC-backed volume (or the VM when it
// has none) in KubeVirt's "No VolumeSnapshotClass" wording.
func (s *snapshots) unsupportedReason(vm *virtv1.VirtualMachine) string {
	for _, st := range s.c.volumeSnapshotStatuses(vm) {
		if !st.Enabled && strings.HasPrefix(st.Reason, "No VolumeSnapshotClass") {
			return st.Reason
		}
	}
	return noSnapshotClassReason("", vm.Name)
}

func (s *snapshots) indications(vm *virtv1.VirtualMachine) ([]snapshotv1.Indication, []snapshotv1.SourceIndication) {
	vmi := getCached[*virtv1.VirtualMachineInstance](s.c.vmiInformer, vm.Namespace, vm.Name)
	if vmi == nil || vmi.IsFinal() || !vmi.IsRunning() {
		return nil, nil
	}
	type ind struct {
		i   snapshotv1.Indication
		msg string
	}
	list := []ind{{snapshotv1.VMSnapshotOnlineSnapshotIndication, msgIndicationOnline}}
	if hasVMICondition(vmi, virtv1.VirtualMachineInstanceAgentConnected, corev1.ConditionTrue) {
		list = append(list, ind{snapshotv1.VMSnapshotGuestAgentIndication, msgIndicationGuestAgent})
	} else {
		list = append(list, ind{snapshotv1.VMSnapshotNoGuestAgentIndication, msgIndicationNoGuestAgent})
	}
	if isPaused(vmi) {
		list = append(list, ind{snapshotv1.VMSnapshotPausedIndication, msgIndicationPaused})
	}
	var out []snapshotv1.Indication
	var src []snapshotv1.SourceIndication
	for _, x := range list {
		out = append(out, x.i)
		src = append(src, snapshotv1.SourceIndication{Indication: x.i, Message: x.msg})
	}
	return out, src
}

// snapshotVolumes lists the volumes a snapshot of vm includes (those with an
// existing PVC) and excludes.
func (s *snapshots) snapshotVolumes(vm *virtv1.VirtualMachine) *snapshotv1.SnapshotVolumesLists {
	if vm.Spec.Template == nil {
		return nil
	}
	l := &snapshotv1.SnapshotVolumesLists{}
	for _, v := range vm.Spec.Template.Spec.Volumes {
		claim := claimOf(v)
		if claim != "" && getCached[*corev1.PersistentVolumeClaim](s.c.ext.pvcInformer, vm.Namespace, claim) != nil && s.c.claimSnapshottable(vm, claim) {
			l.IncludedVolumes = append(l.IncludedVolumes, v.Name)
		} else {
			l.ExcludedVolumes = append(l.ExcludedVolumes, v.Name)
		}
	}
	return l
}

func volumesOfContent(vm *virtv1.VirtualMachine, content *snapshotv1.VirtualMachineSnapshotContent) *snapshotv1.SnapshotVolumesLists {
	l := &snapshotv1.SnapshotVolumesLists{}
	backed := map[string]bool{}
	for _, b := range content.Spec.VolumeBackups {
		backed[b.VolumeName] = true
	}
	src := content.Spec.Source.VirtualMachine
	if src == nil || src.Spec.Template == nil {
		return l
	}
	for _, v := range src.Spec.Template.Spec.Volumes {
		if backed[v.Name] {
			l.IncludedVolumes = append(l.IncludedVolumes, v.Name)
		} else {
			l.ExcludedVolumes = append(l.ExcludedVolumes, v.Name)
		}
	}
	return l
}

// sourceSpec is the spec a snapshot of vm records: for a VM with an
// instance (online), the one it was started with, with only its volumes,
// disks and DataVolume templates current (KubeVirt's vmSnapshotSource
// Spec, from the start's ControllerRevision); else the current one. The
// simulation keeps no revision: the instance's CPU topology and guest
// memory stand for the start's (what a restart applies), the rest of its
// spec carries the simulation's own defaults.
func (s *snapshots) sourceSpec(vm *virtv1.VirtualMachine) virtv1.VirtualMachineSpec {
	spec := *vm.Spec.DeepCopy()
	vmi := getCached[*virtv1.VirtualMachineInstance](s.c.vmiInformer, vm.Namespace, vm.Name)
	if vmi == nil || spec.Template == nil {
		return spec
	}
	d, live := &spec.Template.Spec.Domain, vmi.Spec.Domain
	if d.CPU != nil && live.CPU != nil {
		d.CPU.Sockets, d.CPU.Cores, d.CPU.Threads = live.CPU.Sockets, live.CPU.Cores, live.CPU.Threads
	}
	if d.Memory != nil && live.Memory != nil && live.Memory.Guest != nil {
		g := live.Memory.Guest.DeepCopy()
		d.Memory.Guest = &g
	}
	return spec
}

// ensureContent creates the snapshot's content (with its ready status)
// unless it exists.
func (s *snapshots) ensureContent(ctx context.Context, snap *snapshotv1.VirtualMachineSnapshot, vm *virtv1.VirtualMachine, now time.Time) (*snapshotv1.VirtualMachineSnapshotContent, error) {
	c := s.c
	name := contentNameFor(snap)
	client := c.kv.SnapshotV1beta1().VirtualMachineSnapshotContents(snap.Namespace)
	content := getCached[*snapshotv1.VirtualMachineSnapshotContent](c.ext.contentInformer, snap.Namespace, name)
	if content == nil {
		content = &snapshotv1.VirtualMachineSnapshotContent{
			ObjectMeta: metav1.ObjectMeta{
				Name:       name,
				Namespace:  snap.Namespace,
				Finalizers: []string{contentFinalizer},
			},
			Spec: snapshotv1.VirtualMachineSnapshotContentSpec{
				VirtualMachineSnapshotName: ptr(snap.Name),
				Source: snapshotv1.SourceSpec{VirtualMachine: &snapshotv1.VirtualMachine{
					ObjectMeta: metav1.ObjectMeta{
						Name:        vm.Name,
						Namespace:   vm.Namespace,
						UID:         vm.UID,
						Generation:  vm.Generation,
						Labels:      vm.Labels,
						Annotations: vm.Annotations,
					},
					Spec: s.sourceSpec(vm),
				}},
				VolumeBackups: s.volumeBackups(snap, vm),
			},
		}
		if snap.Spec.DeletionPolicy == nil || *snap.Spec.DeletionPolicy != snapshotv1.VirtualMachineSnapshotContentRetain {
			content.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(snap, snapshotGVK)}
		}
		created, err := client.Create(ctx, content, metav1.CreateOptions{})
		switch {
		case apierrors.IsAlreadyExists(err):
			if created, err = client.Get(ctx, name, metav1.GetOptions{}); err != nil {
				return nil, err
			}
		case err != nil:
			return nil, err
		}
		content = created
	}
	if content.Status != nil && content.Status.ReadyToUse != nil && *content.Status.ReadyToUse {
		return content, nil
	}
	content.Status = &snapshotv1.VirtualMachineSnapshotContentStatus{
		CreationTime: ptr(metav1.NewTime(now)),
		ReadyToUse:   ptr(true),
	}
	for _, b := range content.Spec.VolumeBackups {
		if b.VolumeSnapshotName == nil {
			continue
		}
		content.Status.VolumeSnapshotStatus = append(content.Status.VolumeSnapshotStatus, snapshotv1.VolumeSnapshotStatus{
			VolumeSnapshotName: *b.VolumeSnapshotName,
			CreationTime:       ptr(metav1.NewTime(now)),
			ReadyToUse:         ptr(true),
		})
	}
	updated, err := client.UpdateStatus(ctx, content, metav1.UpdateOptions{})
	if err != nil {
		return nil, err
	}
	return updated, nil
}

// volumeBackups records the PVC of every PVC/DataVolume volume whose
// StorageClass can snapshot.
func (s *snapshots) volumeBackups(snap *snapshotv1.VirtualMachineSnapshot, vm *virtv1.VirtualMachine) []snapshotv1.VolumeBackup {
	if vm.Spec.Template == nil {
		return nil
	}
	var out []snapshotv1.VolumeBackup
	for _, v := range vm.Spec.Template.Spec.Volumes {
		claim := claimOf(v)
		if claim == "" {
			continue
		}
		pvc := getCached[*corev1.PersistentVolumeClaim](s.c.ext.pvcInformer, vm.Namespace, claim)
		if pvc == nil || !s.c.claimSnapshottable(vm, claim) {
			// KubeVirt skips a claim whose StorageClass has no
			// VolumeSnapshotClass (createContent, getSnapshotPVC).
			continue
		}
		out = append(out, snapshotv1.VolumeBackup{
			VolumeName: v.Name,
			PersistentVolumeClaim: snapshotv1.PersistentVolumeClaim{
				ObjectMeta: metav1.ObjectMeta{
					Name:        pvc.Name,
					Namespace:   pvc.Namespace,
					Labels:      pvc.Labels,
					Annotations: pvc.Annotations,
				},
				Spec: *pvc.Spec.DeepCopy(),
			},
			VolumeSnapshotName: ptr(fmt.Sprintf("vmsnapshot-%s-volume-%s", snap.UID, v.Name)),
		})
	}
	return out
}

// deleteSnapshot handles a deleted snapshot: unlock the VM, delete or
// release the content, drop the finalizer.
func (s *snapshots) deleteSnapshot(ctx context.Context, snap *snapshotv1.VirtualMachineSnapshot) error {
	c := s.c
	if !hasFinalizer(snap, snapshotFinalizer) {
		return nil
	}
	if err := c.setVMLock(ctx, snap.Namespace, snap.Spec.Source.Name, lockSnapshot, snap.Name, false); err != nil {
		return err
	}
	if snap.Status != nil && snap.Status.Phase != snapshotv1.Deleting {
		orig := snap.DeepCopy()
		snap.Status.Phase = snapshotv1.Deleting
		setSnapshotCondition(&snap.Status.Conditions, snapshotv1.ConditionProgressing, corev1.ConditionFalse, msgSnapshotDeleting, time.Now())
		setSnapshotCondition(&snap.Status.Conditions, snapshotv1.ConditionReady, corev1.ConditionFalse, msgSnapshotDeleting, time.Now())
		if err := s.writeSnapshotStatus(ctx, orig, snap); err != nil {
			return err
		}
	}
	name := contentNameFor(snap)
	if snap.Status != nil && snap.Status.VirtualMachineSnapshotContentName != nil {
		name = *snap.Status.VirtualMachineSnapshotContentName
	}
	client := c.kv.SnapshotV1beta1().VirtualMachineSnapshotContents(snap.Namespace)
	content, err := client.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	case snap.Spec.DeletionPolicy != nil && *snap.Spec.DeletionPolicy == snapshotv1.VirtualMachineSnapshotContentRetain:
		if ownedBy(content, snap.UID) {
			content.OwnerReferences = nil
			if _, err := client.Update(ctx, content, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
	default:
		if err := s.deleteContent(ctx, content); err != nil {
			return err
		}
	}
	patch := finalizerPatch(snap.Finalizers, withoutFinalizers(snap.Finalizers, snapshotFinalizer))
	_, err = c.kv.SnapshotV1beta1().VirtualMachineSnapshots(snap.Namespace).Patch(ctx, snap.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
	if err == nil {
		c.log.Info("snapshot deleted", zapKey(snap))
	}
	return snapshotWriteErr(err, snap.Name)
}

// deleteContent removes the content's finalizer and deletes it.
func (s *snapshots) deleteContent(ctx context.Context, content *snapshotv1.VirtualMachineSnapshotContent) error {
	client := s.c.kv.SnapshotV1beta1().VirtualMachineSnapshotContents(content.Namespace)
	if hasFinalizer(content, contentFinalizer) {
		patch := finalizerPatch(content.Finalizers, withoutFinalizers(content.Finalizers, contentFinalizer))
		if _, err := client.Patch(ctx, content.Name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return snapshotWriteErr(err, content.Name)
		}
	}
	return preconditionDelete(content.UID, func(o metav1.DeleteOptions) error {
		return client.Delete(ctx, content.Name, o)
	})
}

// syncContent releases a deleted content and deletes one whose snapshot is
// gone (key "namespace/name").
func (s *snapshots) syncContent(ctx context.Context, key string) (time.Duration, error) {
	c := s.c
	content := getCachedKey[*snapshotv1.VirtualMachineSnapshotContent](c.ext.contentInformer, key)
	if content == nil {
		return 0, nil
	}
	ns := content.Namespace
	var err error
	if content.DeletionTimestamp != nil {
		return 0, s.deleteContent(ctx, content)
	}
	ref := metav1.GetControllerOf(content)
	if ref == nil || ref.Kind != snapshotGVK.Kind {
		return 0, nil
	}
	if snap := getCached[*snapshotv1.VirtualMachineSnapshot](c.ext.snapshotInformer, ns, ref.Name); snap != nil && snap.UID == ref.UID {
		return 0, nil
	}
	snap, err := c.kv.SnapshotV1beta1().VirtualMachineSnapshots(ns).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return 0, err
	}
	if err == nil && snap.UID == ref.UID {
		return 0, nil
	}
	c.log.Info("deleting snapshot content whose snapshot is gone", zapKey(content))
	return 0, s.deleteContent(ctx, content)
}

func (s *snapshots) writeSnapshotStatus(ctx context.Context, orig, snap *snapshotv1.VirtualMachineSnapshot) error {
	return writeStatusIfChanged(ctx, orig.Status, snap.Status, snap, s.c.kv.SnapshotV1beta1().VirtualMachineSnapshots(snap.Namespace).UpdateStatus)
}

// snapshotWriteErr maps a failed test-guarded patch to a conflict (retry)
// and ignores NotFound.
func snapshotWriteErr(err error, name string) error {
	switch {
	case err == nil, apierrors.IsNotFound(err):
		return nil
	case isPatchTestFailure(err):
		return apierrors.NewConflict(snapshotv1.Resource("virtualmachinesnapshots"), name, err)
	}
	return err
}

// setSnapshotCondition sets a snapshot/restore condition the way KubeVirt
// does (the reason carries the text), keeping the timestamps of an
// unchanged one.
func setSnapshotCondition(conds *[]snapshotv1.Condition, t snapshotv1.ConditionType, status corev1.ConditionStatus, reason string, now time.Time) {
	cond := snapshotv1.Condition{Type: t, Status: status, Reason: reason,
		LastProbeTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now)}
	for i, c := range *conds {
		if c.Type == t {
			if c.Status != status || c.Reason != reason {
				if c.Status == status {
					cond.LastTransitionTime = c.LastTransitionTime
				}
				(*conds)[i] = cond
			}
			return
		}
	}
	*conds = append(*conds, cond)
}

func findSnapshotCondition(conds []snapshotv1.Condition, t snapshotv1.ConditionType) *snapshotv1.Condition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// lockKind selects the VM status field a snapshot or restore locks.
type lockKind int

const (
	lockSnapshot lockKind = iota
	lockRestore
)

// setVMLock sets (lock) or clears (only when it names owner) the VM's
// status.snapshotInProgress or status.restoreInProgress.
func (c *Controller) setVMLock(ctx context.Context, ns, vmName string, kind lockKind, owner string, lock bool) error {
	field := func(vm *virtv1.VirtualMachine) **string {
		if kind == lockRestore {
			return &vm.Status.RestoreInProgress
		}
		return &vm.Status.SnapshotInProgress
	}
	needed := func(vm *virtv1.VirtualMachine) bool {
		cur := *field(vm)
		if lock {
			return cur == nil || *cur != owner
		}
		return cur != nil && *cur == owner
	}
	if vm := getCached[*virtv1.VirtualMachine](c.vmInformer, ns, vmName); vm != nil && lock && !needed(vm) {
		return nil
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		vm, err := c.kv.KubevirtV1().VirtualMachines(ns).Get(ctx, vmName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil || !needed(vm) {
			return err
		}
		if lock {
			*field(vm) = ptr(owner)
		} else {
			*field(vm) = nil
		}
		_, err = c.kv.KubevirtV1().VirtualMachines(ns).UpdateStatus(ctx, vm, metav1.UpdateOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
}

// volumeSnapshotStatuses reports for every volume of the VM whether it can
// be snapshotted (VM status.volumeSnapshotStatuses).
func (c *Controller) volumeSnapshotStatuses(vm *virtv1.VirtualMachine) []virtv1.VolumeSnapshotStatus {
	if vm.Spec.Template == nil {
		return nil
	}
	var out []virtv1.VolumeSnapshotStatus
	for _, v := range vm.Spec.Template.Spec.Volumes {
		st := virtv1.VolumeSnapshotStatus{Name: v.Name, Enabled: true}
		claim := claimOf(v)
		switch {
		case claim == "":
			st.Enabled = false
			st.Reason = fmt.Sprintf("Snapshot is not supported for this volumeSource type [%s]", v.Name)
		case !c.claimSnapshottable(vm, claim):
			st.Enabled = false
			st.Reason = noSnapshotClassReason(c.storageClassOf(vm, claim), v.Name)
		}
		out = append(out, st)
	}
	return out
}

// storageClassOf returns the StorageClass of a VM's claim: the PVC's, else
// the one its dataVolumeTemplate asks for.
func (c *Controller) storageClassOf(vm *virtv1.VirtualMachine, claim string) string {
	if pvc := getCached[*corev1.PersistentVolumeClaim](c.ext.pvcInformer, vm.Namespace, claim); pvc != nil {
		return pvcStorageClass(pvc)
	}
	for _, t := range vm.Spec.DataVolumeTemplates {
		if t.Name != claim {
			continue
		}
		var sc *string
		if t.Spec.Storage != nil {
			sc = t.Spec.Storage.StorageClassName
		} else if t.Spec.PVC != nil {
			sc = t.Spec.PVC.StorageClassName
		}
		if sc != nil {
			return *sc
		}
	}
	return ""
}

// cloneOwnerGone reports whether obj is controlled by a VirtualMachineClone
// that no longer exists (temporary snapshots and restores of clones).
func (c *Controller) cloneOwnerGone(ctx context.Context, obj metav1.Object) (bool, error) {
	ref := metav1.GetControllerOf(obj)
	if ref == nil || ref.Kind != clonev1.VirtualMachineCloneKind.Kind {
		return false, nil
	}
	if cl := getCached[*clonev1.VirtualMachineClone](c.ext.cloneInformer, obj.GetNamespace(), ref.Name); cl != nil && cl.UID == ref.UID {
		return false, nil
	}
	cl, err := c.kv.CloneV1beta1().VirtualMachineClones(obj.GetNamespace()).Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return cl.UID != ref.UID, nil
}

// dataVolumeSourcePVC is a clone source for a DataVolume template.
func dataVolumeSourcePVC(ns, name string) *cdiv1.DataVolumeSource {
	return &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: ns, Name: name}}
}

// snapshotCapabilities caches which StorageClasses have a
// VolumeSnapshotClass for their provisioner (Options.Dynamic), for a
// short while: the VM status asks on every sync.
type snapshotCapabilities struct {
	mu      sync.Mutex
	read    time.Time
	capable map[string]bool // StorageClass name → has a VolumeSnapshotClass
}

// snapshotCapsTTL is how long a reading of the classes is used.
const snapshotCapsTTL = 2 * time.Second

// claimSnapshottable tells whether KubeVirt would snapshot a VM's claim:
// whether a VolumeSnapshotClass's driver is its StorageClass's
// provisioner (pkg/storage/snapshot getVolumeSnapshotClassName). A claim
// whose class is not known yet counts as capable.
func (c *Controller) claimSnapshottable(vm *virtv1.VirtualMachine, claim string) bool {
	if c.opts.SnapshotUnsupported {
		return false
	}
	if c.opts.Dynamic == nil {
		return true
	}
	class := c.storageClassOf(vm, claim)
	if class == "" {
		return true
	}
	return c.snapCaps.capableClass(c, class)
}

func (s *snapshotCapabilities) capableClass(c *Controller, class string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.capable == nil || time.Since(s.read) > snapshotCapsTTL {
		capable, err := c.readSnapshotCapabilities(context.Background())
		if err != nil {
			c.log.Warn("reading VolumeSnapshotClasses", zap.Error(err))
			if s.capable == nil {
				return true
			}
		} else {
			s.capable, s.read = capable, time.Now()
		}
	}
	return s.capable[class]
}

// readSnapshotCapabilities lists StorageClasses and VolumeSnapshotClasses.
func (c *Controller) readSnapshotCapabilities(ctx context.Context) (map[string]bool, error) {
	vscs, err := c.opts.Dynamic.Resource(volumeSnapshotClassGVR).List(ctx, metav1.ListOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	drivers := map[string]bool{}
	if vscs != nil {
		for _, v := range vscs.Items {
			if d, _, _ := unstructured.NestedString(v.Object, "driver"); d != "" {
				drivers[d] = true
			}
		}
	}
	scs, err := c.k8s.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, sc := range scs.Items {
		out[sc.Name] = drivers[sc.Provisioner]
	}
	return out, nil
}
