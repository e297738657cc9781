package kubevirtsim

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"
)

func TestAlwaysStartsVMIWithRunningStatus(t *testing.T) {
	e := newEnv(t).run(Options{})
	rec := recordStatuses(e)
	vm := e.createVM(withAgent(testVM("web", virtv1.RunStrategyAlways)))

	vmi := e.waitRunning("web")
	rec.requireSequence(t, "web", virtv1.VirtualMachineStatusStarting, virtv1.VirtualMachineStatusRunning)

	// Owner reference, labels and annotations as KubeVirt's VM controller sets them.
	ref := metav1.GetControllerOf(vmi)
	if ref == nil || ref.UID != vm.UID || ref.Kind != "VirtualMachine" || ref.Name != "web" {
		t.Fatalf("controller ref = %+v, want VM web (%s)", ref, vm.UID)
	}
	if vmi.Labels["kubevirt.io/domain"] != "web" || vmi.Annotations["example.com/note"] != "from-template" {
		t.Errorf("template metadata not copied: labels=%v annotations=%v", vmi.Labels, vmi.Annotations)
	}
	if vmi.Labels[virtv1.NodeNameLabel] != vmi.Status.NodeName || vmi.Status.NodeName == "" {
		t.Errorf("node label %q vs status.nodeName %q", vmi.Labels[virtv1.NodeNameLabel], vmi.Status.NodeName)
	}
	if !slices.Contains(vmi.Finalizers, virtv1.VirtualMachineControllerFinalizer) || !slices.Contains(vmi.Finalizers, virtv1.VirtualMachineInstanceFinalizer) {
		t.Errorf("finalizers = %v", vmi.Finalizers)
	}
	var phases []virtv1.VirtualMachineInstancePhase
	for _, p := range vmi.Status.PhaseTransitionTimestamps {
		phases = append(phases, p.Phase)
	}
	if !slices.Equal(phases, []virtv1.VirtualMachineInstancePhase{virtv1.Pending, virtv1.Scheduling, virtv1.Scheduled, virtv1.Running}) {
		t.Errorf("phase transitions = %v", phases)
	}
	if d := vmi.Status.PhaseTransitionTimestamps[3].PhaseTransitionTimestamp.Sub(vmi.Status.PhaseTransitionTimestamps[0].PhaseTransitionTimestamp.Time); d < testStartDelay {
		t.Errorf("VMI was running after %v, StartDelay is %v", d, testStartDelay)
	}

	// Guest-visible status.
	if len(vmi.Status.Interfaces) != 1 {
		t.Fatalf("interfaces = %+v", vmi.Status.Interfaces)
	}
	iface := vmi.Status.Interfaces[0]
	if iface.Name != "net0" || iface.MAC != "bc:24:11:00:00:01" || iface.InterfaceName != "enp1s0" ||
		iface.InfoSource != "domain, guest-agent" || len(iface.IPs) != 2 || iface.IP != iface.IPs[0] {
		t.Errorf("interface = %+v", iface)
	}
	if !isIPv4In(iface.IPs[0], "10.244.") {
		t.Errorf("IPv4 %q not in 10.244.0.0/16", iface.IPs[0])
	}
	for _, ct := range []virtv1.VirtualMachineInstanceConditionType{virtv1.VirtualMachineInstanceReady, virtv1.VirtualMachineInstanceAgentConnected, virtv1.VirtualMachineInstanceIsMigratable} {
		if !hasVMICondition(vmi, ct, corev1.ConditionTrue) {
			t.Errorf("VMI condition %s not True: %s", ct, describeVMI(vmi))
		}
	}
	if vmi.Status.GuestOSInfo.ID != "debian" || vmi.Status.GuestOSInfo.VersionID != "12" {
		t.Errorf("guestOSInfo = %+v", vmi.Status.GuestOSInfo)
	}
	if topo := vmi.Status.CurrentCPUTopology; topo == nil || topo.Cores != 2 || topo.Sockets != 1 || topo.Threads != 1 {
		t.Errorf("currentCPUTopology = %+v", topo)
	}
	if m := vmi.Status.Memory; m == nil || m.GuestCurrent == nil || m.GuestCurrent.Cmp(resource.MustParse("1Gi")) != 0 {
		t.Errorf("memory = %+v", m)
	}
	if vmi.Status.LauncherContainerImageVersion == "" || vmi.Status.MigrationMethod != virtv1.BlockMigration {
		t.Errorf("launcher image %q, migration method %q", vmi.Status.LauncherContainerImageVersion, vmi.Status.MigrationMethod)
	}
	if len(vmi.Spec.Domain.Devices.Disks) != 1 || vmi.Spec.Domain.Devices.Disks[0].Name != "root" {
		t.Errorf("default disk for volume root missing: %+v", vmi.Spec.Domain.Devices.Disks)
	}

	// VM status and the firmware UUID KubeVirt persists on the VM.
	vm = e.getVM("web")
	if !vm.Status.Ready || !vm.Status.Created || vm.Status.RunStrategy != virtv1.RunStrategyAlways {
		t.Errorf("VM status: %s", describeVM(vm))
	}
	if !hasVMCondition(vm, virtv1.VirtualMachineReady, corev1.ConditionTrue) || !hasVMCondition(vm, virtv1.VirtualMachineConditionType(virtv1.VirtualMachineInstanceAgentConnected), corev1.ConditionTrue) {
		t.Errorf("VM conditions: %s", describeVM(vm))
	}
	if fw := vm.Spec.Template.Spec.Domain.Firmware; fw == nil || fw.UUID == "" || fw.UUID != vmi.Spec.Domain.Firmware.UUID {
		t.Errorf("firmware UUID not persisted: VM %+v VMI %+v", fw, vmi.Spec.Domain.Firmware)
	}
	if !slices.Contains(vm.Finalizers, virtv1.VirtualMachineControllerFinalizer) {
		t.Errorf("VM finalizers = %v", vm.Finalizers)
	}
}

