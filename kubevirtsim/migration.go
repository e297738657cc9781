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
	msgMigrationStateCleared  = "VMI's migration state was cleared during the active migration."
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
	if mig.DeletionTimestamp != nil || mig.IsFinal() {
		if mig.DeletionTimestamp != nil && !mig.IsFinal() {
			// Aborted before it ended: the guest stays where it is.
			vmi, err := m.currentVMI(ctx, mig.Namespace, mig.Spec.VMIName)
			if err == nil {
				err = m.failOnVMI(ctx, vmi, mig, msgMigrationAborted)
			}
			if err != nil {
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

	// The VMI is read from the API server, not from the cache: the cache
	// may not have seen this controller's own last write to it yet (the
	// migration state of Scheduling, the start time of TargetReady) nor the
	// Running phase the migration's creator saw. A step taken on such a
	// stale copy would fail the migration for nothing or silently skip its
	// change to the VMI and still move on to the next phase.
	vmi, err := m.currentVMI(ctx, mig.Namespace, mig.Spec.VMIName)
	if err != nil {
		return 0, err
	}
	now := time.Now()
	orig := mig.DeepCopy()
	st := &mig.Status
	handedOff := false // the VMI's migration state names mig since Scheduling
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
	switch st.Phase {
	case virtv1.MigrationScheduled, virtv1.MigrationPreparingTarget, virtv1.MigrationTargetReady, virtv1.MigrationRunning:
		handedOff = true
	}
	switch {
	case vmi == nil:
		return fail(msgMigrationNoVMI)
	case st.Phase != virtv1.MigrationPhaseUnset && (vmi.IsFinal() || vmi.DeletionTimestamp != nil):
		return fail(msgMigrationVMIShutdown)
	case handedOff && ownState(vmi, mig) == nil:
		return fail(msgMigrationStateCleared)
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
		_, err := m.updateVMI(ctx, vmi, func(v *virtv1.VirtualMachineInstance) {
			if ownState(v, mig) != nil {
				return // written by an earlier pass
			}
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
		_, err := m.updateVMI(ctx, vmi, func(v *virtv1.VirtualMachineInstance) {
			ownState(v, mig).TargetNodeAddress = "127.0.0.1"
		})
		if err != nil {
			return 0, err
		}
		setMigrationPhase(mig, virtv1.MigrationTargetReady, now)
	case virtv1.MigrationTargetReady:
		_, err := m.updateVMI(ctx, vmi, func(v *virtv1.VirtualMachineInstance) {
			if s := ownState(v, mig); s.StartTimestamp == nil {
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
		target := ownState(vmi, mig).TargetNode
		done, err := m.updateVMI(ctx, vmi, func(v *virtv1.VirtualMachineInstance) {
			s := ownState(v, mig)
			if s.Completed {
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
			hotplugOnTarget(v)
		})
		if err != nil {
			return 0, err
		}
		c.mu.Lock()
		c.assumed[vmi.UID] = target
		c.mu.Unlock()
		st.MigrationState = ownState(done, mig).DeepCopy()
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
	_, err := m.updateVMI(ctx, vmi, func(v *virtv1.VirtualMachineInstance) {
		s := ownState(v, mig)
		s.Failed = true
		s.FailureReason = reason
		s.EndTimestamp = ptr(metav1.Now())
	})
	return err
}

// currentVMI reads the VMI from the API server; nil when it does not exist.
func (m *migrations) currentVMI(ctx context.Context, ns, name string) (*virtv1.VirtualMachineInstance, error) {
	vmi, err := m.c.kv.KubevirtV1().VirtualMachineInstances(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return vmi, err
}

// updateVMI applies change to vmi (as read by currentVMI) and writes it when
// it changed, returning the VMI as it is now. The write carries vmi's
// resourceVersion, so it only lands on the VMI the step looked at: a VMI
// changed in between (by the VMI controller, say) gives a conflict, and the
// whole step is retried on a fresh read.
func (m *migrations) updateVMI(ctx context.Context, vmi *virtv1.VirtualMachineInstance, change func(*virtv1.VirtualMachineInstance)) (*virtv1.VirtualMachineInstance, error) {
	upd := vmi.DeepCopy()
	change(upd)
	if equality.Semantic.DeepEqual(vmi, upd) {
		return vmi, nil
	}
	return m.c.kv.KubevirtV1().VirtualMachineInstances(upd.Namespace).Update(ctx, upd, metav1.UpdateOptions{})
}

func (m *migrations) writeStatus(ctx context.Context, orig, mig *virtv1.VirtualMachineInstanceMigration) error {
	return writeStatusIfChanged(ctx, orig.Status, mig.Status, mig, m.c.kv.KubevirtV1().VirtualMachineInstanceMigrations(mig.Namespace).UpdateStatus)
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
