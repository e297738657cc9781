package kubevirtsim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubevirt"
)

// Messages used by virt-api v1.8.0 (pkg/virt-api/rest/subresource.go and
// lifecycle.go). Clients match on some of them, so they are reproduced
// verbatim, including KubeVirt's own spelling.
const (
	msgVMNotRunning          = "VM is not running"
	msgVMINotRunning         = "VMI is not running"
	msgVMINotPaused          = "VMI is not paused"
	msgVMIAlreadyPaused      = "VMI is already paused"
	msgVMIPaused             = "VMI is paused"
	msgVMAlreadyRunning      = "VM is already running"
	msgSnapshotInProgress    = "VM snapshot is in progress"
	msgNoAgentNoACPI         = "VMI neither have the agent connected nor the ACPI feature enabled"
	msgPauseLivenessProbe    = "Pausing VMIs with LivenessProbe is currently not supported"
	msgChangeRequestUnderway = "unable to complete request: stop/start already underway"
	msgManualRecovery        = "VM recovery required: Volume migration failed, leaving some volumes pointing to non-consistent targets; manual intervention is needed to reassign them to their original volumes."
	msgUnmarshalBody         = "Can not unmarshal Request body to struct, error: %s"
	jsonpatchTestErr         = "jsonpatch test operation does not apply"
)

var (
	vmGroupResource  = virtv1.Resource("virtualmachine")
	vmiGroupResource = virtv1.Resource("virtualmachineinstance")
)

// Subresources implements the semantics of virt-api's lifecycle
// subresources (subresources.kubevirt.io/v1) as plain functions over a
// KubeVirt clientset, the way virt-api v1.8.0 implements them
// (pkg/virt-api/rest/lifecycle.go):
//
//   - start/stop/restart only write to the VirtualMachine (spec.runStrategy
//     or status.stateChangeRequests, as JSON patches with "test" operations)
//     and leave the rest to the controller;
//   - pause/unpause/softreboot/reset act on the running VMI. Where virt-api
//     would forward the call to virt-handler, the simulator records the
//     effect on the VMI object itself (Paused condition, reboot/reset
//     counters).
//
// All errors are *apierrors.StatusError values carrying the HTTP code
// virt-api answers with (404, 409, 400, 403, 500).
type Subresources struct {
	KV kubevirt.Interface
}

// Start implements PUT .../virtualmachines/{name}/start.
func (s *Subresources) Start(ctx context.Context, ns, name string, opts *virtv1.StartOptions) error {
	if opts == nil {
		opts = &virtv1.StartOptions{}
	}
	vm, err := s.fetchVM(ctx, ns, name)
	if err != nil {
		return err
	}
	vmi, err := s.getVMI(ctx, ns, name)
	if err != nil {
		return err
	}
	if vmi != nil && !vmi.IsFinal() && vmi.Status.Phase != virtv1.Unknown && vmi.Status.Phase != virtv1.VmPhaseUnset {
		return apierrors.NewConflict(vmGroupResource, name, errors.New(msgVMAlreadyRunning))
	}
	if hasVMCondition(vm, virtv1.VirtualMachineManualRecoveryRequired, corev1.ConditionTrue) {
		return apierrors.NewConflict(vmGroupResource, name, errors.New(msgManualRecovery))
	}

	data := map[string]string{}
	if opts.Paused {
		data[virtv1.StartRequestDataPausedKey] = virtv1.StartRequestDataPausedTrue
	}
	runStrategy, err := vm.RunStrategy()
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	dryRun := isDryRun(opts.DryRun)

	var patchErr error
	switch runStrategy {
	case virtv1.RunStrategyHalted:
		if opts.Paused {
			// virt-api sends a start request; the controller then switches
			// the VM to Always and starts the VMI paused.
			patch, err := changeRequestPatch(vm, virtv1.VirtualMachineStateChangeRequest{Action: virtv1.StartRequest, Data: data})
			if err != nil {
				return apierrors.NewInternalError(err)
			}
			patchErr = s.patchVM(ctx, ns, name, patch, dryRun, "status")
		} else {
			patchErr = s.patchVM(ctx, ns, name, runningPatch(vm, true), dryRun, "")
		}
	case virtv1.RunStrategyRerunOnFailure, virtv1.RunStrategyManual:
		needsRestart := false
		if (runStrategy == virtv1.RunStrategyRerunOnFailure && vmi != nil && vmi.Status.Phase == virtv1.Succeeded) ||
			(runStrategy == virtv1.RunStrategyManual && vmi != nil && vmi.IsFinal()) {
			needsRestart = true
		} else if runStrategy == virtv1.RunStrategyRerunOnFailure && vmi != nil && vmi.Status.Phase == virtv1.Failed {
			return apierrors.NewConflict(vmGroupResource, name,
				fmt.Errorf("%v does not support starting VM from failed state", virtv1.RunStrategyRerunOnFailure))
		}
		var patch []byte
		if needsRestart {
			uid := vmi.UID
			patch, err = changeRequestPatch(vm,
				virtv1.VirtualMachineStateChangeRequest{Action: virtv1.StopRequest, UID: &uid},
				virtv1.VirtualMachineStateChangeRequest{Action: virtv1.StartRequest, Data: data})
		} else {
			patch, err = changeRequestPatch(vm, virtv1.VirtualMachineStateChangeRequest{Action: virtv1.StartRequest, Data: data})
		}
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		patchErr = s.patchVM(ctx, ns, name, patch, dryRun, "status")
	case virtv1.RunStrategyAlways, virtv1.RunStrategyOnce:
		return apierrors.NewConflict(vmGroupResource, name, fmt.Errorf("%v does not support manual start requests", runStrategy))
	}
	return patchError(patchErr, name)
}

