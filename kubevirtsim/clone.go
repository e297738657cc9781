package kubevirtsim

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clonev1 "kubevirt.io/api/clone/v1beta1"
	virtv1 "kubevirt.io/api/core/v1"
	snapshotv1 "kubevirt.io/api/snapshot/v1beta1"
)

// Condition reasons of the clone controller.
const (
	reasonCloneSourceMissing = "SourceDoesNotExist"
	reasonCloneTargetExists  = "TargetVMExists"
	reasonCloneFailed        = "Failed"
	reasonCloneSucceeded     = "Succeeded"
	reasonCloneInProgress    = "InProgress"
)

// clones plays KubeVirt's VirtualMachineClone controller, which clones
// through a temporary snapshot and restore:
//
//   - the source (a VM, or a VirtualMachineSnapshot) must exist, otherwise
//     the clone waits with a SourceDoesNotExist condition; a target VM that
//     already exists fails it; the target name defaults to
//     "clone-<source>-<xxxxx>" (status.targetName);
//   - SnapshotInProgress: snapshot "tmp-snapshot-<clone uid>" of the
//     source VM (skipped for a snapshot source); a failed snapshot (e.g.
//     Options.SnapshotUnsupported) fails the clone;
//   - CreatingTargetVM: restore "tmp-restore-<clone uid>" to the target
//     with patches that filter labels and annotations (labelFilters,
//     annotationFilters and template.*, "*"/"!key" globs, default: copy
//     all), set new MAC addresses (newMacAddresses, else a generated
//     BC:24:11:xx:xx:xx for every interface that had one), a new SMBIOS
//     serial, drop the firmware UUID (the new VM gets its own), followed by
//     spec.patches; the restore renames the volumes per volumeNamePolicy as
//     dataVolumeTemplates cloning the source's PVCs (source.pvc);
//   - RestoreInProgress once the target VM exists, Succeeded when the
//     restore is complete; the temporary snapshot and restore are deleted.
type clones struct{ c *Controller }

func (cl *clones) addHandlers() {
	c := cl.c
	e := &c.ext
	mustAddHandler(e.cloneInformer, handlerD(func(m metav1.Object, deleted bool) {
		c.enqueue(keyClone, m.GetNamespace(), m.GetName())
		if cl, ok := m.(*clonev1.VirtualMachineClone); ok && deleted {
			// Its temporary snapshot and restore go with it.
			c.enqueue(keySnapshot, cl.Namespace, tmpSnapshotName(cl))
			c.enqueue(keyRestore, cl.Namespace, tmpRestoreName(cl))
		}
	}))
	mustAddHandler(c.vmInformer, handler(func(m metav1.Object) {
		c.enqueueIndexed(e.cloneInformer, indexSource, m.GetNamespace()+"/"+m.GetName(), keyClone)
		c.enqueueIndexed(e.cloneInformer, indexTarget, m.GetNamespace()+"/"+m.GetName(), keyClone)
	}))
}

func cloneTargetIndex(obj any) ([]string, error) {
	cl, ok := obj.(*clonev1.VirtualMachineClone)
	if !ok || cl.Status.TargetName == nil {
		return nil, nil
	}
	return []string{cl.Namespace + "/" + *cl.Status.TargetName}, nil
}

func cloneSourceIndex(obj any) ([]string, error) {
	cl, ok := obj.(*clonev1.VirtualMachineClone)
	if !ok || cl.Spec.Source == nil {
		return nil, nil
	}
	key := cl.Namespace + "/" + cl.Spec.Source.Name
	if cl.Spec.Source.Kind == snapshotGVK.Kind {
		key = "snapshot:" + key
	}
	return []string{key}, nil
}

func tmpSnapshotName(cl *clonev1.VirtualMachineClone) string { return "tmp-snapshot-" + string(cl.UID) }
func tmpRestoreName(cl *clonev1.VirtualMachineClone) string  { return "tmp-restore-" + string(cl.UID) }