func isIPv4In(ip, prefix string) bool {
	return strings.HasPrefix(ip, prefix) && !strings.Contains(ip, ":")
}

func TestAlwaysStopAndStartViaSubresources(t *testing.T) {
	e := newEnv(t).run(Options{})
	rec := recordStatuses(e)
	e.createVM(testVM("web", virtv1.RunStrategyAlways))
	first := e.waitRunning("web")

	// A start request makes no sense for Always.
	requireStatus(t, e.kv.KubevirtV1().VirtualMachines(testNS).Start(e.ctx, "web", &virtv1.StartOptions{}), 409, "VM is already running")

	stopAt := time.Now()
	if err := e.kv.KubevirtV1().VirtualMachines(testNS).Stop(e.ctx, "web", &virtv1.StopOptions{}); err != nil {
		t.Fatalf("stop: %v", err)
	}
	vm := e.getVM("web")
	if *vm.Spec.RunStrategy != virtv1.RunStrategyHalted {
		t.Fatalf("stop did not halt the VM: %s", describeVM(vm))
	}
	e.waitNoVMI("web")
	if d := time.Since(stopAt); d < testStopDelay {
		t.Errorf("VMI gone after %v, StopDelay is %v", d, testStopDelay)
	}
	e.waitStopped("web")
	rec.requireSequence(t, "web", virtv1.VirtualMachineStatusRunning, virtv1.VirtualMachineStatusStopping, virtv1.VirtualMachineStatusStopped)
	vm = e.getVM("web")
	if vm.Status.Ready || vm.Status.RunStrategy != virtv1.RunStrategyHalted ||
		!hasVMCondition(vm, virtv1.VirtualMachineReady, corev1.ConditionFalse) || findVMCondition(vm, virtv1.VirtualMachineReady).Reason != reasonVMINotExists {
		t.Errorf("stopped VM status: %s", describeVM(vm))
	}

	// Stopping a halted VM without a VMI is refused.
	requireStatus(t, e.kv.KubevirtV1().VirtualMachines(testNS).Stop(e.ctx, "web", &virtv1.StopOptions{}), 409, "VM is not running")

	if err := e.kv.KubevirtV1().VirtualMachines(testNS).Start(e.ctx, "web", &virtv1.StartOptions{}); err != nil {
		t.Fatalf("start: %v", err)
	}
	if vm := e.getVM("web"); *vm.Spec.RunStrategy != virtv1.RunStrategyAlways {
		t.Fatalf("start on Halted did not switch to Always: %s", describeVM(vm))
	}
	second := e.waitRunning("web")
	if second.UID == first.UID {
		t.Fatal("expected a new VMI after start")
	}
}

func TestAlwaysRestartsAfterGuestShutdownAndCrash(t *testing.T) {
	e := newEnv(t).run(Options{})
	e.createVM(testVM("web", virtv1.RunStrategyAlways))
	first := e.waitRunning("web")

	if err := e.c.GuestShutdown(e.ctx, testNS, "web"); err != nil {
		t.Fatalf("guest shutdown: %v", err)
	}
	second := e.waitVMI("web", "new Running VMI", func(v *virtv1.VirtualMachineInstance) bool { return v.UID != first.UID && v.IsRunning() })

	if err := e.c.GuestCrash(e.ctx, testNS, "web"); err != nil {
		t.Fatalf("guest crash: %v", err)
	}
	e.waitVMI("web", "another Running VMI", func(v *virtv1.VirtualMachineInstance) bool { return v.UID != second.UID && v.IsRunning() })
	e.waitPrintable("web", virtv1.VirtualMachineStatusRunning)
}

func TestHaltedNeverStarts(t *testing.T) {
	e := newEnv(t).run(Options{})
	e.createVM(testVM("off", virtv1.RunStrategyHalted))
	vm := e.waitStopped("off")
	if vm.Status.RunStrategy != "" {
		t.Errorf("status.runStrategy of a never started VM = %q, KubeVirt leaves it empty", vm.Status.RunStrategy)
	}
	requireStatus(t, e.kv.KubevirtV1().VirtualMachines(testNS).Restart(e.ctx, "off", &virtv1.RestartOptions{}), 409, "RunStategy Halted does not support manual restart requests")
}