// Stop implements PUT .../virtualmachines/{name}/stop.
func (s *Subresources) Stop(ctx context.Context, ns, name string, opts *virtv1.StopOptions) error {
	if opts == nil {
		opts = &virtv1.StopOptions{}
	}
	vm, err := s.fetchVM(ctx, ns, name)
	if err != nil {
		return err
	}
	runStrategy, err := vm.RunStrategy()
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	vmi, err := s.getVMI(ctx, ns, name)
	if err != nil {
		return err
	}
	hasVMI := vmi != nil
	dryRun := isDryRun(opts.DryRun)

	// A grace period in the request overwrites the VMI's
	// terminationGracePeriodSeconds (virt-api does this with its own
	// service account); a shorter one escalates a running shutdown.
	var oldGrace int64
	if hasVMI && !vmi.IsFinal() && opts.GracePeriod != nil {
		var test any
		if vmi.Spec.TerminationGracePeriodSeconds != nil {
			oldGrace = *vmi.Spec.TerminationGracePeriodSeconds
			test = oldGrace
		}
		patch := mustJSONPatch(
			patchOp{Op: "test", Path: "/spec/terminationGracePeriodSeconds", Value: test},
			patchOp{Op: "replace", Path: "/spec/terminationGracePeriodSeconds", Value: *opts.GracePeriod},
		)
		if !dryRun {
			if _, err := s.KV.KubevirtV1().VirtualMachineInstances(ns).Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
				return apierrors.NewInternalError(err)
			}
		}
	}

	var patchErr error
	switch runStrategy {
	case virtv1.RunStrategyHalted:
		if !hasVMI || vmi.IsFinal() {
			return apierrors.NewConflict(vmGroupResource, name, errors.New(msgVMNotRunning))
		}
		if opts.GracePeriod == nil || (vmi.Spec.TerminationGracePeriodSeconds != nil && *opts.GracePeriod >= oldGrace) {
			return apierrors.NewConflict(vmGroupResource, name,
				fmt.Errorf("%v only supports manual stop requests with a shorter graceperiod", virtv1.RunStrategyHalted))
		}
		patchErr = s.requestStop(ctx, vm, vmi, dryRun)
	case virtv1.RunStrategyRerunOnFailure, virtv1.RunStrategyManual:
		if !hasVMI || vmi.IsFinal() {
			return apierrors.NewConflict(vmGroupResource, name, errors.New(msgVMNotRunning))
		}
		patchErr = s.requestStop(ctx, vm, vmi, dryRun)
	case virtv1.RunStrategyAlways, virtv1.RunStrategyOnce:
		patchErr = s.patchVM(ctx, ns, name, runningPatch(vm, false), dryRun, "")
	}
	return patchError(patchErr, name)
}

