package kubevirtsim

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
)

// Condition reasons and messages as KubeVirt v1.8.0 writes them.
const (
	reasonPausedByUser        = "PausedByUser"
	messagePausedByUser       = "VMI was paused by user"
	reasonReadinessGates      = "ReadinessGatesNotReady"
	messageUnpausedGate       = `the status of pod readiness gate "kubevirt.io/virtual-machine-unpaused" is not "True", but False`
	messagePodNotExists       = "virt-launcher pod has not yet been scheduled"
	messageGuestNotRunning    = "Guest VM is not reported as running"
	messagePodTerminating     = "virt-launcher pod is terminating"
	reasonVMINotExists        = "VMINotExists"
	messageVMINotExists       = "VMI does not exist"
	reasonVMIConditionMissing = "VMIConditionMissing"
	messageVMIReadyMissing    = "VMI is missing the Ready condition"
	messageRestartRequired    = "a non-live-updatable field was changed in the template spec"
	messageBridgeNotMigrtable = "cannot migrate VMI which does not use masquerade, bridge with kubevirt.io/allow-pod-bridge-network-live-migration VM annotation or a migratable plugin to connect to the pod network"
)

// podScheduledCondition is the VMI condition type KubeVirt copies from the
// virt-launcher pod while it cannot be scheduled.
const podScheduledCondition = virtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled)

func findVMICondition(vmi *virtv1.VirtualMachineInstance, t virtv1.VirtualMachineInstanceConditionType) *virtv1.VirtualMachineInstanceCondition {
	if vmi == nil {
		return nil
	}
	for i := range vmi.Status.Conditions {
		if vmi.Status.Conditions[i].Type == t {
			return &vmi.Status.Conditions[i]
		}
	}
	return nil
}

func hasVMICondition(vmi *virtv1.VirtualMachineInstance, t virtv1.VirtualMachineInstanceConditionType, status corev1.ConditionStatus) bool {
	c := findVMICondition(vmi, t)
	return c != nil && c.Status == status
}

// setVMICondition adds cond or replaces an existing condition of the same
// type when its status, reason or message differ (timestamps of an unchanged
// condition are kept, like KubeVirt's condition managers do). It reports
// whether anything changed.
func setVMICondition(vmi *virtv1.VirtualMachineInstance, cond virtv1.VirtualMachineInstanceCondition) bool {
	for i, c := range vmi.Status.Conditions {
		if c.Type == cond.Type {
			if c.Status == cond.Status && c.Reason == cond.Reason && c.Message == cond.Message {
				return false
			}
			vmi.Status.Conditions[i] = cond
			return true
		}
	}
	vmi.Status.Conditions = append(vmi.Status.Conditions, cond)
	return true
}

func removeVMICondition(vmi *virtv1.VirtualMachineInstance, t virtv1.VirtualMachineInstanceConditionType) bool {
	n := len(vmi.Status.Conditions)
	vmi.Status.Conditions = slices.DeleteFunc(vmi.Status.Conditions, func(c virtv1.VirtualMachineInstanceCondition) bool {
		return c.Type == t
	})
	if len(vmi.Status.Conditions) == 0 {
		vmi.Status.Conditions = nil
	}
	return n != len(vmi.Status.Conditions)
}

func findVMCondition(vm *virtv1.VirtualMachine, t virtv1.VirtualMachineConditionType) *virtv1.VirtualMachineCondition {
	for i := range vm.Status.Conditions {
		if vm.Status.Conditions[i].Type == t {
			return &vm.Status.Conditions[i]
		}
	}
	return nil
}

func hasVMCondition(vm *virtv1.VirtualMachine, t virtv1.VirtualMachineConditionType, status corev1.ConditionStatus) bool {
	c := findVMCondition(vm, t)
	return c != nil && c.Status == status
}

func setVMCondition(vm *virtv1.VirtualMachine, cond virtv1.VirtualMachineCondition) {
	for i, c := range vm.Status.Conditions {
		if c.Type == cond.Type {
			if c.Status != cond.Status || c.Reason != cond.Reason || c.Message != cond.Message {
				vm.Status.Conditions[i] = cond
			}
			return
		}
	}
	vm.Status.Conditions = append(vm.Status.Conditions, cond)
}