func TestSwitchingToHaltedStopsVMI(t *testing.T) {
	e := newEnv(t).run(Options{})
	e.createVM(testVM("web", virtv1.RunStrategyAlways))
	e.waitRunning("web")
	vm := e.getVM("web")
	vm.Spec.RunStrategy = ptr(virtv1.RunStrategyHalted)
	if _, err := e.kv.KubevirtV1().VirtualMachines(testNS).Update(e.ctx, vm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitNoVMI("web")
	e.waitStopped("web")
}

func TestManual(t *testing.T) {
	e := newEnv(t).run(Options{})
	e.createVM(withAgent(testVM("man", virtv1.RunStrategyManual)))
	e.waitStopped("man") // never auto-starts

	vms := e.kv.KubevirtV1().VirtualMachines(testNS)
	if err := vms.Start(e.ctx, "man", &virtv1.StartOptions{}); err != nil {
		t.Fatalf("start: %v", err)
	}
	if vm := e.getVM("man"); *vm.Spec.RunStrategy != virtv1.RunStrategyManual {
		t.Fatalf("start must keep Manual (it queues a start request): %s", describeVM(vm))
	}
	first := e.waitRunning("man")
	e.waitVM("man", "start request cleared", func(vm *virtv1.VirtualMachine) bool { return len(vm.Status.StateChangeRequests) == 0 })

	// Stop: a stop request for this VMI, then the VMI goes away.
	if err := vms.Stop(e.ctx, "man", &virtv1.StopOptions{}); err != nil {
		t.Fatalf("stop: %v", err)
	}
	e.waitNoVMI("man")
	vm := e.waitStopped("man")
	if len(vm.Status.StateChangeRequests) != 0 || *vm.Spec.RunStrategy != virtv1.RunStrategyManual {
		t.Errorf("after stop: %s", describeVM(vm))
	}
	requireStatus(t, vms.Stop(e.ctx, "man", &virtv1.StopOptions{}), 409, "VM is not running")

	// Guest shutdown: the final VMI stays, nothing restarts it.
	if err := vms.Start(e.ctx, "man", &virtv1.StartOptions{}); err != nil {
		t.Fatalf("start: %v", err)
	}
	second := e.waitRunning("man")
	if second.UID == first.UID {
		t.Fatal("expected a new VMI")
	}
	if err := e.c.GuestShutdown(e.ctx, testNS, "man"); err != nil {
		t.Fatal(err)
	}
	vm = e.waitVM("man", "Stopped with a final VMI", func(vm *virtv1.VirtualMachine) bool {
		return vm.Status.PrintableStatus == virtv1.VirtualMachineStatusStopped && vm.Status.Created
	})
	if vm.Status.Ready || findVMCondition(vm, virtv1.VirtualMachineConditionType(virtv1.VirtualMachineInstanceAgentConnected)) != nil {
		t.Errorf("VM after guest shutdown: %s", describeVM(vm))
	}
	vmi := e.waitVMI("man", "finalizers released", func(v *virtv1.VirtualMachineInstance) bool { return len(v.Finalizers) == 0 })
	if vmi.UID != second.UID || vmi.Status.Phase != virtv1.Succeeded {
		t.Fatalf("final VMI should be kept: %s", describeVMI(vmi))
	}

	// Start again: virt-api sends Stop(old UID)+Start (the requests
	// themselves are checked in TestSubresourceErrorsAndPatches); the old
	// VMI goes and a fresh one runs.
	if err := vms.Start(e.ctx, "man", &virtv1.StartOptions{}); err != nil {
		t.Fatalf("start after guest shutdown: %v", err)
	}
	third := e.waitVMI("man", "new VMI running", func(v *virtv1.VirtualMachineInstance) bool { return v.UID != second.UID && v.IsRunning() })
	e.waitVM("man", "requests cleared", func(vm *virtv1.VirtualMachine) bool {
		return len(vm.Status.StateChangeRequests) == 0 && vm.Status.PrintableStatus == virtv1.VirtualMachineStatusRunning
	})

	// Restart: Stop+Start requests, a new VMI.
	if err := vms.Restart(e.ctx, "man", &virtv1.RestartOptions{}); err != nil {
		t.Fatalf("restart: %v", err)
	}
	e.waitVMI("man", "restarted VMI running", func(v *virtv1.VirtualMachineInstance) bool { return v.UID != third.UID && v.IsRunning() })
	e.waitVM("man", "requests cleared", func(vm *virtv1.VirtualMachine) bool {
		return len(vm.Status.StateChangeRequests) == 0 && vm.Status.PrintableStatus == virtv1.VirtualMachineStatusRunning
	})
}

func TestRerunOnFailure(t *testing.T) {
	e := newEnv(t).run(Options{})
	e.createVM(testVM("rr", virtv1.RunStrategyRerunOnFailure))
	first := e.waitRunning("rr") // starts once on creation
	if vm := e.getVM("rr"); vm.Status.RunStrategy != virtv1.RunStrategyRerunOnFailure {
		t.Errorf("status.runStrategy = %q", vm.Status.RunStrategy)
	}

	// A guest poweroff is deleted and not restarted.
	if err := e.c.GuestShutdown(e.ctx, testNS, "rr"); err != nil {
		t.Fatal(err)
	}
	e.waitNoVMI("rr")
	e.waitStopped("rr")

	vms := e.kv.KubevirtV1().VirtualMachines(testNS)
	if err := vms.Start(e.ctx, "rr", &virtv1.StartOptions{}); err != nil {
		t.Fatalf("start: %v", err)
	}
	second := e.waitRunning("rr")
	if second.UID == first.UID {
		t.Fatal("expected a new VMI")
	}

	// A failure is restarted.
	if err := e.c.GuestCrash(e.ctx, testNS, "rr"); err != nil {
		t.Fatal(err)
	}
	e.waitVMI("rr", "restarted after crash", func(v *virtv1.VirtualMachineInstance) bool { return v.UID != second.UID && v.IsRunning() })
	e.waitVM("rr", "running, no pending requests", func(vm *virtv1.VirtualMachine) bool {
		return vm.Status.PrintableStatus == virtv1.VirtualMachineStatusRunning && len(vm.Status.StateChangeRequests) == 0
	})

	// Stop via subresource: a stop request, not a run strategy change.
	if err := vms.Stop(e.ctx, "rr", &virtv1.StopOptions{}); err != nil {
		t.Fatalf("stop: %v", err)
	}
	e.waitNoVMI("rr")
	vm := e.waitStopped("rr")
	if *vm.Spec.RunStrategy != virtv1.RunStrategyRerunOnFailure {
		t.Errorf("run strategy changed: %s", describeVM(vm))
	}
}

func TestRerunOnFailureRefusesStartOfFailedVMI(t *testing.T) {
	// Without a controller the failed VMI stays as it is.
	vm := testVM("rr", virtv1.RunStrategyRerunOnFailure)
	vm.UID = "11111111-1111-1111-1111-111111111111"
	vmi := &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "rr", Namespace: testNS,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm, virtv1.VirtualMachineGroupVersionKind)}},
		Status: virtv1.VirtualMachineInstanceStatus{Phase: virtv1.Failed},
	}
	e := newEnv(t, vm, vmi)
	requireStatus(t, e.sub.Start(e.ctx, testNS, "rr", nil), 409, "RerunOnFailure does not support starting VM from failed state")
}

