package kubevirtsim

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"
)

// vmDependency is a part of the VM reconcile that has to be satisfied before
// the controller may start a VMI for a VM, the way KubeVirt's VM controller
// first creates a VM's DataVolumes (handleDataVolumes) and reports their
// progress through printableStatus. The DataVolume reconciler (datavolume.go)
// and the restore lock (restore.go) plug in here; reconcilers.go appends them
// to Controller.dependencies.
type vmDependency interface {
	// ready creates what the VM needs and reports whether a VMI may start.
	// It runs on every reconcile of a VM that is not being deleted.
	ready(ctx context.Context, vm *virtv1.VirtualMachine) (bool, error)
	// printableStatus returns a status that takes precedence over
	// ErrorUnschedulable/Starting/Stopped (e.g. Provisioning,
	// DataVolumeError), if any.
	printableStatus(vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance) (virtv1.VirtualMachinePrintableStatus, bool)
}

// vmSync carries one VM reconcile.
type vmSync struct {
	vm          *virtv1.VirtualMachine
	vmi         *virtv1.VirtualMachineInstance
	stopIssued  bool  // this pass deleted the VMI
	syncErr     error // recorded as the VM's Failure condition
	requeue     time.Duration
	vmIsDeleted bool // the VM vanished while being reconciled
	depsPending bool // a vmDependency is not ready: do not start a VMI
	// restartReason: a live update the running instance cannot take
	// (syncLiveUpdate), for RestartRequired.
	restartReason string
}

// syncVM plays KubeVirt's VM controller: finalizer, firmware UUID, run
// strategy and state change requests, then the VM status. It returns the VMI
// as it was left.
func (c *Controller) syncVM(ctx context.Context, vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance) (*virtv1.VirtualMachineInstance, time.Duration, error) {
	s := &vmSync{vm: vm, vmi: vmi}
	if vmi != nil && !isControlledBy(vmi, vm) {
		if metav1.GetControllerOf(vmi) == nil && vm.DeletionTimestamp == nil {
			if err := c.adopt(ctx, s); err != nil {
				return vmi, 0, err
			}
		} else {
			// A VMI of the same name that belongs to something else (or
			// to a previous VM of that name): leave it alone, it is
			// garbage collected separately.
			return vmi, time.Second, nil
		}
	}

	var err error
	if vm.DeletionTimestamp != nil {
		if s.vmi == nil || hasFinalizer(vm, metav1.FinalizerOrphanDependents) {
			err = c.patchVMFinalizers(ctx, s, withoutFinalizers(vm.Finalizers, virtv1.VirtualMachineControllerFinalizer))
		} else {
			err = c.stopVMI(ctx, s)
		}
	} else {
		err = c.patchVMFinalizers(ctx, s, appendMissing(vm.Finalizers, virtv1.VirtualMachineControllerFinalizer))
		if err == nil {
			err = c.persistFirmwareUUID(ctx, s)
		}
		if err == nil {
			err = c.syncDependencies(ctx, s)
		}
		if err == nil {
			err = c.syncRunStrategy(ctx, s)
		}
		if err == nil {
			err = c.syncLiveUpdate(ctx, s)
		}
	}
	if s.vmIsDeleted {
		return s.vmi, 0, nil
	}
	if err != nil {
		if apierrors.IsConflict(err) {
			// A stale cache; the next pass sees the current objects.
			return s.vmi, 0, err
		}
		s.syncErr = err
	}
	if serr := c.updateVMStatus(ctx, s); serr != nil {
		return s.vmi, 0, serr
	}
	return s.vmi, s.requeue, err
}

