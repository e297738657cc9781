package translate

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

func TestVMState(t *testing.T) {
	type in struct {
		ps     kubevirtv1.VirtualMachinePrintableStatus
		phase  kubevirtv1.VirtualMachineInstancePhase
		hasVMI bool
		paused bool
	}
	stopped := GuestState{Status: "stopped", QMPStatus: "stopped"}
	running := GuestState{Status: "running", QMPStatus: "running"}
	paused := GuestState{Status: "running", QMPStatus: "paused"}
	tests := []struct {
		name string
		in   in
		want GuestState
	}{
		{"empty printable status is stopped", in{"", "", false, false}, stopped},
		{"stopped", in{kubevirtv1.VirtualMachineStatusStopped, "", false, false}, stopped},
		{"stopped with final VMI", in{kubevirtv1.VirtualMachineStatusStopped, kubevirtv1.Succeeded, true, false}, stopped},
		{"running", in{kubevirtv1.VirtualMachineStatusRunning, kubevirtv1.Running, true, false}, running},
		{"running but paused condition", in{kubevirtv1.VirtualMachineStatusRunning, kubevirtv1.Running, true, true}, paused},
		{"running printable with final VMI", in{kubevirtv1.VirtualMachineStatusRunning, kubevirtv1.Failed, true, false}, stopped},
		{"paused", in{kubevirtv1.VirtualMachineStatusPaused, kubevirtv1.Running, true, true}, paused},
		{"paused printable, condition not yet set: the VMI decides", in{kubevirtv1.VirtualMachineStatusPaused, kubevirtv1.Running, true, false}, running},
		{"migrating", in{kubevirtv1.VirtualMachineStatusMigrating, kubevirtv1.Running, true, false},
			GuestState{Status: "running", QMPStatus: "running", Lock: "migrate"}},
		{"migrating paused", in{kubevirtv1.VirtualMachineStatusMigrating, kubevirtv1.Running, true, true},
			GuestState{Status: "running", QMPStatus: "paused", Lock: "migrate"}},
		{"stopping with VMI", in{kubevirtv1.VirtualMachineStatusStopping, kubevirtv1.Running, true, false}, running},
		{"stopping without VMI", in{kubevirtv1.VirtualMachineStatusStopping, "", false, false}, stopped},
		{"stopping with final VMI", in{kubevirtv1.VirtualMachineStatusStopping, kubevirtv1.Succeeded, true, false}, stopped},
		{"terminating with VMI", in{kubevirtv1.VirtualMachineStatusTerminating, kubevirtv1.Running, true, false},
			GuestState{Status: "running", QMPStatus: "running", Lock: "destroyed"}},
		{"terminating without VMI", in{kubevirtv1.VirtualMachineStatusTerminating, "", false, false},
			GuestState{Status: "stopped", QMPStatus: "stopped", Lock: "destroyed"}},
		{"provisioning", in{kubevirtv1.VirtualMachineStatusProvisioning, "", false, false},
			GuestState{Status: "stopped", QMPStatus: "stopped", Lock: "create"}},
		{"waiting for volume binding", in{kubevirtv1.VirtualMachineStatusWaitingForVolumeBinding, kubevirtv1.Pending, true, false}, stopped},
		{"starting without VMI", in{kubevirtv1.VirtualMachineStatusStarting, "", false, false}, stopped},
		{"starting pending", in{kubevirtv1.VirtualMachineStatusStarting, kubevirtv1.Pending, true, false}, stopped},
		{"starting scheduling", in{kubevirtv1.VirtualMachineStatusStarting, kubevirtv1.Scheduling, true, false}, stopped},
		{"starting scheduled", in{kubevirtv1.VirtualMachineStatusStarting, kubevirtv1.Scheduled, true, false},
			GuestState{Status: "running", QMPStatus: "prelaunch"}},
		{"crash loop", in{kubevirtv1.VirtualMachineStatusCrashLoopBackOff, "", false, false}, stopped},
		{"unschedulable", in{kubevirtv1.VirtualMachineStatusUnschedulable, kubevirtv1.Scheduling, true, false}, stopped},
		{"image pull", in{kubevirtv1.VirtualMachineStatusErrImagePull, kubevirtv1.Scheduled, true, false}, stopped},
		{"image pull backoff", in{kubevirtv1.VirtualMachineStatusImagePullBackOff, kubevirtv1.Scheduled, true, false}, stopped},
		{"pvc not found", in{kubevirtv1.VirtualMachineStatusPvcNotFound, "", false, false}, stopped},
		{"datavolume error", in{kubevirtv1.VirtualMachineStatusDataVolumeError, "", false, false}, stopped},
		{"waiting for receiver", in{kubevirtv1.VirtualMachineStatusWaitingForReceiver, "", false, false}, stopped},
		{"unknown printable without VMI", in{kubevirtv1.VirtualMachineStatusUnknown, "", false, false}, stopped},
		{"unknown VMI phase", in{kubevirtv1.VirtualMachineStatusRunning, kubevirtv1.Unknown, true, false},
			GuestState{Status: "unknown"}},
		{"unknown VMI phase keeps lock", in{kubevirtv1.VirtualMachineStatusMigrating, kubevirtv1.Unknown, true, false},
			GuestState{Status: "unknown", Lock: "migrate"}},
		{"unknown printable status, running VMI", in{"SomethingNew", kubevirtv1.Running, true, false}, running},
	}
	for _, tt := range tests {
		got := VMState(tt.in.ps, tt.in.phase, tt.in.hasVMI, tt.in.paused)
		if got != tt.want {
			t.Errorf("%s: VMState(%q, %q, %v, %v) = %+v, want %+v",
				tt.name, tt.in.ps, tt.in.phase, tt.in.hasVMI, tt.in.paused, got, tt.want)
		}
	}
}