func TestOnce(t *testing.T) {
	e := newEnv(t).run(Options{})
	e.createVM(testVM("one", virtv1.RunStrategyOnce))
	first := e.waitRunning("one")
	requireStatus(t, e.kv.KubevirtV1().VirtualMachines(testNS).Restart(e.ctx, "one", nil), 409, "RunStategy Once does not support manual restart requests")

	if err := e.c.GuestShutdown(e.ctx, testNS, "one"); err != nil {
		t.Fatal(err)
	}
	e.waitVM("one", "Stopped with final VMI", func(vm *virtv1.VirtualMachine) bool {
		return vm.Status.PrintableStatus == virtv1.VirtualMachineStatusStopped && vm.Status.Created
	})
	vmi := e.waitVMI("one", "final and released", func(v *virtv1.VirtualMachineInstance) bool { return len(v.Finalizers) == 0 })
	if vmi.UID != first.UID || vmi.Status.Phase != virtv1.Succeeded {
		t.Fatalf("Once must not restart: %s", describeVMI(vmi))
	}
	requireStatus(t, e.kv.KubevirtV1().VirtualMachines(testNS).Start(e.ctx, "one", nil), 409, "Once does not support manual start requests")
}

func TestDeprecatedSpecRunning(t *testing.T) {
	e := newEnv(t).run(Options{})
	vm := testVM("legacy", virtv1.RunStrategyAlways)
	vm.Spec.RunStrategy = nil
	vm.Spec.Running = ptr(true)
	e.createVM(vm)
	e.waitRunning("legacy")
	if err := e.kv.KubevirtV1().VirtualMachines(testNS).Stop(e.ctx, "legacy", nil); err != nil {
		t.Fatal(err)
	}
	if vm := e.getVM("legacy"); vm.Spec.Running == nil || *vm.Spec.Running || vm.Spec.RunStrategy != nil {
		t.Fatalf("stop should set spec.running=false: %s", describeVM(vm))
	}
	e.waitNoVMI("legacy")
	e.waitStopped("legacy")
}

func TestStopGracePeriodEscalatesShutdown(t *testing.T) {
	// A StopDelay far beyond the test timeout: only grace period 0 ends it.
	e := newEnv(t).run(Options{StopDelay: time.Hour})
	e.createVM(testVM("man", virtv1.RunStrategyManual))
	vms := e.kv.KubevirtV1().VirtualMachines(testNS)
	if err := vms.Start(e.ctx, "man", nil); err != nil {
		t.Fatal(err)
	}
	first := e.waitRunning("man")

	if err := vms.Stop(e.ctx, "man", &virtv1.StopOptions{GracePeriod: ptr(int64(120))}); err != nil {
		t.Fatal(err)
	}
	// The VMI controller marks a deleted VMI not ready on its next pass.
	vmi := e.waitVMI("man", "shutting down and not ready", func(v *virtv1.VirtualMachineInstance) bool {
		return v.DeletionTimestamp != nil && hasVMICondition(v, virtv1.VirtualMachineInstanceReady, corev1.ConditionFalse)
	})
	if g := vmi.Spec.TerminationGracePeriodSeconds; g == nil || *g != 120 {
		t.Errorf("terminationGracePeriodSeconds = %v, want 120", g)
	}
	e.waitPrintable("man", virtv1.VirtualMachineStatusStopping)

	// A second stop with grace period 0 kills the guest at once.
	if err := vms.Stop(e.ctx, "man", &virtv1.StopOptions{GracePeriod: ptr(int64(0))}); err != nil {
		t.Fatal(err)
	}
	e.waitNoVMI("man")
	e.waitStopped("man")
	if vmi := e.getVMI("man"); vmi != nil && vmi.UID == first.UID {
		t.Fatal("VMI still there")
	}
}

