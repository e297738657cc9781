package translate

import (
	"testing"

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