// syncRunStrategy starts and stops the VMI according to the run strategy and
// the pending state change requests (KubeVirt's syncRunStrategy).
func (c *Controller) syncRunStrategy(ctx context.Context, s *vmSync) error {
	vm, vmi := s.vm, s.vmi
	runStrategy, err := vm.RunStrategy()
	if err != nil {
		return err
	}
	switch runStrategy {
	case virtv1.RunStrategyAlways:
		if vmi != nil {
			if hasStopRequestForVMI(vm, vmi) || vmi.IsFinal() {
				return c.stopVMI(ctx, s)
			}
			return nil
		}
		return c.startVMI(ctx, s)

	case virtv1.RunStrategyRerunOnFailure:
		if vmi != nil {
			failed := vmi.Status.Phase == virtv1.Failed
			if vmi.DeletionTimestamp == nil && (hasStopRequestForVMI(vm, vmi) || failed || vmi.Status.Phase == virtv1.Succeeded) {
				if err := c.stopVMI(ctx, s); err != nil {
					return err
				}
				if failed {
					return c.addStartRequest(ctx, s)
				}
			}
			return nil
		}
		// Started once on creation or when switched to from another
		// strategy; afterwards only by start requests.
		if !hasStartRequest(vm) && vm.Status.RunStrategy == runStrategy {
			return nil
		}
		return c.startVMI(ctx, s)

	case virtv1.RunStrategyManual:
		if vmi != nil {
			if hasStopRequestForVMI(vm, vmi) {
				return c.stopVMI(ctx, s)
			}
			return nil
		}
		if hasStartRequest(vm) {
			return c.startVMI(ctx, s)
		}
		return nil

	case virtv1.RunStrategyHalted:
		if vmi == nil {
			if hasStartRequest(vm) {
				// A paused start of a halted VM: switch it to Always and
				// let the next pass start the VMI paused.
				upd := vm.DeepCopy()
				if upd.Spec.RunStrategy != nil {
					upd.Spec.RunStrategy = ptr(virtv1.RunStrategyAlways)
				} else {
					upd.Spec.Running = ptr(true)
				}
				res, err := c.kv.KubevirtV1().VirtualMachines(vm.Namespace).Update(ctx, upd, metav1.UpdateOptions{})
				if err != nil {
					return c.vmWriteErr(s, err)
				}
				s.vm = res
				s.requeue = time.Millisecond
			}
			return nil
		}
		return c.stopVMI(ctx, s)

	case virtv1.RunStrategyOnce:
		if vmi == nil {
			return c.startVMI(ctx, s)
		}
		return nil

	default:
		return fmt.Errorf("unknown runstrategy: %s", runStrategy)
	}
}

// startVMI creates the VMI from the VM template.
func (c *Controller) startVMI(ctx context.Context, s *vmSync) error {
	if s.depsPending {
		return nil
	}
	if hasVMCondition(s.vm, virtv1.VirtualMachineManualRecoveryRequired, corev1.ConditionTrue) {
		return nil
	}
	vmi, err := newVMIForVM(s.vm)
	if err != nil {
		return err
	}
	if err := c.ensureStateClaim(ctx, s.vm); err != nil {
		return fmt.Errorf("backend storage: %w", err)
	}
	created, err := c.kv.KubevirtV1().VirtualMachineInstances(vmi.Namespace).Create(ctx, vmi, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// The cache has not seen our earlier create yet.
		existing, gerr := c.kv.KubevirtV1().VirtualMachineInstances(vmi.Namespace).Get(ctx, vmi.Name, metav1.GetOptions{})
		if gerr != nil {
			return gerr
		}
		if !isControlledBy(existing, s.vm) {
			return err
		}
		s.vmi = existing
		return nil
	}
	if err != nil {
		return fmt.Errorf("Failure while starting VMI: %w", err)
	}
	c.log.Info("started VM by creating its VMI", zapKey(created))
	removeVMCondition(s.vm, virtv1.VirtualMachineRestartRequired)
	s.vmi = created
	return nil
}

// syncDependencies lets every vmDependency create what the VM needs (e.g.
// its DataVolumes) and records whether all of them allow a start.
func (c *Controller) syncDependencies(ctx context.Context, s *vmSync) error {
	for _, d := range c.dependencies {
		ready, err := d.ready(ctx, s.vm)
		if err != nil {
			return err
		}
		if !ready {
			s.depsPending = true
		}
	}
	return nil
}