func TestHaltedStopOnlyWithShorterGracePeriod(t *testing.T) {
	e := newEnv(t).run(Options{StopDelay: time.Hour})
	e.createVM(testVM("web", virtv1.RunStrategyAlways))
	e.waitRunning("web")
	vms := e.kv.KubevirtV1().VirtualMachines(testNS)
	if err := vms.Stop(e.ctx, "web", &virtv1.StopOptions{GracePeriod: ptr(int64(60))}); err != nil {
		t.Fatal(err)
	}
	e.waitPrintable("web", virtv1.VirtualMachineStatusStopping)
	requireStatus(t, vms.Stop(e.ctx, "web", nil), 409, "Halted only supports manual stop requests with a shorter graceperiod")
	requireStatus(t, vms.Stop(e.ctx, "web", &virtv1.StopOptions{GracePeriod: ptr(int64(60))}), 409, "shorter graceperiod")
	if err := vms.Stop(e.ctx, "web", &virtv1.StopOptions{GracePeriod: ptr(int64(0))}); err != nil {
		t.Fatalf("escalating stop: %v", err)
	}
	e.waitNoVMI("web")
	e.waitStopped("web")
}

func TestRestartAlwaysAndForcedRestart(t *testing.T) {
	e := newEnv(t).run(Options{StopDelay: time.Hour})
	e.createVM(testVM("web", virtv1.RunStrategyAlways))
	first := e.waitRunning("web")
	vms := e.kv.KubevirtV1().VirtualMachines(testNS)

	requireStatus(t, vms.Restart(e.ctx, "web", &virtv1.RestartOptions{GracePeriodSeconds: ptr(int64(5))}), 400, "only gracePeriod=0 is supported")
	requireStatus(t, vms.Restart(e.ctx, "web", &virtv1.RestartOptions{GracePeriodSeconds: ptr(int64(-1))}), 400, "greater or equal to 0")

	// A forced restart does not wait for the (hour long) shutdown.
	if err := vms.Restart(e.ctx, "web", &virtv1.RestartOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
		t.Fatalf("restart: %v", err)
	}
	e.waitVMI("web", "restarted", func(v *virtv1.VirtualMachineInstance) bool { return v.UID != first.UID && v.IsRunning() })
	e.waitVM("web", "running without requests", func(vm *virtv1.VirtualMachine) bool {
		return vm.Status.PrintableStatus == virtv1.VirtualMachineStatusRunning && len(vm.Status.StateChangeRequests) == 0
	})
	if vm := e.getVM("web"); *vm.Spec.RunStrategy != virtv1.RunStrategyAlways {
		t.Errorf("restart changed the run strategy: %s", describeVM(vm))
	}
}

func TestRestartWithoutVMI(t *testing.T) {
	e := newEnv(t).run(Options{})
	e.createVM(testVM("man", virtv1.RunStrategyManual))
	e.waitStopped("man")
	requireStatus(t, e.kv.KubevirtV1().VirtualMachines(testNS).Restart(e.ctx, "man", nil), 409, "VM is not running: Halted")
}

func TestPauseUnpause(t *testing.T) {
	e := newEnv(t).run(Options{})
	rec := recordStatuses(e)
	e.createVM(testVM("web", virtv1.RunStrategyAlways))
	e.waitRunning("web")
	vmis := e.kv.KubevirtV1().VirtualMachineInstances(testNS)

	if err := vmis.Pause(e.ctx, "web", &virtv1.PauseOptions{}); err != nil {
		t.Fatalf("pause: %v", err)
	}
	vmi := e.getVMI("web")
	if c := findVMICondition(vmi, virtv1.VirtualMachineInstancePaused); c == nil || c.Status != corev1.ConditionTrue || c.Reason != reasonPausedByUser {
		t.Fatalf("Paused condition: %s", describeVMI(vmi))
	}
	if !hasVMICondition(vmi, virtv1.VirtualMachineInstanceReady, corev1.ConditionFalse) {
		t.Errorf("a paused VMI is not ready: %s", describeVMI(vmi))
	}
	vm := e.waitPrintable("web", virtv1.VirtualMachineStatusPaused)
	if vm.Status.Ready || !hasVMCondition(vm, virtv1.VirtualMachinePaused, corev1.ConditionTrue) {
		t.Errorf("paused VM: %s", describeVM(vm))
	}
	requireStatus(t, vmis.Pause(e.ctx, "web", nil), 409, "VMI is already paused")
	requireStatus(t, vmis.SoftReboot(e.ctx, "web"), 409, "VMI is paused")
	requireStatus(t, e.c.GuestShutdown(e.ctx, testNS, "web"), 409, "VMI is paused")

	if err := vmis.Unpause(e.ctx, "web", &virtv1.UnpauseOptions{}); err != nil {
		t.Fatalf("unpause: %v", err)
	}
	e.waitPrintable("web", virtv1.VirtualMachineStatusRunning)
	e.waitVM("web", "ready, no Paused condition", func(vm *virtv1.VirtualMachine) bool {
		return vm.Status.Ready && findVMCondition(vm, virtv1.VirtualMachinePaused) == nil
	})
	requireStatus(t, vmis.Unpause(e.ctx, "web", nil), 409, "VMI is not paused")
	rec.requireSequence(t, "web", virtv1.VirtualMachineStatusRunning, virtv1.VirtualMachineStatusPaused, virtv1.VirtualMachineStatusRunning)

	// Dry run validates only.
	if err := vmis.Pause(e.ctx, "web", &virtv1.PauseOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatal(err)
	}
	if isPaused(e.getVMI("web")) {
		t.Fatal("dry-run pause paused the VMI")
	}
	requireStatus(t, vmis.Pause(e.ctx, "missing", nil), 404, `virtualmachineinstance.kubevirt.io "missing" not found`)
}

