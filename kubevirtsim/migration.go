package kubevirtsim

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"
)

// Failure reasons of the migration controller. KubeVirt reports most of
// them as events on the migration; the simulator records them in
// status.migrationState.failureReason, where callers can read them.
const (
	msgMigrationNoVMI         = "Migration failed because vmi does not exist."
	msgMigrationVMIShutdown   = "Migration failed vmi shutdown during migration."
	msgMigrationInProgress    = "VMI is not eligible for migration because another migration job is in progress."
	msgMigrationNotRunning    = "Migration failed because the vmi is not running."
	msgMigrationAborted       = "Migration aborted: the migration object was deleted."
	fmtMigrationNotMigrable   = "Cannot migrate VMI, Reason: %s, Message: %s"
	fmtMigrationUnschedulable = "Migration target pod for VMI [%s/%s] is unschedulable: %s"
)

// migrations plays KubeVirt's migration controller and the two
// virt-handlers of a live migration, for local (not decentralized)
// VirtualMachineInstanceMigrations:
//
//   - a new migration gets the kubevirt.io/vmi-name label and KubeVirt's
//     finalizer, then Pending → Scheduling;
//   - Scheduling places the target like the scheduler places the target
//     virt-launcher pod: the VMI's nodeSelector and node affinity, plus
//     spec.addedNodeSelector (the VMI's values win on a key both set), never
//     the source node (KubeVirt's pod anti-affinity), Ready and schedulable
//     nodes only. No node fits: the migration fails at once with the
//     scheduler's explanation (KubeVirt waits for its unschedulable timeout,
//     five minutes, first);
//   - Scheduled → PreparingTarget → TargetReady → Running: the VMI's
//     status.migrationState names the migration, source and target, and
//     gets its start time (the VM is Migrating meanwhile);
//   - after Options.MigrationDelay in Running the guest runs on the target:
//     the VMI's status.nodeName, kubevirt.io/nodeName label and active pod
//     move there, its migrationState is Completed, and the migration
//     Succeeded with a copy of that state;
//   - a VMI that is missing, not running, not live-migratable (its
//     LiveMigratable condition), already migrating, or that stops during the
//     migration fails it; the reason is in status.migrationState;
//   - a deleted migration that has not ended is aborted; the finalizer is
//     removed once the migration ended or was deleted.
type migrations struct{ c *Controller }

// indexVMIName: migrations by "namespace/vmiName".
const indexVMIName = "vmiName"

func migrationVMIIndex(obj any) ([]string, error) {
	m, ok := obj.(*virtv1.VirtualMachineInstanceMigration)
	if !ok || m.Spec.VMIName == "" {
		return nil, nil
	}
	return []string{m.Namespace + "/" + m.Spec.VMIName}, nil
}

func (m *migrations) addHandlers() {
	c := m.c
	e := &c.ext
	mustAddHandler(e.migrationInformer, handlerD(func(o metav1.Object, deleted bool) {
		c.enqueue(keyMigration, o.GetNamespace(), o.GetName())
		if deleted {
			e.seen.forget(o.GetUID())
		}
	}))
	mustAddHandler(c.vmiInformer, handler(func(o metav1.Object) {
		c.enqueueIndexed(e.migrationInformer, indexVMIName, o.GetNamespace()+"/"+o.GetName(), keyMigration)
	}))
}