// Restart implements PUT .../virtualmachines/{name}/restart. Only a nil or
// zero gracePeriodSeconds is accepted, as in virt-api; zero additionally
// kills the running guest at once (virt-api deletes the virt-launcher pod,
// which fails the VMI), so the controller replaces it without a graceful
// shutdown.
func (s *Subresources) Restart(ctx context.Context, ns, name string, opts *virtv1.RestartOptions) error {
	if opts == nil {
		opts = &virtv1.RestartOptions{}
	}
	if opts.GracePeriodSeconds != nil {
		if *opts.GracePeriodSeconds > 0 {
			return apierrors.NewBadRequest("For force restart, only gracePeriod=0 is supported for now")
		} else if *opts.GracePeriodSeconds < 0 {
			return apierrors.NewBadRequest("gracePeriod has to be greater or equal to 0")
		}
	}
	vm, err := s.fetchVM(ctx, ns, name)
	if err != nil {
		return err
	}
	if hasVMCondition(vm, virtv1.VirtualMachineConditionType(virtv1.VirtualMachineInstanceVolumesChange), corev1.ConditionTrue) {
		return apierrors.NewConflict(vmGroupResource, name, errors.New(msgManualRecovery))
	}
	runStrategy, err := vm.RunStrategy()
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if runStrategy == virtv1.RunStrategyHalted || runStrategy == virtv1.RunStrategyOnce {
		// "RunStategy" is virt-api's spelling.
		return apierrors.NewConflict(vmGroupResource, name, fmt.Errorf("RunStategy %v does not support manual restart requests", runStrategy))
	}
	vmi, err := s.getVMI(ctx, ns, name)
	if err != nil {
		return err
	}
	if vmi == nil {
		return apierrors.NewConflict(vmGroupResource, name, fmt.Errorf("VM is not running: %v", virtv1.RunStrategyHalted))
	}
	uid := vmi.UID
	patch, err := changeRequestPatch(vm,
		virtv1.VirtualMachineStateChangeRequest{Action: virtv1.StopRequest, UID: &uid},
		virtv1.VirtualMachineStateChangeRequest{Action: virtv1.StartRequest})
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	dryRun := isDryRun(opts.DryRun)
	if err := patchError(s.patchVM(ctx, ns, name, patch, dryRun, "status"), name); err != nil {
		return err
	}
	if dryRun || opts.GracePeriodSeconds == nil {
		return nil
	}
	// Force restart: virt-api deletes the running virt-launcher pod with a
	// one second grace period; the VMI controller then fails the VMI.
	err = s.updateVMI(ctx, ns, name, func(cur *virtv1.VirtualMachineInstance) (bool, error) {
		if cur.UID != uid || (!cur.IsRunning() && !cur.IsScheduled()) {
			return false, nil
		}
		markFinal(cur, virtv1.Failed, time.Now())
		return true, nil
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return apierrors.NewInternalError(err)
	}
	return nil
}

// Pause implements PUT .../virtualmachineinstances/{name}/pause: the
// running guest is suspended (VMI condition Paused=True, Ready=False); the
// controller then reports the VM as Paused.
func (s *Subresources) Pause(ctx context.Context, ns, name string) error {
	return s.PauseWithOptions(ctx, ns, name, nil)
}

// PauseWithOptions is Pause with the request body (dryRun).
func (s *Subresources) PauseWithOptions(ctx context.Context, ns, name string, opts *virtv1.PauseOptions) error {
	var dryRun bool
	if opts != nil {
		dryRun = isDryRun(opts.DryRun)
	}
	return s.vmiAction(ctx, ns, name, dryRun, func(vmi *virtv1.VirtualMachineInstance) error {
		if vmi.Status.Phase != virtv1.Running {
			// virt-api answers "VM is not running" here (not "VMI ...").
			return apierrors.NewConflict(vmiGroupResource, vmi.Name, errors.New(msgVMNotRunning))
		}
		if vmi.Spec.LivenessProbe != nil {
			return apierrors.NewForbidden(vmiGroupResource, vmi.Name, errors.New(msgPauseLivenessProbe))
		}
		if findVMICondition(vmi, virtv1.VirtualMachineInstancePaused) != nil {
			return apierrors.NewConflict(vmiGroupResource, vmi.Name, errors.New(msgVMIAlreadyPaused))
		}
		return nil
	}, func(vmi *virtv1.VirtualMachineInstance) {
		setPaused(vmi, true, time.Now())
	})
}

// Unpause implements PUT .../virtualmachineinstances/{name}/unpause.
func (s *Subresources) Unpause(ctx context.Context, ns, name string) error {
	return s.UnpauseWithOptions(ctx, ns, name, nil)
}

// UnpauseWithOptions is Unpause with the request body (dryRun).
func (s *Subresources) UnpauseWithOptions(ctx context.Context, ns, name string, opts *virtv1.UnpauseOptions) error {
	vm, err := s.KV.KubevirtV1().VirtualMachines(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		if vm.Status.SnapshotInProgress != nil {
			return apierrors.NewConflict(vmGroupResource, name, errors.New(msgSnapshotInProgress))
		}
	case !apierrors.IsNotFound(err):
		return apierrors.NewInternalError(fmt.Errorf("unable to retrieve vm [%s]: %v", name, err))
	}
	var dryRun bool
	if opts != nil {
		dryRun = isDryRun(opts.DryRun)
	}
	return s.vmiAction(ctx, ns, name, dryRun, func(vmi *virtv1.VirtualMachineInstance) error {
		if vmi.Status.Phase != virtv1.Running {
			return apierrors.NewConflict(vmiGroupResource, vmi.Name, errors.New(msgVMINotRunning))
		}
		if findVMICondition(vmi, virtv1.VirtualMachineInstancePaused) == nil {
			return apierrors.NewConflict(vmiGroupResource, vmi.Name, errors.New(msgVMINotPaused))
		}
		return nil
	}, func(vmi *virtv1.VirtualMachineInstance) {
		setPaused(vmi, false, time.Now())
	})
}

// SoftReboot implements PUT .../virtualmachineinstances/{name}/softreboot.
// The guest reboot is recorded by incrementing AnnotationReboots on the VMI;
// the VMI stays Running, as in KubeVirt.
func (s *Subresources) SoftReboot(ctx context.Context, ns, name string) error {
	return s.vmiAction(ctx, ns, name, false, func(vmi *virtv1.VirtualMachineInstance) error {
		if vmi.Status.Phase != virtv1.Running {
			return apierrors.NewConflict(vmiGroupResource, vmi.Name, errors.New(msgVMNotRunning))
		}
		if hasVMICondition(vmi, virtv1.VirtualMachineInstancePaused, corev1.ConditionTrue) {
			return apierrors.NewConflict(vmiGroupResource, vmi.Name, errors.New(msgVMIPaused))
		}
		if findVMICondition(vmi, virtv1.VirtualMachineInstanceAgentConnected) == nil {
			if f := vmi.Spec.Domain.Features; f != nil && f.ACPI.Enabled != nil && !*f.ACPI.Enabled {
				return apierrors.NewConflict(vmiGroupResource, vmi.Name, errors.New(msgNoAgentNoACPI))
			}
		}
		return nil
	}, func(vmi *virtv1.VirtualMachineInstance) {
		bumpAnnotation(vmi, AnnotationReboots)
	})
}

// Reset implements PUT .../virtualmachineinstances/{name}/reset (a hard
// reset of the same VMI; recorded by incrementing AnnotationResets).
func (s *Subresources) Reset(ctx context.Context, ns, name string) error {
	return s.vmiAction(ctx, ns, name, false, func(vmi *virtv1.VirtualMachineInstance) error {
		switch vmi.Status.Phase {
		case virtv1.Running:
			return nil
		case virtv1.Scheduled:
			// virt-handler is reachable but has no domain to reset yet.
			return apierrors.NewInternalError(fmt.Errorf("Failed to reset non-running VMI with phase %s: %v",
				vmi.Status.Phase, errors.New("server error. command Reset failed: domain is not running")))
		default:
			return apierrors.NewBadRequest(fmt.Sprintf(
				"Failed to reset non-running VMI with phase %s: Unable to connect to VirtualMachineInstance because phase is %s instead of %s or %s",
				vmi.Status.Phase, vmi.Status.Phase, virtv1.Running, virtv1.Scheduled))
		}
	}, func(vmi *virtv1.VirtualMachineInstance) {
		bumpAnnotation(vmi, AnnotationResets)
	})
}

// vmiAction fetches the VMI, validates it and, unless dryRun, applies mutate
// and writes the VMI back, retrying on update conflicts.
func (s *Subresources) vmiAction(ctx context.Context, ns, name string, dryRun bool,
	validate func(*virtv1.VirtualMachineInstance) error, mutate func(*virtv1.VirtualMachineInstance)) error {
	var validationErr error
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		vmi, err := s.fetchVMI(ctx, ns, name)
		if err != nil {
			validationErr = err
			return nil
		}
		if err := validate(vmi); err != nil {
			validationErr = err
			return nil
		}
		if dryRun {
			return nil
		}
		mutate(vmi)
		_, err = s.KV.KubevirtV1().VirtualMachineInstances(ns).Update(ctx, vmi, metav1.UpdateOptions{})
		return err
	})
	if validationErr != nil {
		return validationErr
	}
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	return nil
}