// stopVMI deletes the VMI (the guest shuts down while the VMI carries its
// deletion timestamp, see syncDeletingVMI).
func (c *Controller) stopVMI(ctx context.Context, s *vmSync) error {
	vmi := s.vmi
	if vmi == nil || vmi.DeletionTimestamp != nil {
		return nil
	}
	uid := vmi.UID
	err := c.kv.KubevirtV1().VirtualMachineInstances(vmi.Namespace).Delete(ctx, vmi.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	switch {
	case apierrors.IsNotFound(err):
		s.vmi = nil
		return nil
	case err != nil:
		return err
	}
	c.log.Info("stopping VM by deleting its VMI", zapKey(vmi))
	s.stopIssued = true
	removeVMCondition(s.vm, virtv1.VirtualMachineRestartRequired)
	cur, err := c.kv.KubevirtV1().VirtualMachineInstances(vmi.Namespace).Get(ctx, vmi.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		s.vmi = nil
	case err != nil:
		return err
	case cur.UID == uid:
		s.vmi = cur
	default:
		s.vmi = nil
	}
	return nil
}

// addStartRequest queues a start request (RerunOnFailure after a failure).
func (c *Controller) addStartRequest(ctx context.Context, s *vmSync) error {
	reqs := append(append([]virtv1.VirtualMachineStateChangeRequest{}, s.vm.Status.StateChangeRequests...),
		virtv1.VirtualMachineStateChangeRequest{Action: virtv1.StartRequest})
	patch := mustJSONPatch(patchOp{Op: "add", Path: "/status/stateChangeRequests", Value: reqs})
	res, err := c.kv.KubevirtV1().VirtualMachines(s.vm.Namespace).Patch(ctx, s.vm.Name, types.JSONPatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return c.vmWriteErr(s, err)
	}
	s.vm = res
	return nil
}

func (c *Controller) adopt(ctx context.Context, s *vmSync) error {
	upd := s.vmi.DeepCopy()
	upd.OwnerReferences = append(upd.OwnerReferences, *metav1.NewControllerRef(s.vm, virtv1.VirtualMachineGroupVersionKind))
	res, err := c.kv.KubevirtV1().VirtualMachineInstances(upd.Namespace).Update(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	s.vmi = res
	return nil
}

// patchVMFinalizers sets the VM's finalizers to want (test-guarded patch),
// unless they already are.
func (c *Controller) patchVMFinalizers(ctx context.Context, s *vmSync, want []string) error {
	if equality.Semantic.DeepEqual(s.vm.Finalizers, want) || (len(want) == 0 && len(s.vm.Finalizers) == 0) {
		return nil
	}
	patch := finalizerPatch(s.vm.Finalizers, want)
	res, err := c.kv.KubevirtV1().VirtualMachines(s.vm.Namespace).Patch(ctx, s.vm.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return c.vmWriteErr(s, err)
	}
	if res.DeletionTimestamp != nil && len(res.Finalizers) == 0 {
		s.vmIsDeleted = true
	}
	s.vm = res
	return nil
}

// persistFirmwareUUID writes the VM's stable firmware UUID into its template
// when it has none, as KubeVirt v1.8's firmware synchronizer does.
func (c *Controller) persistFirmwareUUID(ctx context.Context, s *vmSync) error {
	tmpl := s.vm.Spec.Template
	if tmpl == nil || (tmpl.Spec.Domain.Firmware != nil && tmpl.Spec.Domain.Firmware.UUID != "") {
		return nil
	}
	var old any
	fw := &virtv1.Firmware{}
	if tmpl.Spec.Domain.Firmware != nil {
		old = tmpl.Spec.Domain.Firmware
		fw = tmpl.Spec.Domain.Firmware.DeepCopy()
	}
	fw.UUID = legacyFirmwareUUID(s.vm.Name)
	patch := mustJSONPatch(
		patchOp{Op: "test", Path: "/spec/template/spec/domain/firmware", Value: old},
		patchOp{Op: "add", Path: "/spec/template/spec/domain/firmware", Value: fw},
	)
	res, err := c.kv.KubevirtV1().VirtualMachines(s.vm.Namespace).Patch(ctx, s.vm.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return c.vmWriteErr(s, err)
	}
	s.vm = res
	return nil
}

// vmWriteErr notes a VM that vanished while being written.
func (c *Controller) vmWriteErr(s *vmSync, err error) error {
	if apierrors.IsNotFound(err) {
		s.vmIsDeleted = true
		return nil
	}
	if isPatchTestFailure(err) {
		return apierrors.NewConflict(vmGroupResource, s.vm.Name, err)
	}
	return err
}

// isPatchTestFailure reports a JSON patch whose "test" operation failed,
// i.e. the object changed since it was read. The API server answers that
// with 422 Invalid; the controller only sends test-guarded JSON patches.
func isPatchTestFailure(err error) bool {
	return apierrors.IsInvalid(err) || strings.Contains(err.Error(), jsonpatchTestErr)
}

// firmwareUUIDNamespace is the UUIDv5 namespace KubeVirt derives a VM's
// stable firmware UUID from (CalculateLegacyUUID), so that simulated VMs get
// the SMBIOS UUID a real cluster would give them.
var firmwareUUIDNamespace = uuid.MustParse("6a1a24a1-4061-4607-8bf4-a3963d0c5895")

func legacyFirmwareUUID(name string) types.UID {
	return types.UID(uuid.NewSHA1(firmwareUUIDNamespace, []byte(name)).String())
}

// updateVMStatus computes the VM status from the VM and its VMI (KubeVirt's
// updateStatus) and writes it through the status subresource when it
// changed.
func (c *Controller) updateVMStatus(ctx context.Context, s *vmSync) error {
	vm, vmi := s.vm, s.vmi
	base := vm.Status.DeepCopy()
	st := &vm.Status

	st.Created = vmi != nil
	st.Ready = vmi != nil && hasVMICondition(vmi, virtv1.VirtualMachineInstanceReady, corev1.ConditionTrue)
	if runStrategy, err := vm.RunStrategy(); err == nil && (st.RunStrategy != "" || st.Created) {
		st.RunStrategy = runStrategy
	}
	if vmi != nil {
		if g, err := strconv.ParseInt(vmi.Annotations[virtv1.VirtualMachineGenerationAnnotation], 10, 64); err == nil {
			st.ObservedGeneration = g
		}
		st.DesiredGeneration = vm.Generation
	}
	if trimFirstChangeRequest(vm, vmi) {
		st.StateChangeRequests = st.StateChangeRequests[1:]
		if len(st.StateChangeRequests) == 0 {
			st.StateChangeRequests = nil
		}
	}
	syncVMConditions(vm, vmi, s.syncErr)
	syncRestartRequired(vm, vmi, s.restartReason)
	if c.ext.snapshots {
		st.VolumeSnapshotStatuses = c.volumeSnapshotStatuses(vm)
	}
	st.PrintableStatus = c.printableStatus(s)

	if equality.Semantic.DeepEqual(base, st) {
		return nil
	}
	res, err := c.kv.KubevirtV1().VirtualMachines(vm.Namespace).UpdateStatus(ctx, vm, metav1.UpdateOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			s.vmIsDeleted = true
			return nil
		}
		return err
	}
	s.vm = res
	return nil
}

// printableStatus evaluates KubeVirt's printable statuses in KubeVirt's
// order; the first that applies wins.
func (c *Controller) printableStatus(s *vmSync) virtv1.VirtualMachinePrintableStatus {
	vm, vmi := s.vm, s.vmi
	switch {
	case vm.DeletionTimestamp != nil:
		return virtv1.VirtualMachineStatusTerminating
	case vmi != nil && !vmi.IsFinal() && (vmi.DeletionTimestamp != nil || s.stopIssued):
		return virtv1.VirtualMachineStatusStopping
	case vmi != nil && vmi.IsRunning() && migrating(vmi):
		return virtv1.VirtualMachineStatusMigrating
	case vmi != nil && vmi.IsRunning() && isPaused(vmi):
		return virtv1.VirtualMachineStatusPaused
	case vmi != nil && vmi.IsRunning():
		return virtv1.VirtualMachineStatusRunning
	case vmi != nil && syncFailed(vmi, reasonFailedPvcNotFound):
		return virtv1.VirtualMachineStatusPvcNotFound
	}
	for _, d := range c.dependencies {
		if st, ok := d.printableStatus(vm, vmi); ok {
			return st
		}
	}
	switch {
	case vmi != nil && unschedulable(vmi):
		return virtv1.VirtualMachineStatusUnschedulable
	case vmi != nil && (vmi.IsUnprocessed() || vmi.IsScheduling() || vmi.IsScheduled()):
		return virtv1.VirtualMachineStatusStarting
	case vmi == nil || vmi.IsFinal():
		return virtv1.VirtualMachineStatusStopped
	}
	return virtv1.VirtualMachineStatusUnknown
}

// syncFailed tells whether the VMI controller's last sync of vmi failed
// for reason (Synchronized=False).
func syncFailed(vmi *virtv1.VirtualMachineInstance, reason string) bool {
	c := findVMICondition(vmi, virtv1.VirtualMachineInstanceSynchronized)
	return c != nil && c.Status == corev1.ConditionFalse && c.Reason == reason
}

func unschedulable(vmi *virtv1.VirtualMachineInstance) bool {
	c := findVMICondition(vmi, podScheduledCondition)
	return c != nil && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
}

// syncVMConditions copies the VMI's conditions to the VM: Ready always (also
// without a VMI), the others generically; Failure reflects the last sync
// error (KubeVirt's syncConditions).
func syncVMConditions(vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance, syncErr error) {
	now := metav1.Now()
	switch ready := findVMICondition(vmi, virtv1.VirtualMachineInstanceReady); {
	case vmi == nil:
		setVMCondition(vm, virtv1.VirtualMachineCondition{Type: virtv1.VirtualMachineReady, Status: corev1.ConditionFalse,
			Reason: reasonVMINotExists, Message: messageVMINotExists, LastProbeTime: now, LastTransitionTime: now})
	case ready == nil:
		setVMCondition(vm, virtv1.VirtualMachineCondition{Type: virtv1.VirtualMachineReady, Status: corev1.ConditionFalse,
			Reason: reasonVMIConditionMissing, Message: messageVMIReadyMissing, LastProbeTime: now, LastTransitionTime: now})
	default:
		setVMCondition(vm, virtv1.VirtualMachineCondition{Type: virtv1.VirtualMachineReady, Status: ready.Status,
			Reason: ready.Reason, Message: ready.Message, LastProbeTime: ready.LastProbeTime, LastTransitionTime: ready.LastTransitionTime})
	}
	if syncErr != nil {
		setVMCondition(vm, virtv1.VirtualMachineCondition{Type: virtv1.VirtualMachineFailure, Status: corev1.ConditionTrue,
			Reason: "FailedCreate", Message: syncErr.Error(), LastTransitionTime: now})
	} else {
		removeVMCondition(vm, virtv1.VirtualMachineFailure)
	}
	if vmi == nil {
		return
	}
	ignore := map[virtv1.VirtualMachineConditionType]bool{
		virtv1.VirtualMachineReady:           true,
		virtv1.VirtualMachineFailure:         true,
		virtv1.VirtualMachineRestartRequired: true,
	}
	onVMI := map[virtv1.VirtualMachineConditionType]bool{}
	for _, cond := range vmi.Status.Conditions {
		t := virtv1.VirtualMachineConditionType(cond.Type)
		if ignore[t] {
			continue
		}
		onVMI[t] = true
		setVMCondition(vm, virtv1.VirtualMachineCondition{Type: t, Status: cond.Status, Reason: cond.Reason,
			Message: cond.Message, LastProbeTime: cond.LastProbeTime, LastTransitionTime: cond.LastTransitionTime})
	}
	for _, cond := range append([]virtv1.VirtualMachineCondition(nil), vm.Status.Conditions...) {
		if !ignore[cond.Type] && !onVMI[cond.Type] {
			removeVMCondition(vm, cond.Type)
		}
	}
}

// syncRestartRequired flags a running VM whose template spec changed since
// its VMI was started in what KubeVirt applies only at a restart (under
// the LiveUpdate rollout strategy not CPU sockets, guest memory, node
// selector, affinity or tolerations: see liveupdate.go), or whose live
// update the instance cannot take (reason).
func syncRestartRequired(vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance, reason string) {
	if vmi == nil || vmi.IsFinal() {
		return
	}
	if _, ok := vmi.Annotations[AnnotationTemplateHash]; !ok || vm.Spec.Template == nil {
		return
	}
	msg := reason
	if templateChanged(vm, vmi) {
		msg = messageRestartRequired
	}
	if msg != "" {
		if c := findVMCondition(vm, virtv1.VirtualMachineRestartRequired); c == nil || c.Status != corev1.ConditionTrue || c.Message != msg {
			setVMCondition(vm, virtv1.VirtualMachineCondition{Type: virtv1.VirtualMachineRestartRequired,
				Status: corev1.ConditionTrue, Message: msg, LastTransitionTime: metav1.Now()})
		}
		return
	}
	removeVMCondition(vm, virtv1.VirtualMachineRestartRequired)
}

// templateChanged tells whether vm's template changed since vmi was
// started from it, in what needs a restart.
func templateChanged(vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance) bool {
	started, ok := vmi.Annotations[AnnotationTemplateHash]
	return ok && vm.Spec.Template != nil && templateHash(vm) != started
}

// templateHash fingerprints the VM template spec, ignoring the firmware UUID
// the controller persists itself and what KubeVirt updates live.
func templateHash(vm *virtv1.VirtualMachine) string {
	spec := vm.Spec.Template.Spec.DeepCopy()
	if spec.Domain.Firmware != nil {
		spec.Domain.Firmware.UUID = ""
	}
	withoutLiveUpdatable(spec)
	b, _ := json.Marshal(spec)
	h := hashBytes(string(b))
	return hex.EncodeToString(h[:16])
}

// trimFirstChangeRequest reports whether the first state change request has
// been carried out (KubeVirt's isTrimFirstChangeRequestNeeded).
func trimFirstChangeRequest(vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance) bool {
	if len(vm.Status.StateChangeRequests) == 0 {
		return false
	}
	req := vm.Status.StateChangeRequests[0]
	switch req.Action {
	case virtv1.StopRequest:
		return vmi == nil || req.UID == nil || *req.UID != vmi.UID
	case virtv1.StartRequest:
		return vmi != nil && vmi.DeletionTimestamp == nil && !vmi.IsFinal()
	}
	return false
}

func hasStartRequest(vm *virtv1.VirtualMachine) bool {
	return len(vm.Status.StateChangeRequests) > 0 && vm.Status.StateChangeRequests[0].Action == virtv1.StartRequest
}

func hasStartPausedRequest(vm *virtv1.VirtualMachine) bool {
	if !hasStartRequest(vm) {
		return false
	}
	return vm.Status.StateChangeRequests[0].Data[virtv1.StartRequestDataPausedKey] == virtv1.StartRequestDataPausedTrue
}

func hasStopRequestForVMI(vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance) bool {
	if len(vm.Status.StateChangeRequests) == 0 {
		return false
	}
	req := vm.Status.StateChangeRequests[0]
	return req.Action == virtv1.StopRequest && req.UID != nil && *req.UID == vmi.UID
}

// newVMIForVM builds the VMI for a VM the way KubeVirt's SetupVMIFromVM and
// startVMI do, plus what KubeVirt's VMI mutating webhook adds on create
// (finalizer, phase Pending) because no webhook runs here.
func newVMIForVM(vm *virtv1.VirtualMachine) (*virtv1.VirtualMachineInstance, error) {
	tmpl := vm.Spec.Template
	if tmpl == nil {
		return nil, errors.New("VirtualMachine has no template")
	}
	vmi := &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{
			Name:        vm.Name,
			Namespace:   vm.Namespace,
			Labels:      maps.Clone(tmpl.ObjectMeta.Labels),
			Annotations: maps.Clone(tmpl.ObjectMeta.Annotations),
			OwnerReferences: []metav1.OwnerReference{
				*metav1.NewControllerRef(vm, virtv1.VirtualMachineGroupVersionKind),
			},
			Finalizers: []string{virtv1.VirtualMachineControllerFinalizer, virtv1.VirtualMachineInstanceFinalizer},
		},
		Spec: *tmpl.Spec.DeepCopy(),
	}
	if vmi.Annotations == nil {
		vmi.Annotations = map[string]string{}
	}
	vmi.Annotations[virtv1.VirtualMachineGenerationAnnotation] = strconv.FormatInt(vm.Generation, 10)
	vmi.Annotations[AnnotationTemplateHash] = templateHash(vm)
	if hasStartPausedRequest(vm) {
		vmi.Spec.StartStrategy = ptr(virtv1.StartStrategyPaused)
	}
	if vmi.Spec.Domain.Firmware == nil {
		vmi.Spec.Domain.Firmware = &virtv1.Firmware{}
	}
	if vmi.Spec.Domain.Firmware.UUID == "" {
		vmi.Spec.Domain.Firmware.UUID = legacyFirmwareUUID(vm.Name)
	}
	setDefaultVolumeDisks(&vmi.Spec)
	setDefaultNetworkInterface(&vmi.Spec)
	setupHotplug(&vmi.Spec)

	now := time.Now()
	setPhase(vmi, virtv1.Pending, now)
	vmi.Status.RuntimeUser = nonRootUser
	vmi.Status.VirtualMachineRevisionName = fmt.Sprintf("revision-start-vm-%s-%d", vm.UID, vm.Generation)
	return vmi, nil
}