// sync reconciles one migration (key "namespace/name").
func (m *migrations) sync(ctx context.Context, key string) (time.Duration, error) {
	c := m.c
	mig := getCachedKey[*virtv1.VirtualMachineInstanceMigration](c.ext.migrationInformer, key)
	if mig == nil {
		return 0, nil
	}
	vmi := getCached[*virtv1.VirtualMachineInstance](c.vmiInformer, mig.Namespace, mig.Spec.VMIName)
	if mig.DeletionTimestamp != nil || mig.IsFinal() {
		if mig.DeletionTimestamp != nil && !mig.IsFinal() {
			// Aborted before it ended: the guest stays where it is.
			if err := m.failOnVMI(ctx, vmi, mig, msgMigrationAborted); err != nil {
				return 0, err
			}
		}
		return 0, m.release(ctx, mig)
	}
	if !hasFinalizer(mig, virtv1.VirtualMachineInstanceMigrationFinalizer) || mig.Labels[virtv1.MigrationSelectorLabel] != mig.Spec.VMIName {
		if mig.Labels == nil {
			mig.Labels = map[string]string{}
		}
		mig.Labels[virtv1.MigrationSelectorLabel] = mig.Spec.VMIName
		if !hasFinalizer(mig, virtv1.VirtualMachineInstanceMigrationFinalizer) {
			mig.Finalizers = append(mig.Finalizers, virtv1.VirtualMachineInstanceMigrationFinalizer)
		}
		_, err := c.kv.KubevirtV1().VirtualMachineInstanceMigrations(mig.Namespace).Update(ctx, mig, metav1.UpdateOptions{})
		if apierrors.IsNotFound(err) {
			return 0, nil
		}
		return 0, err // the update's watch event brings it back
	}

	now := time.Now()
	orig := mig.DeepCopy()
	st := &mig.Status
	fail := func(reason string) (time.Duration, error) {
		if err := m.failOnVMI(ctx, vmi, mig, reason); err != nil {
			return 0, err
		}
		state := &virtv1.VirtualMachineInstanceMigrationState{MigrationUID: mig.UID}
		if vmi != nil {
			if own := ownState(vmi, mig); own != nil {
				state = own.DeepCopy()
			} else {
				state.SourceNode = vmi.Status.NodeName
			}
		}
		state.Failed = true
		state.FailureReason = reason
		if state.EndTimestamp == nil {
			state.EndTimestamp = ptr(metav1.NewTime(now))
		}
		st.MigrationState = state
		setMigrationPhase(mig, virtv1.MigrationFailed, now)
		c.log.Info("migration failed", zapKey(mig), zap.String("reason", reason))
		return 0, m.writeStatus(ctx, orig, mig)
	}
	switch {
	case vmi == nil:
		return fail(msgMigrationNoVMI)
	case st.Phase != virtv1.MigrationPhaseUnset && (vmi.IsFinal() || vmi.DeletionTimestamp != nil):
		return fail(msgMigrationVMIShutdown)
	}

	switch st.Phase {
	case virtv1.MigrationPhaseUnset:
		// What KubeVirt's admission and the controller refuse up front.
		if other := vmi.Status.MigrationState; other != nil && other.MigrationUID != mig.UID && !other.Completed && !other.Failed {
			return fail(msgMigrationInProgress)
		}
		if !vmi.IsRunning() || vmi.DeletionTimestamp != nil {
			return fail(msgMigrationNotRunning)
		}
		if cond := findVMICondition(vmi, virtv1.VirtualMachineInstanceIsMigratable); cond != nil && cond.Status == corev1.ConditionFalse {
			return fail(fmt.Sprintf(fmtMigrationNotMigrable, cond.Reason, cond.Message))
		}
		setMigrationPhase(mig, virtv1.MigrationPending, now)
	case virtv1.MigrationPending:
		// The target virt-launcher pod is created.
		setMigrationPhase(mig, virtv1.MigrationScheduling, now)
	case virtv1.MigrationScheduling:
		target := ""
		if own := ownState(vmi, mig); own != nil {
			target = own.TargetNode // chosen by an earlier pass
		}
		if target == "" {
			node, why := c.chooseNode(migrationTargetSpec(vmi, mig), false)
			if node == "" {
				return fail(fmt.Sprintf(fmtMigrationUnschedulable, vmi.Namespace, vmi.Name, why))
			}
			target = node
		}
		err := m.updateVMI(ctx, vmi, func(v *virtv1.VirtualMachineInstance) {
			v.Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{
				MigrationUID: mig.UID,
				SourceNode:   v.Status.NodeName,
				SourcePod:    "virt-launcher-" + v.Name,
				TargetNode:   target,
				TargetPod:    targetPodName(v, mig),
				Mode:         virtv1.MigrationPreCopy,
			}
		})
		if err != nil {
			return 0, err
		}
		setMigrationPhase(mig, virtv1.MigrationScheduled, now)
	case virtv1.MigrationScheduled:
		setMigrationPhase(mig, virtv1.MigrationPreparingTarget, now)
	case virtv1.MigrationPreparingTarget:
		err := m.updateVMI(ctx, vmi, func(v *virtv1.VirtualMachineInstance) {
			if s := ownState(v, mig); s != nil {
				s.TargetNodeAddress = "127.0.0.1"
			}
		})
		if err != nil {
			return 0, err
		}
		setMigrationPhase(mig, virtv1.MigrationTargetReady, now)
	case virtv1.MigrationTargetReady:
		err := m.updateVMI(ctx, vmi, func(v *virtv1.VirtualMachineInstance) {
			if s := ownState(v, mig); s != nil && s.StartTimestamp == nil {
				s.StartTimestamp = ptr(metav1.NewTime(now))
			}
		})
		if err != nil {
			return 0, err
		}
		c.ext.seen.forget(mig.UID)
		setMigrationPhase(mig, virtv1.MigrationRunning, now)
	case virtv1.MigrationRunning:
		if wait := c.ext.seen.since(mig.UID, now).Add(c.opts.MigrationDelay).Sub(now); wait > 0 {
			return wait, nil
		}
		own := ownState(vmi, mig)
		if own == nil {
			return fail("VMI's migration state was cleared during the active migration.")
		}
		target := own.TargetNode
		err := m.updateVMI(ctx, vmi, func(v *virtv1.VirtualMachineInstance) {
			s := ownState(v, mig)
			if s == nil || s.Completed {
				return
			}
			end := metav1.NewTime(now)
			s.TargetNodeDomainDetected = true
			s.TargetNodeDomainReadyTimestamp = &end
			s.EndTimestamp = &end
			s.Completed = true
			v.Status.NodeName = target
			if v.Labels == nil {
				v.Labels = map[string]string{}
			}
			v.Labels[virtv1.NodeNameLabel] = target
			v.Status.ActivePods = map[types.UID]string{targetPodUID(mig): target}
		})
		if err != nil {
			return 0, err
		}
		c.mu.Lock()
		c.assumed[vmi.UID] = target
		c.mu.Unlock()
		fresh := getCached[*virtv1.VirtualMachineInstance](c.vmiInformer, vmi.Namespace, vmi.Name)
		if fresh == nil || ownState(fresh, mig) == nil || !ownState(fresh, mig).Completed {
			return time.Millisecond, nil // the cache catches up with the write first
		}
		st.MigrationState = ownState(fresh, mig).DeepCopy()
		setMigrationPhase(mig, virtv1.MigrationSucceeded, now)
		c.log.Info("migration succeeded", zapKey(mig), zap.String("target", target))
	}
	if err := m.writeStatus(ctx, orig, mig); err != nil {
		return 0, err
	}
	return time.Millisecond, nil
}