// updateVMI applies mutate to the current VMI and writes it back, retrying on
// conflicts. mutate reports whether anything changed.
func (s *Subresources) updateVMI(ctx context.Context, ns, name string, mutate func(*virtv1.VirtualMachineInstance) (bool, error)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		vmi, err := s.KV.KubevirtV1().VirtualMachineInstances(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		changed, err := mutate(vmi)
		if err != nil || !changed {
			return err
		}
		_, err = s.KV.KubevirtV1().VirtualMachineInstances(ns).Update(ctx, vmi, metav1.UpdateOptions{})
		return err
	})
}

func (s *Subresources) requestStop(ctx context.Context, vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance, dryRun bool) error {
	uid := vmi.UID
	patch, err := changeRequestPatch(vm, virtv1.VirtualMachineStateChangeRequest{Action: virtv1.StopRequest, UID: &uid})
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	return s.patchVM(ctx, vm.Namespace, vm.Name, patch, dryRun, "status")
}

func (s *Subresources) patchVM(ctx context.Context, ns, name string, patch []byte, dryRun bool, subresource string) error {
	if dryRun {
		return nil
	}
	var sub []string
	if subresource != "" {
		sub = []string{subresource}
	}
	_, err := s.KV.KubevirtV1().VirtualMachines(ns).Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{}, sub...)
	return err
}