func TestNodeStatus(t *testing.T) {
	tests := []struct {
		ready bool
		want  string
	}{
		{true, "online"},
		{false, "offline"},
	}
	for _, tt := range tests {
		if got := NodeStatus(tt.ready); got != tt.want {
			t.Errorf("NodeStatus(%v) = %q, want %q", tt.ready, got, tt.want)
		}
	}
}

func TestRunStrategyFor(t *testing.T) {
	tests := []struct {
		onboot, template bool
		want             kubevirtv1.VirtualMachineRunStrategy
	}{
		{false, false, "Manual"},
		{true, false, "RerunOnFailure"},
		{false, true, "Halted"},
		{true, true, "Halted"},
	}
	for _, tt := range tests {
		if got := RunStrategyFor(tt.onboot, tt.template); got != tt.want {
			t.Errorf("RunStrategyFor(%v, %v) = %q, want %q", tt.onboot, tt.template, got, tt.want)
		}
	}
	if PVERunStrategy != kubevirtv1.RunStrategyManual || OnbootRunStrategy != kubevirtv1.RunStrategyRerunOnFailure {
		t.Errorf("PVERunStrategy = %q, OnbootRunStrategy = %q", PVERunStrategy, OnbootRunStrategy)
	}
}

func TestOnbootFromRunStrategy(t *testing.T) {
	tests := []struct {
		rs   kubevirtv1.VirtualMachineRunStrategy
		want bool
	}{
		{kubevirtv1.RunStrategyAlways, true},
		{kubevirtv1.RunStrategyRerunOnFailure, true},
		{kubevirtv1.RunStrategyManual, false},
		{kubevirtv1.RunStrategyHalted, false},
		{kubevirtv1.RunStrategyOnce, false},
		{kubevirtv1.RunStrategyWaitAsReceiver, false},
		{"", false},
	}
	for _, tt := range tests {
		if got := OnbootFromRunStrategy(tt.rs); got != tt.want {
			t.Errorf("OnbootFromRunStrategy(%q) = %v, want %v", tt.rs, got, tt.want)
		}
	}
}