// ownState is the VMI's migration state when it belongs to mig.
func ownState(vmi *virtv1.VirtualMachineInstance, mig *virtv1.VirtualMachineInstanceMigration) *virtv1.VirtualMachineInstanceMigrationState {
	if vmi == nil || vmi.Status.MigrationState == nil || vmi.Status.MigrationState.MigrationUID != mig.UID {
		return nil
	}
	return vmi.Status.MigrationState
}

// failOnVMI records a failure in the VMI's migration state when mig had
// already handed off to it: the source keeps running the guest.
func (m *migrations) failOnVMI(ctx context.Context, vmi *virtv1.VirtualMachineInstance, mig *virtv1.VirtualMachineInstanceMigration, reason string) error {
	if s := ownState(vmi, mig); s == nil || s.Completed || s.Failed {
		return nil
	}
	return m.updateVMI(ctx, vmi, func(v *virtv1.VirtualMachineInstance) {
		if s := ownState(v, mig); s != nil && !s.Completed {
			s.Failed = true
			s.FailureReason = reason
			s.EndTimestamp = ptr(metav1.Now())
		}
	})
}

// updateVMI applies change to the cached VMI and writes it when it changed
// (a stale cache gives a conflict, and the key is retried).
func (m *migrations) updateVMI(ctx context.Context, vmi *virtv1.VirtualMachineInstance, change func(*virtv1.VirtualMachineInstance)) error {
	upd := vmi.DeepCopy()
	change(upd)
	if equality.Semantic.DeepEqual(vmi, upd) {
		return nil
	}
	_, err := m.c.kv.KubevirtV1().VirtualMachineInstances(upd.Namespace).Update(ctx, upd, metav1.UpdateOptions{})
	return err
}