// sync reconciles one VirtualMachineClone (key "namespace/name").
func (cl *clones) sync(ctx context.Context, key string) (time.Duration, error) {
	c := cl.c
	clone := getCachedKey[*clonev1.VirtualMachineClone](c.ext.cloneInformer, key)
	if clone == nil || clone.DeletionTimestamp != nil {
		return 0, nil
	}
	ns := clone.Namespace
	now := time.Now()
	orig := clone.DeepCopy()
	st := &clone.Status
	switch st.Phase {
	case clonev1.Succeeded, clonev1.Failed:
		return 0, cl.cleanup(ctx, orig, clone)
	}
	progressing := func(phase clonev1.VirtualMachineClonePhase) {
		st.Phase = phase
		setCloneCondition(st, clonev1.ConditionProgressing, corev1.ConditionTrue, reasonCloneInProgress, "Still processing", now)
		setCloneCondition(st, clonev1.ConditionReady, corev1.ConditionFalse, reasonCloneInProgress, "Still processing", now)
	}
	fail := func(reason, msg string) (time.Duration, error) {
		st.Phase = clonev1.Failed
		setCloneCondition(st, clonev1.ConditionProgressing, corev1.ConditionFalse, reason, msg, now)
		setCloneCondition(st, clonev1.ConditionReady, corev1.ConditionFalse, reason, msg, now)
		c.log.Info("clone failed", zapKey(clone), zap.String("reason", msg))
		return time.Millisecond, cl.writeStatus(ctx, orig, clone)
	}

	src := clone.Spec.Source
	if src == nil || (src.Kind != virtv1.VirtualMachineGroupVersionKind.Kind && src.Kind != snapshotGVK.Kind) {
		return fail(reasonCloneFailed, "clone source must be a VirtualMachine or a VirtualMachineSnapshot")
	}
	if t := clone.Spec.Target; t != nil && t.Kind != "" && t.Kind != virtv1.VirtualMachineGroupVersionKind.Kind {
		return fail(reasonCloneFailed, "clone target must be a VirtualMachine")
	}
	if st.TargetName == nil {
		target := ""
		if t := clone.Spec.Target; t != nil {
			target = t.Name
		}
		if target == "" {
			h := hashBytes(string(clone.UID))
			target = fmt.Sprintf("clone-%s-%s", src.Name, hex.EncodeToString(h[:3])[:5])
		}
		st.TargetName = ptr(target)
		st.CreationTime = ptr(metav1.NewTime(now))
	}
	target := *st.TargetName

	switch st.Phase {
	case clonev1.PhaseUnset:
		var sourceOK bool
		if src.Kind == snapshotGVK.Kind {
			sourceOK = getCached[*snapshotv1.VirtualMachineSnapshot](c.ext.snapshotInformer, ns, src.Name) != nil
		} else {
			vm := getCached[*virtv1.VirtualMachine](c.vmInformer, ns, src.Name)
			sourceOK = vm != nil && vm.DeletionTimestamp == nil
		}
		if !sourceOK {
			msg := fmt.Sprintf("Source %s %s/%s doesn't exist", src.Kind, ns, src.Name)
			setCloneCondition(st, clonev1.ConditionProgressing, corev1.ConditionFalse, reasonCloneSourceMissing, msg, now)
			setCloneCondition(st, clonev1.ConditionReady, corev1.ConditionFalse, reasonCloneSourceMissing, msg, now)
			return 0, cl.writeStatus(ctx, orig, clone)
		}
		if exists, err := cl.targetExists(ctx, ns, target); err != nil || exists {
			if err != nil {
				return 0, err
			}
			return fail(reasonCloneTargetExists, fmt.Sprintf("target VM %s/%s already exists", ns, target))
		}
		if src.Kind == snapshotGVK.Kind {
			progressing(clonev1.CreatingTargetVM)
			return cl.snapshotReady(ctx, orig, clone, src.Name, now, fail)
		}
		snap := &snapshotv1.VirtualMachineSnapshot{
			ObjectMeta: metav1.ObjectMeta{
				Name:            tmpSnapshotName(clone),
				Namespace:       ns,
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(clone, clonev1.VirtualMachineCloneKind)},
			},
			Spec: snapshotv1.VirtualMachineSnapshotSpec{
				Source: corev1.TypedLocalObjectReference{APIGroup: ptr(virtv1.GroupVersion.Group), Kind: src.Kind, Name: src.Name},
			},
		}
		if _, err := c.kv.SnapshotV1beta1().VirtualMachineSnapshots(ns).Create(ctx, snap, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return 0, err
		}
		c.log.Info("clone snapshots its source", zapKey(clone), zap.String("snapshot", snap.Name))
		st.SnapshotName = ptr(snap.Name)
		progressing(clonev1.SnapshotInProgress)
		return 0, cl.writeStatus(ctx, orig, clone)

	case clonev1.SnapshotInProgress:
		return cl.snapshotReady(ctx, orig, clone, *st.SnapshotName, now, fail)

	case clonev1.CreatingTargetVM:
		if rs := cl.restore(clone); rs != nil && restoreFailed(rs) {
			return fail(reasonCloneFailed, restoreFailure(rs))
		}
		if getCached[*virtv1.VirtualMachine](c.vmInformer, ns, target) == nil {
			if st.RestoreName == nil {
				snapName := src.Name
				if st.SnapshotName != nil {
					snapName = *st.SnapshotName
				}
				return cl.snapshotReady(ctx, orig, clone, snapName, now, fail)
			}
			return 0, nil // the VM event brings us back
		}
		progressing(clonev1.RestoreInProgress)
		return time.Millisecond, cl.writeStatus(ctx, orig, clone)

	case clonev1.RestoreInProgress:
		rs := cl.restore(clone)
		switch {
		case rs == nil:
			return 0, nil
		case restoreFailed(rs):
			return fail(reasonCloneFailed, restoreFailure(rs))
		case !restoreComplete(rs):
			return 0, nil
		}
		st.Phase = clonev1.Succeeded
		setCloneCondition(st, clonev1.ConditionProgressing, corev1.ConditionFalse, reasonCloneSucceeded, "", now)
		setCloneCondition(st, clonev1.ConditionReady, corev1.ConditionTrue, reasonCloneSucceeded, "", now)
		c.log.Info("clone succeeded", zapKey(clone), zap.String("target", target))
		return time.Millisecond, cl.writeStatus(ctx, orig, clone)
	}
	return 0, nil
}