// Migrate implements PUT .../virtualmachines/{name}/migrate the way
// virt-api does: the VM and its VMI must exist and the VMI must be Running;
// it then creates a VirtualMachineInstanceMigration (generateName
// "kubevirt-migrate-vm-") with the options' addedNodeSelector, which the
// controller carries out.
func (s *Subresources) Migrate(ctx context.Context, ns, name string, opts *virtv1.MigrateOptions) error {
	if opts == nil {
		opts = &virtv1.MigrateOptions{}
	}
	if _, err := s.fetchVM(ctx, ns, name); err != nil {
		return err
	}
	vmi, err := s.fetchVMI(ctx, ns, name)
	if err != nil {
		return err
	}
	if vmi.Status.Phase != virtv1.Running {
		return apierrors.NewConflict(vmGroupResource, name, errors.New(msgVMNotRunning))
	}
	mig := &virtv1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "kubevirt-migrate-vm-", Namespace: ns},
		Spec:       virtv1.VirtualMachineInstanceMigrationSpec{VMIName: name, AddedNodeSelector: opts.AddedNodeSelector},
	}
	if _, err := s.KV.KubevirtV1().VirtualMachineInstanceMigrations(ns).Create(ctx, mig, metav1.CreateOptions{DryRun: opts.DryRun}); err != nil {
		return apierrors.NewInternalError(err)
	}
	return nil
}

func (s *Subresources) fetchVM(ctx context.Context, ns, name string) (*virtv1.VirtualMachine, error) {
	vm, err := s.KV.KubevirtV1().VirtualMachines(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, apierrors.NewNotFound(vmGroupResource, name)
		}
		return nil, apierrors.NewInternalError(fmt.Errorf("unable to retrieve vm [%s]: %v", name, err))
	}
	return vm, nil
}

func (s *Subresources) fetchVMI(ctx context.Context, ns, name string) (*virtv1.VirtualMachineInstance, error) {
	vmi, err := s.KV.KubevirtV1().VirtualMachineInstances(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, apierrors.NewNotFound(vmiGroupResource, name)
		}
		return nil, apierrors.NewInternalError(fmt.Errorf("unable to retrieve vmi [%s]: %v", name, err))
	}
	return vmi, nil
}