func removeVMCondition(vm *virtv1.VirtualMachine, t virtv1.VirtualMachineConditionType) {
	vm.Status.Conditions = slices.DeleteFunc(vm.Status.Conditions, func(c virtv1.VirtualMachineCondition) bool {
		return c.Type == t
	})
	if len(vm.Status.Conditions) == 0 {
		vm.Status.Conditions = nil
	}
}

func readyCondition(status corev1.ConditionStatus, reason, message string, now time.Time) virtv1.VirtualMachineInstanceCondition {
	return virtv1.VirtualMachineInstanceCondition{
		Type:               virtv1.VirtualMachineInstanceReady,
		Status:             status,
		Reason:             reason,
		Message:            message,
		LastTransitionTime: metav1.NewTime(now),
	}
}

// setPaused records a guest pause/unpause the way virt-handler and the
// virt-launcher pod's readiness gate do: the Paused condition and a Ready
// condition that is False while paused.
func setPaused(vmi *virtv1.VirtualMachineInstance, paused bool, now time.Time) {
	if paused {
		setVMICondition(vmi, virtv1.VirtualMachineInstanceCondition{
			Type:               virtv1.VirtualMachineInstancePaused,
			Status:             corev1.ConditionTrue,
			Reason:             reasonPausedByUser,
			Message:            messagePausedByUser,
			LastProbeTime:      metav1.NewTime(now),
			LastTransitionTime: metav1.NewTime(now),
		})
		setVMICondition(vmi, readyCondition(corev1.ConditionFalse, reasonReadinessGates, messageUnpausedGate, now))
		return
	}
	removeVMICondition(vmi, virtv1.VirtualMachineInstancePaused)
	setVMICondition(vmi, readyCondition(corev1.ConditionTrue, "", "", now))
}

func isPaused(vmi *virtv1.VirtualMachineInstance) bool {
	return hasVMICondition(vmi, virtv1.VirtualMachineInstancePaused, corev1.ConditionTrue)
}

// setPhase moves the VMI to phase and records the transition.
func setPhase(vmi *virtv1.VirtualMachineInstance, phase virtv1.VirtualMachineInstancePhase, now time.Time) {
	if vmi.Status.Phase == phase {
		return
	}
	vmi.Status.Phase = phase
	vmi.Status.PhaseTransitionTimestamps = append(vmi.Status.PhaseTransitionTimestamps,
		virtv1.VirtualMachineInstancePhaseTransitionTimestamp{Phase: phase, PhaseTransitionTimestamp: metav1.NewTime(now)})
}

// markFinal ends the guest: phase Succeeded (clean shutdown) or Failed
// (crash, killed launcher pod). The guest agent disconnects and the
// virt-launcher pod terminates.
func markFinal(vmi *virtv1.VirtualMachineInstance, phase virtv1.VirtualMachineInstancePhase, now time.Time) {
	setPhase(vmi, phase, now)
	removeVMICondition(vmi, virtv1.VirtualMachineInstancePaused)
	removeVMICondition(vmi, virtv1.VirtualMachineInstanceAgentConnected)
	setVMICondition(vmi, readyCondition(corev1.ConditionFalse, virtv1.PodTerminatingReason, messagePodTerminating, now))
}

// kubevirtFinalizers are the finalizers KubeVirt puts on a VMI: the VM
// controller's and the VMI controller's (current and deprecated name).
var kubevirtFinalizers = []string{
	virtv1.VirtualMachineControllerFinalizer,
	virtv1.VirtualMachineInstanceFinalizer,
	virtv1.DeprecatedVirtualMachineInstanceFinalizer,
}

func hasFinalizer(obj metav1.Object, f string) bool {
	return slices.Contains(obj.GetFinalizers(), f)
}

// withoutFinalizers returns fins without the listed ones (nil when empty).
func withoutFinalizers(fins []string, drop ...string) []string {
	var out []string
	for _, f := range fins {
		if !slices.Contains(drop, f) {
			out = append(out, f)
		}
	}
	return out
}