// snapshotReady waits for the clone's snapshot and then creates the
// restore (phase CreatingTargetVM).
func (cl *clones) snapshotReady(ctx context.Context, orig, clone *clonev1.VirtualMachineClone, snapName string, now time.Time,
	fail func(reason, msg string) (time.Duration, error)) (time.Duration, error) {
	c := cl.c
	snap := getCached[*snapshotv1.VirtualMachineSnapshot](c.ext.snapshotInformer, clone.Namespace, snapName)
	if snap == nil {
		return 0, cl.writeStatus(ctx, orig, clone)
	}
	if snap.Status != nil && snap.Status.Phase == snapshotv1.Failed {
		msg := fmt.Sprintf("snapshot %s failed", snap.Name)
		if snap.Status.Error != nil && snap.Status.Error.Message != nil {
			msg += ": " + *snap.Status.Error.Message
		}
		return fail(reasonCloneFailed, msg)
	}
	if snap.Status == nil || snap.Status.ReadyToUse == nil || !*snap.Status.ReadyToUse || snap.Status.VirtualMachineSnapshotContentName == nil {
		return 0, cl.writeStatus(ctx, orig, clone)
	}
	content := getCached[*snapshotv1.VirtualMachineSnapshotContent](c.ext.contentInformer, clone.Namespace, *snap.Status.VirtualMachineSnapshotContentName)
	if content == nil {
		var err error
		content, err = c.kv.SnapshotV1beta1().VirtualMachineSnapshotContents(clone.Namespace).Get(ctx, *snap.Status.VirtualMachineSnapshotContentName, metav1.GetOptions{})
		if err != nil {
			return 0, err
		}
	}
	if content.Spec.Source.VirtualMachine == nil {
		return fail(reasonCloneFailed, "unexpected snapshot source")
	}
	patches, err := clonePatches(clone, content.Spec.Source.VirtualMachine)
	if err != nil {
		return fail(reasonCloneFailed, err.Error())
	}
	rs := &snapshotv1.VirtualMachineRestore{
		ObjectMeta: metav1.ObjectMeta{
			Name:            tmpRestoreName(clone),
			Namespace:       clone.Namespace,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(clone, clonev1.VirtualMachineCloneKind)},
		},
		Spec: snapshotv1.VirtualMachineRestoreSpec{
			Target:                     corev1.TypedLocalObjectReference{APIGroup: ptr(virtv1.GroupVersion.Group), Kind: virtv1.VirtualMachineGroupVersionKind.Kind, Name: *clone.Status.TargetName},
			VirtualMachineSnapshotName: snap.Name,
			Patches:                    patches,
		},
	}
	if p := clone.Spec.VolumeNamePolicy; p != nil {
		rs.Spec.VolumeRestorePolicy = ptr(p.ToVolumeRestorePolicy())
	}
	if _, err := c.kv.SnapshotV1beta1().VirtualMachineRestores(clone.Namespace).Create(ctx, rs, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return 0, err
	}
	c.log.Info("clone restores to its target", zapKey(clone), zap.String("restore", rs.Name), zap.String("target", *clone.Status.TargetName))
	clone.Status.RestoreName = ptr(rs.Name)
	clone.Status.Phase = clonev1.CreatingTargetVM
	setCloneCondition(&clone.Status, clonev1.ConditionProgressing, corev1.ConditionTrue, reasonCloneInProgress, "Still processing", now)
	setCloneCondition(&clone.Status, clonev1.ConditionReady, corev1.ConditionFalse, reasonCloneInProgress, "Still processing", now)
	return 0, cl.writeStatus(ctx, orig, clone)
}