// getVMI returns the VMI or nil when it does not exist.
func (s *Subresources) getVMI(ctx context.Context, ns, name string) (*virtv1.VirtualMachineInstance, error) {
	vmi, err := s.KV.KubevirtV1().VirtualMachineInstances(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, apierrors.NewInternalError(err)
	}
	return vmi, nil
}

// patchError maps the error of a VM patch the way virt-api does: 409 when
// the message says a JSON patch "test" failed, anything else 500. Current
// API servers answer a failed test with a generic 422 message, so a
// concurrent modification ends up as 500 with real virt-api, and here.
func patchError(err error, name string) error {
	if err == nil {
		return nil
	}
	if strings.Contains(err.Error(), jsonpatchTestErr) {
		return apierrors.NewConflict(vmGroupResource, name, err)
	}
	return apierrors.NewInternalError(err)
}

type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any
}

// MarshalJSON keeps "value" (also when null) for every operation but remove.
func (p patchOp) MarshalJSON() ([]byte, error) {
	if p.Op == "remove" {
		return json.Marshal(struct {
			Op   string `json:"op"`
			Path string `json:"path"`
		}{p.Op, p.Path})
	}
	return json.Marshal(struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}{p.Op, p.Path, p.Value})
}

func mustJSONPatch(ops ...patchOp) []byte {
	b, err := json.Marshal(ops)
	if err != nil {
		panic(fmt.Sprintf("kubevirtsim: marshal JSON patch: %v", err))
	}
	return b
}

// changeRequestPatch builds the status patch virt-api sends for state change
// requests (getChangeRequestJson): it adds the requests when none are
// pending, replaces pending ones by a single stop request, and refuses
// otherwise.
func changeRequestPatch(vm *virtv1.VirtualMachine, changes ...virtv1.VirtualMachineStateChangeRequest) ([]byte, error) {
	var ops []patchOp
	if equality.Semantic.DeepEqual(vm.Status, virtv1.VirtualMachineStatus{}) {
		ops = append(ops, patchOp{Op: "add", Path: "/status", Value: virtv1.VirtualMachineStatus{StateChangeRequests: changes}})
	} else {
		ops = append(ops, patchOp{Op: "test", Path: "/status/stateChangeRequests", Value: vm.Status.StateChangeRequests})
		switch {
		case len(vm.Status.StateChangeRequests) == 0:
			ops = append(ops, patchOp{Op: "add", Path: "/status/stateChangeRequests", Value: changes})
		case len(changes) == 1 && changes[0].Action == virtv1.StopRequest:
			ops = append(ops, patchOp{Op: "replace", Path: "/status/stateChangeRequests", Value: changes})
		default:
			return nil, errors.New(msgChangeRequestUnderway)
		}
	}
	if vm.Status.StartFailure != nil {
		ops = append(ops, patchOp{Op: "remove", Path: "/status/startFailure"})
	}
	return json.Marshal(ops)
}

// runningPatch switches spec.runStrategy (or the deprecated spec.running)
// between Always and Halted, guarded by a test of the current value.
func runningPatch(vm *virtv1.VirtualMachine, running bool) []byte {
	strategy := virtv1.RunStrategyHalted
	if running {
		strategy = virtv1.RunStrategyAlways
	}
	if vm.Spec.RunStrategy != nil {
		return mustJSONPatch(
			patchOp{Op: "test", Path: "/spec/runStrategy", Value: *vm.Spec.RunStrategy},
			patchOp{Op: "replace", Path: "/spec/runStrategy", Value: strategy},
		)
	}
	var current any
	if vm.Spec.Running != nil {
		current = *vm.Spec.Running
	}
	return mustJSONPatch(
		patchOp{Op: "test", Path: "/spec/running", Value: current},
		patchOp{Op: "replace", Path: "/spec/running", Value: running},
	)
}

func isDryRun(dryRun []string) bool {
	return len(dryRun) > 0 && dryRun[0] == metav1.DryRunAll
}

func bumpAnnotation(vmi *virtv1.VirtualMachineInstance, key string) {
	if vmi.Annotations == nil {
		vmi.Annotations = map[string]string{}
	}
	n, _ := strconv.Atoi(vmi.Annotations[key])
	vmi.Annotations[key] = strconv.Itoa(n + 1)
}