func TestGuestStateOf(t *testing.T) {
	vm := func(ps kubevirtv1.VirtualMachinePrintableStatus) *kubevirtv1.VirtualMachine {
		return &kubevirtv1.VirtualMachine{Status: kubevirtv1.VirtualMachineStatus{PrintableStatus: ps}}
	}
	locked := func(vm *kubevirtv1.VirtualMachine, snapshot, restore string) *kubevirtv1.VirtualMachine {
		if snapshot != "" {
			vm.Status.SnapshotInProgress = &snapshot
		}
		if restore != "" {
			vm.Status.RestoreInProgress = &restore
		}
		return vm
	}
	pausedCond := func(s corev1.ConditionStatus) []kubevirtv1.VirtualMachineInstanceCondition {
		return []kubevirtv1.VirtualMachineInstanceCondition{
			{Type: kubevirtv1.VirtualMachineInstanceReady, Status: corev1.ConditionTrue},
			{Type: kubevirtv1.VirtualMachineInstancePaused, Status: s},
		}
	}
	vmi := func(phase kubevirtv1.VirtualMachineInstancePhase, conds []kubevirtv1.VirtualMachineInstanceCondition, deleting bool) *kubevirtv1.VirtualMachineInstance {
		i := &kubevirtv1.VirtualMachineInstance{Status: kubevirtv1.VirtualMachineInstanceStatus{Phase: phase, Conditions: conds}}
		if deleting {
			now := metav1.Now()
			i.DeletionTimestamp = &now
		}
		return i
	}
	tests := []struct {
		name        string
		vm          *kubevirtv1.VirtualMachine
		vmi         *kubevirtv1.VirtualMachineInstance
		want        GuestState
		paused      bool // VMIPaused
		instanceRun bool // VMIRunning
	}{
		{"no instance", vm(kubevirtv1.VirtualMachineStatusStopped), nil,
			GuestState{Status: "stopped", QMPStatus: "stopped"}, false, false},
		{"no instance, provisioning", vm(kubevirtv1.VirtualMachineStatusProvisioning), nil,
			GuestState{Status: "stopped", QMPStatus: "stopped", Lock: "create"}, false, false},
		{"running", vm(kubevirtv1.VirtualMachineStatusRunning), vmi(kubevirtv1.Running, nil, false),
			GuestState{Status: "running", QMPStatus: "running"}, false, true},
		{"paused condition true", vm(kubevirtv1.VirtualMachineStatusPaused), vmi(kubevirtv1.Running, pausedCond(corev1.ConditionTrue), false),
			GuestState{Status: "running", QMPStatus: "paused"}, true, true},
		{"paused condition false", vm(kubevirtv1.VirtualMachineStatusRunning), vmi(kubevirtv1.Running, pausedCond(corev1.ConditionFalse), false),
			GuestState{Status: "running", QMPStatus: "running"}, false, true},
		{"prelaunch: PVE running, instance not yet", vm(kubevirtv1.VirtualMachineStatusStarting), vmi(kubevirtv1.Scheduled, nil, false),
			GuestState{Status: "running", QMPStatus: "prelaunch"}, false, false},
		{"stopping: PVE running, instance going away", vm(kubevirtv1.VirtualMachineStatusStopping), vmi(kubevirtv1.Running, nil, true),
			GuestState{Status: "running", QMPStatus: "running"}, false, false},
		{"final instance", vm(kubevirtv1.VirtualMachineStatusStopped), vmi(kubevirtv1.Succeeded, nil, false),
			GuestState{Status: "stopped", QMPStatus: "stopped"}, false, false},
		{"node unreachable", vm(kubevirtv1.VirtualMachineStatusRunning), vmi(kubevirtv1.Unknown, nil, false),
			GuestState{Status: "unknown"}, false, false},
		{"snapshot in progress", locked(vm(kubevirtv1.VirtualMachineStatusRunning), "snap", ""), vmi(kubevirtv1.Running, nil, false),
			GuestState{Status: "running", QMPStatus: "running", Lock: "snapshot"}, false, true},
		{"restore in progress", locked(vm(kubevirtv1.VirtualMachineStatusStopped), "", "restore"), nil,
			GuestState{Status: "stopped", QMPStatus: "stopped", Lock: "rollback"}, false, false},
		{"migrating and snapshotting: one lock", locked(vm(kubevirtv1.VirtualMachineStatusMigrating), "snap", ""), vmi(kubevirtv1.Running, nil, false),
			GuestState{Status: "running", QMPStatus: "running", Lock: "migrate"}, false, true},
	}
	for _, tt := range tests {
		got := GuestStateOf(tt.vm, tt.vmi)
		if got != tt.want {
			t.Errorf("%s: GuestStateOf = %+v, want %+v", tt.name, got, tt.want)
		}
		if got.Running() != (tt.want.Status == StatusRunning) {
			t.Errorf("%s: Running() = %v for status %q", tt.name, got.Running(), got.Status)
		}
		if tt.vmi != nil && VMIPaused(tt.vmi) != tt.paused {
			t.Errorf("%s: VMIPaused = %v, want %v", tt.name, !tt.paused, tt.paused)
		}
		if VMIRunning(tt.vmi) != tt.instanceRun {
			t.Errorf("%s: VMIRunning = %v, want %v", tt.name, !tt.instanceRun, tt.instanceRun)
		}
		// A task that waited for the instance ends when PVE already
		// shows the guest running, never before.
		if VMIRunning(tt.vmi) && !got.Running() {
			t.Errorf("%s: instance runs but PVE status is %q", tt.name, got.Status)
		}
	}
}

// KubeVirt's own migrations (a CPU or memory hot-plug, a new launcher)
// are no user's: they hold no migrate lock.
func TestAutomaticMigrationNoLock(t *testing.T) {
	vm := &kubevirtv1.VirtualMachine{}
	vm.Status.PrintableStatus = kubevirtv1.VirtualMachineStatusMigrating
	for _, tt := range []struct {
		name string
		cond kubevirtv1.VirtualMachineInstanceConditionType
		st   corev1.ConditionStatus
		lbl  string
		lock string
	}{
		{name: "user's", lock: LockMigrate},
		{name: "cpu hot-plug", cond: kubevirtv1.VirtualMachineInstanceVCPUChange, st: corev1.ConditionTrue},
		{name: "memory hot-plug", cond: kubevirtv1.VirtualMachineInstanceMemoryChange, st: corev1.ConditionTrue},
		{name: "memory hot-plug failed", cond: kubevirtv1.VirtualMachineInstanceMemoryChange, st: corev1.ConditionFalse, lock: LockMigrate},
		{name: "new launcher", lbl: kubevirtv1.OutdatedLauncherImageLabel},
	} {
		vmi := &kubevirtv1.VirtualMachineInstance{}
		vmi.Status.Phase = kubevirtv1.Running
		if tt.cond != "" {
			vmi.Status.Conditions = []kubevirtv1.VirtualMachineInstanceCondition{{Type: tt.cond, Status: tt.st}}
		}
		if tt.lbl != "" {
			vmi.Labels = map[string]string{tt.lbl: ""}
		}
		if st := GuestStateOf(vm, vmi); st.Lock != tt.lock || st.Status != StatusRunning {
			t.Errorf("%s: %+v, want lock %q", tt.name, st, tt.lock)
		}
	}
}