func (cl *clones) restore(clone *clonev1.VirtualMachineClone) *snapshotv1.VirtualMachineRestore {
	if clone.Status.RestoreName == nil {
		return nil
	}
	return getCached[*snapshotv1.VirtualMachineRestore](cl.c.ext.restoreInformer, clone.Namespace, *clone.Status.RestoreName)
}

func restoreFailure(rs *snapshotv1.VirtualMachineRestore) string {
	if f := findSnapshotCondition(rs.Status.Conditions, snapshotv1.ConditionFailure); f != nil {
		return fmt.Sprintf("restore %s failed: %s", rs.Name, f.Reason)
	}
	return fmt.Sprintf("restore %s failed", rs.Name)
}

// targetExists checks the cache and then the API server.
func (cl *clones) targetExists(ctx context.Context, ns, name string) (bool, error) {
	if getCached[*virtv1.VirtualMachine](cl.c.vmInformer, ns, name) != nil {
		return true, nil
	}
	_, err := cl.c.kv.KubevirtV1().VirtualMachines(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// cleanup deletes the temporary snapshot and restore of a finished clone.
func (cl *clones) cleanup(ctx context.Context, orig, clone *clonev1.VirtualMachineClone) error {
	c := cl.c
	ns := clone.Namespace
	if n := clone.Status.RestoreName; n != nil {
		err := c.kv.SnapshotV1beta1().VirtualMachineRestores(ns).Delete(ctx, *n, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		clone.Status.RestoreName = nil
	}
	if n := clone.Status.SnapshotName; n != nil {
		err := c.kv.SnapshotV1beta1().VirtualMachineSnapshots(ns).Delete(ctx, *n, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		clone.Status.SnapshotName = nil
	}
	return cl.writeStatus(ctx, orig, clone)
}

func (cl *clones) writeStatus(ctx context.Context, orig, clone *clonev1.VirtualMachineClone) error {
	return writeStatusIfChanged(ctx, orig.Status, clone.Status, clone, cl.c.kv.CloneV1beta1().VirtualMachineClones(clone.Namespace).UpdateStatus)
}

func setCloneCondition(st *clonev1.VirtualMachineCloneStatus, t clonev1.ConditionType, status corev1.ConditionStatus, reason, message string, now time.Time) {
	cond := clonev1.Condition{Type: t, Status: status, Reason: reason, Message: message,
		LastProbeTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now)}
	for i, c := range st.Conditions {
		if c.Type == t {
			if c.Status != status || c.Reason != reason || c.Message != message {
				if c.Status == status {
					cond.LastTransitionTime = c.LastTransitionTime
				}
				st.Conditions[i] = cond
			}
			return
		}
	}
	st.Conditions = append(st.Conditions, cond)
}

// clonePatches builds the JSON patches the clone passes to its restore:
// label/annotation filters, MAC addresses, SMBIOS serial, firmware UUID,
// then the user's patches.
func clonePatches(clone *clonev1.VirtualMachineClone, src *snapshotv1.VirtualMachine) ([]string, error) {
	var ops []patchOp
	ops = append(ops, filterPatches("/metadata/labels", src.Labels, clone.Spec.LabelFilters)...)
	ops = append(ops, filterPatches("/metadata/annotations", src.Annotations, clone.Spec.AnnotationFilters)...)
	if t := src.Spec.Template; t != nil {
		ops = append(ops, filterPatches("/spec/template/metadata/labels", t.ObjectMeta.Labels, clone.Spec.Template.LabelFilters)...)
		ops = append(ops, filterPatches("/spec/template/metadata/annotations", t.ObjectMeta.Annotations, clone.Spec.Template.AnnotationFilters)...)
		for i, iface := range t.Spec.Domain.Devices.Interfaces {
			mac, ok := clone.Spec.NewMacAddresses[iface.Name]
			if !ok {
				if iface.MacAddress == "" {
					continue
				}
				mac = generateMAC(clone.UID, iface.Name)
			}
			ops = append(ops, patchOp{Op: "add", Path: fmt.Sprintf("/spec/template/spec/domain/devices/interfaces/%d/macAddress", i), Value: mac})
		}
		fw := t.Spec.Domain.Firmware
		serial := ""
		switch {
		case clone.Spec.NewSMBiosSerial != nil:
			serial = *clone.Spec.NewSMBiosSerial
		case fw != nil && fw.Serial != "":
			serial = uuid.NewSHA1(uuid.NameSpaceOID, []byte("smbios/"+string(clone.UID))).String()
		}
		switch {
		case fw == nil && serial != "":
			ops = append(ops, patchOp{Op: "add", Path: "/spec/template/spec/domain/firmware", Value: virtv1.Firmware{Serial: serial}})
		case fw != nil:
			if serial != "" {
				ops = append(ops, patchOp{Op: "add", Path: "/spec/template/spec/domain/firmware/serial", Value: serial})
			}
			if fw.UUID != "" {
				ops = append(ops, patchOp{Op: "remove", Path: "/spec/template/spec/domain/firmware/uuid"})
			}
		}
	}
	out := make([]string, 0, len(ops)+len(clone.Spec.Patches))
	for _, op := range ops {
		b, err := json.Marshal(op)
		if err != nil {
			return nil, err
		}
		out = append(out, string(b))
	}
	return append(out, clone.Spec.Patches...), nil
}

// generateMAC derives a stable locally administered Proxmox-style MAC
// (BC:24:11 prefix) for an interface of a clone.
func generateMAC(cloneUID any, iface string) string {
	h := hashBytes(fmt.Sprint(cloneUID), "mac", iface)
	return fmt.Sprintf("BC:24:11:%02X:%02X:%02X", h[0], h[1], h[2])
}

// filterPatches removes the keys of m the filters do not keep.
func filterPatches(path string, m map[string]string, filters []string) []patchOp {
	keys := make([]string, 0, len(m))
	for k := range m {
		if !keepKey(k, filters) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var ops []patchOp
	for _, k := range keys {
		ops = append(ops, patchOp{Op: "remove", Path: path + "/" + escapePointer(k)})
	}
	return ops
}

// keepKey applies KubeVirt's clone filters: no filters keep everything;
// otherwise a key is kept when it matches a positive filter (or there are
// only negative ones) and no negative ("!"-prefixed) filter. "*" matches
// any sequence of characters.
func keepKey(key string, filters []string) bool {
	if len(filters) == 0 {
		return true
	}
	positive, include := false, false
	for _, f := range filters {
		if neg, ok := strings.CutPrefix(f, "!"); ok {
			if globMatch(neg, key) {
				return false
			}
			continue
		}
		positive = true
		if globMatch(f, key) {
			include = true
		}
	}
	return include || !positive
}

func globMatch(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	re, err := regexp.Compile("^" + strings.Join(parts, ".*") + "$")
	return err == nil && re.MatchString(s)
}

// escapePointer escapes a map key for a JSON pointer.
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