func (m *migrations) writeStatus(ctx context.Context, orig, mig *virtv1.VirtualMachineInstanceMigration) error {
	if equality.Semantic.DeepEqual(orig.Status, mig.Status) {
		return nil
	}
	_, err := m.c.kv.KubevirtV1().VirtualMachineInstanceMigrations(mig.Namespace).UpdateStatus(ctx, mig, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// release removes KubeVirt's finalizer from an ended or deleted migration.
func (m *migrations) release(ctx context.Context, mig *virtv1.VirtualMachineInstanceMigration) error {
	if !hasFinalizer(mig, virtv1.VirtualMachineInstanceMigrationFinalizer) {
		return nil
	}
	mig.Finalizers = withoutFinalizers(mig.Finalizers, virtv1.VirtualMachineInstanceMigrationFinalizer)
	_, err := m.c.kv.KubevirtV1().VirtualMachineInstanceMigrations(mig.Namespace).Update(ctx, mig, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func setMigrationPhase(mig *virtv1.VirtualMachineInstanceMigration, phase virtv1.VirtualMachineInstanceMigrationPhase, now time.Time) {
	if mig.Status.Phase == phase {
		return
	}
	mig.Status.Phase = phase
	mig.Status.PhaseTransitionTimestamps = append(mig.Status.PhaseTransitionTimestamps,
		virtv1.VirtualMachineInstanceMigrationPhaseTransitionTimestamp{Phase: phase, PhaseTransitionTimestamp: metav1.NewTime(now)})
}

// migrationTargetSpec is the VMI as the scheduler sees the migration's
// target pod: the added node selector under the VMI's own (whose values
// win), and never the source node.
func migrationTargetSpec(vmi *virtv1.VirtualMachineInstance, mig *virtv1.VirtualMachineInstanceMigration) *virtv1.VirtualMachineInstance {
	t := vmi.DeepCopy()
	if len(mig.Spec.AddedNodeSelector) > 0 {
		sel := map[string]string{}
		for k, v := range mig.Spec.AddedNodeSelector {
			sel[k] = v
		}
		for k, v := range vmi.Spec.NodeSelector {
			sel[k] = v
		}
		t.Spec.NodeSelector = sel
	}
	if vmi.Status.NodeName == "" {
		return t
	}
	notSource := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{vmi.Status.NodeName}}
	if t.Spec.Affinity == nil {
		t.Spec.Affinity = &corev1.Affinity{}
	}
	if t.Spec.Affinity.NodeAffinity == nil {
		t.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	req := t.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if req == nil || len(req.NodeSelectorTerms) == 0 {
		t.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{notSource}}},
		}
		return t
	}
	for i := range req.NodeSelectorTerms {
		req.NodeSelectorTerms[i].MatchFields = append(req.NodeSelectorTerms[i].MatchFields, notSource)
	}
	return t
}

func targetPodName(vmi *virtv1.VirtualMachineInstance, mig *virtv1.VirtualMachineInstanceMigration) string {
	return "virt-launcher-" + vmi.Name + "-" + string(targetPodUID(mig))[:5]
}

func targetPodUID(mig *virtv1.VirtualMachineInstanceMigration) types.UID {
	return types.UID(uuid.NewSHA1(uuid.NameSpaceOID, []byte("virt-launcher-target/"+string(mig.UID))).String())
}

// migrating tells whether a live migration of the VMI is under way
// (KubeVirt's Migrating printable status).
func migrating(vmi *virtv1.VirtualMachineInstance) bool {
	s := vmi.Status.MigrationState
	return s != nil && s.StartTimestamp != nil && s.EndTimestamp == nil && !s.Completed && !s.Failed
}