func TestPauseRefusedWhileNotRunning(t *testing.T) {
	e := newEnv(t).run(Options{StartDelay: time.Hour})
	e.createVM(testVM("web", virtv1.RunStrategyAlways))
	e.waitPrintable("web", virtv1.VirtualMachineStatusStarting)
	e.waitVMI("web", "Scheduling", func(v *virtv1.VirtualMachineInstance) bool { return v.Status.Phase == virtv1.Scheduling })
	vmis := e.kv.KubevirtV1().VirtualMachineInstances(testNS)
	requireStatus(t, vmis.Pause(e.ctx, "web", nil), 409, "VM is not running")
	requireStatus(t, vmis.Unpause(e.ctx, "web", nil), 409, "VMI is not running")
	requireStatus(t, vmis.SoftReboot(e.ctx, "web"), 409, "VM is not running")
	requireStatus(t, vmis.Reset(e.ctx, "web"), 400, "Failed to reset non-running VMI with phase Scheduling")
	requireStatus(t, e.c.GuestShutdown(e.ctx, testNS, "web"), 409, "VMI is not running")
}

func TestStartPausedOnHalted(t *testing.T) {
	e := newEnv(t).run(Options{})
	e.createVM(testVM("p", virtv1.RunStrategyHalted))
	e.waitStopped("p")
	if err := e.kv.KubevirtV1().VirtualMachines(testNS).Start(e.ctx, "p", &virtv1.StartOptions{Paused: true}); err != nil {
		t.Fatalf("start paused: %v", err)
	}
	vm := e.waitPrintable("p", virtv1.VirtualMachineStatusPaused)
	if *vm.Spec.RunStrategy != virtv1.RunStrategyAlways {
		t.Errorf("paused start of a halted VM should switch it to Always: %s", describeVM(vm))
	}
	vmi := e.getVMI("p")
	if vmi.Spec.StartStrategy == nil || *vmi.Spec.StartStrategy != virtv1.StartStrategyPaused || !isPaused(vmi) {
		t.Fatalf("VMI should start paused: %s", describeVMI(vmi))
	}
	e.waitVM("p", "start request cleared", func(vm *virtv1.VirtualMachine) bool { return len(vm.Status.StateChangeRequests) == 0 })
}

