package translate

import (
	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// PVE guest status values (vmstatus "status" and /cluster/resources rows).
const (
	StatusRunning = "running"
	StatusStopped = "stopped"
	StatusUnknown = "unknown"
)

// PVE QMP run states reported as "qmpstatus" by status/current.
const (
	QMPRunning   = "running"
	QMPPaused    = "paused"
	QMPStopped   = "stopped"
	QMPPrelaunch = "prelaunch"
)

// PVE config locks derived from KubeVirt state.
const (
	LockMigrate   = "migrate"
	LockDestroyed = "destroyed" // set by qemu-server while a VM is destroyed
	LockCreate    = "create"
	LockClone     = "clone"
	// LockSnapshot and LockRollback are qemu-server's locks while a
	// snapshot is taken or restored; KubeVirt's are the VM's
	// status.snapshotInProgress and status.restoreInProgress.
	LockSnapshot = "snapshot"
	LockRollback = "rollback"
)

// GuestState is the PVE view of a VM's power state. Clients poll Status for
// "running"/"stopped" and treat a present Lock as "busy, retry later".
type GuestState struct {
	Status    string // StatusRunning, StatusStopped or StatusUnknown
	QMPStatus string // QMPRunning, QMPPaused, QMPStopped, QMPPrelaunch; empty when unknown
	Lock      string // empty when not locked; the API must then omit "lock"
}

// VMState maps a VirtualMachine's printableStatus and its VMI (if any) onto
// the PVE guest state, following the table of kubevirt.md §1.1:
//
//   - "" (a CRD without server-side defaulting) counts as Stopped;
//   - Running → running; Paused, or any running state with paused set
//     (the VMI's Paused condition) → running/paused;
//   - Migrating → running with lock "migrate";
//   - Stopping → running while a live VMI exists, then stopped;
//     Terminating likewise, with lock "destroyed" as qemu-server sets it;
//   - Provisioning (DataVolumes still importing or cloning) → stopped with
//     lock "create";
//   - Starting → stopped, except that once the VMI is Scheduled (the
//     virt-launcher runs, the guest has not started) it is
//     running/prelaunch, which is what PVE shows for a QEMU process whose
//     guest CPUs have not started;
//   - Stopped, WaitingForVolumeBinding, CrashLoopBackOff, every Err*/Error
//     state, DataVolumeError, WaitingForReceiver and Unknown → stopped;
//   - whatever the printableStatus, a VMI in phase Unknown (its node cannot
//     be reached) gives "unknown", as PVE reports guests of an offline node,
//     and a final VMI (Succeeded or Failed) gives stopped.
//
// Locks from other sources (the AnnotationLock annotation, snapshots,
// restores) are the caller's to overlay.
func VMState(printableStatus kubevirtv1.VirtualMachinePrintableStatus, vmiPhase kubevirtv1.VirtualMachineInstancePhase, hasVMI bool, paused bool) GuestState {
	var lock string
	switch printableStatus {
	case kubevirtv1.VirtualMachineStatusMigrating:
		lock = LockMigrate
	case kubevirtv1.VirtualMachineStatusTerminating:
		lock = LockDestroyed
	case kubevirtv1.VirtualMachineStatusProvisioning:
		lock = LockCreate
	}

	// The instance is the truth: a start task ends when the VMI runs, so
	// status/current must say running from that moment on, although the
	// VM's printableStatus follows only later.
	if !hasVMI {
		return GuestState{Status: StatusStopped, QMPStatus: QMPStopped, Lock: lock}
	}
	switch vmiPhase {
	case kubevirtv1.Unknown:
		return GuestState{Status: StatusUnknown, Lock: lock}
	case kubevirtv1.Running:
		st := GuestState{Status: StatusRunning, QMPStatus: QMPRunning, Lock: lock}
		if paused {
			st.QMPStatus = QMPPaused
		}
		return st
	case kubevirtv1.Scheduled:
		if printableStatus == kubevirtv1.VirtualMachineStatusStarting {
			// The launcher runs and QEMU is being set up: PVE's prelaunch.
			return GuestState{Status: StatusRunning, QMPStatus: QMPPrelaunch, Lock: lock}
		}
	}
	return GuestState{Status: StatusStopped, QMPStatus: QMPStopped, Lock: lock}
}

// Running tells whether PVE shows the guest as running: its QEMU process
// exists, from prelaunch until it has exited. This is what clients poll
// and what the API's "VM %d not running" refusals test.
func (s GuestState) Running() bool { return s.Status == StatusRunning }

// GuestStateOf is the PVE state of vm with its instance vmi (nil when
// there is none): VMState over the VM's printableStatus, the instance's
// phase and its Paused condition.
func GuestStateOf(vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) GuestState {
	var st GuestState
	if vmi == nil {
		st = VMState(vm.Status.PrintableStatus, "", false, false)
	} else {
		st = VMState(vm.Status.PrintableStatus, vmi.Status.Phase, true, VMIPaused(vmi))
	}
	if st.Lock == LockMigrate && vmi != nil && AutomaticMigration(vmi) {
		st.Lock = ""
	}
	// KubeVirt's snapshot and restore controllers lock the VM in its
	// status while they work, and its webhook refuses changes until then.
	switch {
	case st.Lock != "":
	case vm.Status.RestoreInProgress != nil:
		st.Lock = LockRollback
	case vm.Status.SnapshotInProgress != nil:
		st.Lock = LockSnapshot
	}
	return st
}

// AutomaticMigration tells whether instance vmi is being moved by a live
// migration KubeVirt started itself: its workload updater migrates an
// instance to hot-plug CPUs or memory under the LiveUpdate rollout
// (conditions HotVCPUChange, HotMemoryChange), to move its volumes
// (VolumesChange), for a network change (MigrationRequired) or onto a new
// virt-launcher (label outdatedLauncherImage). No user asked for it: PVE
// shows no migrate lock for it (a CPU or memory hot-plug holds none).
func AutomaticMigration(vmi *kubevirtv1.VirtualMachineInstance) bool {
	if _, outdated := vmi.Labels[kubevirtv1.OutdatedLauncherImageLabel]; outdated {
		return true
	}
	for _, c := range vmi.Status.Conditions {
		switch c.Type {
		case kubevirtv1.VirtualMachineInstanceVCPUChange:
			return true
		case kubevirtv1.VirtualMachineInstanceMemoryChange, kubevirtv1.VirtualMachineInstanceVolumesChange,
			kubevirtv1.VirtualMachineInstanceMigrationRequired:
			if c.Status == corev1.ConditionTrue {
				return true
			}
		}
	}
	return false
}

// VMIPaused tells whether an instance has a true Paused condition.
func VMIPaused(vmi *kubevirtv1.VirtualMachineInstance) bool {
	for _, c := range vmi.Status.Conditions {
		if c.Type == kubevirtv1.VirtualMachineInstancePaused && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// VMIRunning tells whether the guest CPUs run in instance vmi (nil: none)
// and nothing is stopping it: phase Running, no deletion under way. A
// start, restart or resume is done at that moment. It is stricter than
// GuestState.Running, which PVE already reports during prelaunch and
// still while the instance is being stopped: a task that ended on either
// would say the VM started while it has not, or is about to go away.
func VMIRunning(vmi *kubevirtv1.VirtualMachineInstance) bool {
	return vmi != nil && vmi.Status.Phase == kubevirtv1.Running && vmi.DeletionTimestamp == nil
}

// PVE node status values of /nodes and /cluster/resources.
const (
	NodeOnline  = "online"
	NodeOffline = "offline"
)

// NodeStatus maps a Kubernetes node's Ready condition onto PVE's node status.
func NodeStatus(ready bool) string {
	if ready {
		return NodeOnline
	}
	return NodeOffline
}

// Run strategies for VMs managed through the PVE API.
const (
	// PVERunStrategy is used for VMs created through the PVE API: like PVE
	// without HA, a shutdown from inside the guest leaves the VM stopped and
	// start/stop go through the subresources. (Halted would silently turn
	// into Always on the first start subresource call.)
	PVERunStrategy = kubevirtv1.RunStrategyManual

	// OnbootRunStrategy approximates onboot=1: the VM is started again after
	// an infrastructure failure, but a guest shutdown still stops it.
	OnbootRunStrategy = kubevirtv1.RunStrategyRerunOnFailure

	// TemplateRunStrategy keeps PVE templates from ever running.
	TemplateRunStrategy = kubevirtv1.RunStrategyHalted
)

// RunStrategyFor returns the run strategy for a VM with the given PVE onboot
// and template flags.
func RunStrategyFor(onboot, template bool) kubevirtv1.VirtualMachineRunStrategy {
	switch {
	case template:
		return TemplateRunStrategy
	case onboot:
		return OnbootRunStrategy
	default:
		return PVERunStrategy
	}
}

// OnbootFromRunStrategy reports the PVE onboot flag implied by a run
// strategy, for VMs created outside the emulator: strategies that bring the
// VM back after a failure (Always, RerunOnFailure) read as onboot=1; Once
// does not, as it never restarts the VM.
func OnbootFromRunStrategy(rs kubevirtv1.VirtualMachineRunStrategy) bool {
	switch rs {
	case kubevirtv1.RunStrategyAlways, kubevirtv1.RunStrategyRerunOnFailure:
		return true
	default:
		return false
	}
}