// setDefaultVolumeDisks gives every volume without a disk a default disk
// (KubeVirt's SetDefaultVolumeDisk).
func setDefaultVolumeDisks(spec *virtv1.VirtualMachineInstanceSpec) {
	have := map[string]bool{}
	for _, d := range spec.Domain.Devices.Disks {
		have[d.Name] = true
	}
	for _, fs := range spec.Domain.Devices.Filesystems {
		have[fs.Name] = true
	}
	for _, v := range spec.Volumes {
		if !have[v.Name] {
			spec.Domain.Devices.Disks = append(spec.Domain.Devices.Disks, virtv1.Disk{Name: v.Name})
		}
	}
}

// setDefaultNetworkInterface attaches the pod network with KubeVirt's
// default binding (bridge) when the spec names no network at all.
func setDefaultNetworkInterface(spec *virtv1.VirtualMachineInstanceSpec) {
	if a := spec.Domain.Devices.AutoattachPodInterface; a != nil && !*a {
		return
	}
	if len(spec.Networks) != 0 || len(spec.Domain.Devices.Interfaces) != 0 {
		return
	}
	spec.Domain.Devices.Interfaces = []virtv1.Interface{*virtv1.DefaultBridgeNetworkInterface()}
	spec.Networks = []virtv1.Network{*virtv1.DefaultPodNetwork()}
}

func appendMissing(list []string, item string) []string {
	for _, v := range list {
		if v == item {
			return list
		}
	}
	return append(append([]string(nil), list...), item)
}