func TestSoftRebootAndReset(t *testing.T) {
	e := newEnv(t).run(Options{})
	vm := testVM("web", virtv1.RunStrategyAlways)
	vm.Spec.Template.Spec.Domain.Features = &virtv1.Features{ACPI: virtv1.FeatureState{Enabled: ptr(false)}}
	e.createVM(vm)
	first := e.waitRunning("web")
	vmis := e.kv.KubevirtV1().VirtualMachineInstances(testNS)

	requireStatus(t, vmis.SoftReboot(e.ctx, "web"), 409, "VMI neither have the agent connected nor the ACPI feature enabled")

	// Connect the simulated agent: soft reboot is possible through it.
	cur := e.getVMI("web")
	cur.Annotations[AnnotationAgent] = "true"
	if _, err := vmis.Update(e.ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitVMI("web", "agent connected", func(v *virtv1.VirtualMachineInstance) bool {
		return hasVMICondition(v, virtv1.VirtualMachineInstanceAgentConnected, corev1.ConditionTrue)
	})
	for range 2 {
		if err := vmis.SoftReboot(e.ctx, "web"); err != nil {
			t.Fatalf("soft reboot: %v", err)
		}
	}
	if err := vmis.Reset(e.ctx, "web"); err != nil {
		t.Fatalf("reset: %v", err)
	}
	vmi := e.getVMI("web")
	if vmi.Annotations[AnnotationReboots] != "2" || vmi.Annotations[AnnotationResets] != "1" {
		t.Errorf("reboot/reset counters: %v", vmi.Annotations)
	}
	if vmi.UID != first.UID || !vmi.IsRunning() {
		t.Errorf("soft reboot and reset keep the VMI running: %s", describeVMI(vmi))
	}
	requireStatus(t, vmis.Reset(e.ctx, "missing"), 404, "not found")
}

func TestAgentAnnotationControlsGuestInfo(t *testing.T) {
	e := newEnv(t).run(Options{})
	e.createVM(withAgent(testVM("web", virtv1.RunStrategyAlways)))
	e.waitRunning("web")
	vmi := e.getVMI("web")
	vmi.Annotations[AnnotationAgent] = "false"
	if _, err := e.kv.KubevirtV1().VirtualMachineInstances(testNS).Update(e.ctx, vmi, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	vmi = e.waitVMI("web", "agent disconnected", func(v *virtv1.VirtualMachineInstance) bool {
		return findVMICondition(v, virtv1.VirtualMachineInstanceAgentConnected) == nil
	})
	if ifc := vmi.Status.Interfaces[0]; ifc.InterfaceName != "" || ifc.InfoSource != "domain" || ifc.IP == "" {
		t.Errorf("without agent the pod IP stays, guest details go: %+v", ifc)
	}
	e.waitVM("web", "AgentConnected gone from VM", func(vm *virtv1.VirtualMachine) bool {
		return findVMCondition(vm, virtv1.VirtualMachineConditionType(virtv1.VirtualMachineInstanceAgentConnected)) == nil
	})
}

// A guest whose PVE config enables the agent runs one: virt-handler's
// first poll reports it a moment after the guest runs (AgentDelay), with
// the guest's OS and its interfaces' names and addresses. agent=0, or no
// PVE config, runs none.
func TestPVEAgentReportsAfterBoot(t *testing.T) {
	const delay = 1200 * time.Millisecond
	e := newEnv(t).run(Options{AgentDelay: delay})
	withConfig := func(name, cfg string) *virtv1.VirtualMachine {
		vm := testVM(name, virtv1.RunStrategyAlways)
		vm.Annotations = map[string]string{annotationConfig: cfg}
		return vm
	}
	// Guests without an agent run first: by the time the agent guests'
	// first poll came, theirs did too.
	e.createVM(withConfig("no-agent", `{"agent":"0"}`))
	e.createVM(testVM("kubectl", virtv1.RunStrategyAlways))
	e.waitRunning("no-agent")
	e.waitRunning("kubectl")
	e.createVM(withConfig("agent", `{"agent":"1,fstrim_cloned_disks=1","net0":"virtio,bridge=vmbr0"}`))
	e.createVM(withConfig("enabled-key", `{"agent":"enabled=yes"}`))
	for _, name := range []string{"agent", "enabled-key"} {
		vmi := e.waitVMI(name, "agent connected", func(v *virtv1.VirtualMachineInstance) bool {
			return findVMICondition(v, virtv1.VirtualMachineInstanceAgentConnected) != nil
		})
		var running time.Time
		for _, p := range vmi.Status.PhaseTransitionTimestamps {
			if p.Phase == virtv1.Running {
				running = p.PhaseTransitionTimestamp.Time
			}
		}
		// Timestamps have second precision: a poll more than a second
		// after the start is at least in the next second.
		if polled := findVMICondition(vmi, virtv1.VirtualMachineInstanceAgentConnected).LastProbeTime.Time; polled.Sub(running) < time.Second {
			t.Errorf("%s: the agent answered at %v, running since %v", name, polled, running)
		}
		ifc := vmi.Status.Interfaces
		if vmi.Status.GuestOSInfo.ID != "debian" || len(ifc) != 1 || ifc[0].InterfaceName == "" || ifc[0].IP == "" ||
			!strings.Contains(ifc[0].InfoSource, "guest-agent") {
			t.Errorf("%s: %s interfaces %+v", name, describeVMI(vmi), ifc)
		}
	}
	for _, name := range []string{"no-agent", "kubectl"} {
		if vmi := e.getVMI(name); findVMICondition(vmi, virtv1.VirtualMachineInstanceAgentConnected) != nil || vmi.Status.GuestOSInfo.ID != "" {
			t.Errorf("%s: an agent without one configured: %s", name, describeVMI(vmi))
		}
	}
}

func TestUnschedulableUntilNodeAppears(t *testing.T) {
	k8s, kv := NewFakeClients() // no nodes
	e := &env{t: t, ctx: t.Context(), k8s: k8s, kv: kv, sub: &Subresources{KV: kv}}
	e.run(Options{})
	e.createVM(testVM("web", virtv1.RunStrategyAlways))
	vm := e.waitPrintable("web", virtv1.VirtualMachineStatusUnschedulable)
	if c := findVMCondition(vm, virtv1.VirtualMachineConditionType(corev1.PodScheduled)); c == nil || c.Reason != corev1.PodReasonUnschedulable {
		t.Errorf("VM conditions: %s", describeVM(vm))
	}
	if vmi := e.getVMI("web"); vmi.Status.Phase != virtv1.Scheduling {
		t.Errorf("VMI: %s", describeVMI(vmi))
	}
	if _, err := k8s.CoreV1().Nodes().Create(e.ctx, testNode("late"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vmi := e.waitRunning("web")
	if vmi.Status.NodeName != "late" || findVMICondition(vmi, podScheduledCondition) != nil {
		t.Errorf("VMI: %s", describeVMI(vmi))
	}
}

func TestSchedulingSpreadsAndHonoursConstraints(t *testing.T) {
	notReady := testNode("node-d")
	notReady.Status.Conditions[0].Status = corev1.ConditionFalse
	cordoned := testNode("node-e")
	cordoned.Spec.Unschedulable = true
	e := newEnv(t, notReady, cordoned).run(Options{})
	for _, n := range []string{"vm1", "vm2", "vm3"} {
		e.createVM(testVM(n, virtv1.RunStrategyAlways))
	}
	nodes := map[string]bool{}
	for _, n := range []string{"vm1", "vm2", "vm3"} {
		nodes[e.waitRunning(n).Status.NodeName] = true
	}
	if len(nodes) != 3 || !nodes["node-a"] || !nodes["node-b"] || !nodes["node-c"] {
		t.Errorf("three VMIs should spread over the three usable nodes, got %v", nodes)
	}

	pinned := testVM("pinned", virtv1.RunStrategyAlways)
	pinned.Spec.Template.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "node-b"}
	e.createVM(pinned)
	if got := e.waitRunning("pinned").Status.NodeName; got != "node-b" {
		t.Errorf("nodeSelector ignored: running on %s", got)
	}

	impossible := testVM("nowhere", virtv1.RunStrategyAlways)
	impossible.Spec.Template.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "node-d"}
	e.createVM(impossible)
	vm := e.waitPrintable("nowhere", virtv1.VirtualMachineStatusUnschedulable)
	msg := findVMCondition(vm, virtv1.VirtualMachineConditionType(corev1.PodScheduled)).Message
	for _, want := range []string{"0/5 nodes are available", "node affinity/selector", "not-ready", "unschedulable"} {
		if !strings.Contains(msg, want) {
			t.Errorf("unschedulable message %q lacks %q", msg, want)
		}
	}
}

// A VMI runs only on a node labelled with its machine type, as real
// virt-controller's nodeSelector and virt-handler's labels have it; a node
// labelled with none (made by hand) is not judged.
func TestMachineTypePlacement(t *testing.T) {
	labelled := func(name string, types ...string) *corev1.Node {
		n := testNode(name)
		for _, typ := range types {
			n.Labels[virtv1.SupportedMachineTypeLabel+typ] = "true"
		}
		return n
	}
	k8s, kv := NewFakeClients(labelled("node-a", "q35", defaultMachineType))
	e := &env{t: t, ctx: t.Context(), k8s: k8s, kv: kv, sub: &Subresources{KV: kv}}
	e.run(Options{})
	withMachine := func(name, typ string) *virtv1.VirtualMachine {
		vm := testVM(name, virtv1.RunStrategyAlways)
		vm.Spec.Template.Spec.Domain.Machine = &virtv1.Machine{Type: typ}
		return vm
	}
	e.createVM(withMachine("alias", "q35"))
	if vmi := e.waitRunning("alias"); vmi.Status.Machine == nil || vmi.Status.Machine.Type != defaultMachineType {
		t.Errorf("q35 runs as the newest machine: %s", describeVMI(vmi))
	}
	e.createVM(withMachine("pinned", "pc-q35-8.1"))
	vm := e.waitPrintable("pinned", virtv1.VirtualMachineStatusUnschedulable)
	if c := findVMCondition(vm, virtv1.VirtualMachineConditionType(corev1.PodScheduled)); c == nil || !strings.Contains(c.Message, "node affinity/selector") {
		t.Errorf("pinned machine type: %s", describeVM(vm))
	}
	if _, err := k8s.CoreV1().Nodes().Create(e.ctx, testNode("unlabelled"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if vmi := e.waitRunning("pinned"); vmi.Status.NodeName != "unlabelled" {
		t.Errorf("pinned machine type on a node without labels: %s", describeVMI(vmi))
	}
}

func TestDeletingVMTerminatesAndRemovesIt(t *testing.T) {
	e := newEnv(t).run(Options{})
	rec := recordStatuses(e)
	e.createVM(testVM("web", virtv1.RunStrategyAlways))
	e.waitRunning("web")
	if err := e.kv.KubevirtV1().VirtualMachines(testNS).Delete(e.ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "VM and VMI gone", func() (bool, string) {
		_, err := e.kv.KubevirtV1().VirtualMachines(testNS).Get(e.ctx, "web", metav1.GetOptions{})
		return err != nil && e.getVMI("web") == nil, "still there"
	})
	rec.requireSequence(t, "web", virtv1.VirtualMachineStatusRunning, virtv1.VirtualMachineStatusTerminating)
}

func TestOrphanedVMIIsGarbageCollected(t *testing.T) {
	e := newEnv(t).run(Options{})
	gone := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "ghost", Namespace: testNS, UID: types.UID("00000000-0000-0000-0000-00000000dead")}}
	vmi := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "ghost", Namespace: testNS,
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(gone, virtv1.VirtualMachineGroupVersionKind)}}}
	if _, err := e.kv.KubevirtV1().VirtualMachineInstances(testNS).Create(e.ctx, vmi, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitNoVMI("ghost")

	// A bare VMI (no owner) is run like KubeVirt runs standalone VMIs.
	bare := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: testNS}}
	if _, err := e.kv.KubevirtV1().VirtualMachineInstances(testNS).Create(e.ctx, bare, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitVMI("bare", "Running", func(v *virtv1.VirtualMachineInstance) bool { return v.IsRunning() })
	if err := e.kv.KubevirtV1().VirtualMachineInstances(testNS).Delete(e.ctx, "bare", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitNoVMI("bare")
}

func TestRestartRequiredAfterTemplateChange(t *testing.T) {
	e := newEnv(t).run(Options{})
	e.createVM(testVM("web", virtv1.RunStrategyAlways))
	first := e.waitRunning("web")
	e.waitVM("web", "no RestartRequired", func(vm *virtv1.VirtualMachine) bool {
		return findVMCondition(vm, virtv1.VirtualMachineRestartRequired) == nil && vm.Status.PrintableStatus == virtv1.VirtualMachineStatusRunning
	})

	vm := e.getVM("web")
	vm.Spec.Template.Spec.Domain.CPU.Cores = 4
	if _, err := e.kv.KubevirtV1().VirtualMachines(testNS).Update(e.ctx, vm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitVM("web", "RestartRequired", func(vm *virtv1.VirtualMachine) bool {
		return hasVMCondition(vm, virtv1.VirtualMachineRestartRequired, corev1.ConditionTrue)
	})
	if err := e.kv.KubevirtV1().VirtualMachines(testNS).Restart(e.ctx, "web", nil); err != nil {
		t.Fatal(err)
	}
	vmi := e.waitVMI("web", "restarted", func(v *virtv1.VirtualMachineInstance) bool { return v.UID != first.UID && v.IsRunning() })
	if vmi.Status.CurrentCPUTopology.Cores != 4 {
		t.Errorf("restart should apply the new template: %+v", vmi.Status.CurrentCPUTopology)
	}
	e.waitVM("web", "RestartRequired cleared", func(vm *virtv1.VirtualMachine) bool {
		return findVMCondition(vm, virtv1.VirtualMachineRestartRequired) == nil
	})
}
