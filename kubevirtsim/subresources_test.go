package kubevirtsim

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"
)

// Subresource semantics without a controller: only the API objects change.
func TestSubresourceErrorsAndPatches(t *testing.T) {
	withVMI := func(vm *virtv1.VirtualMachine, phase virtv1.VirtualMachineInstancePhase) *virtv1.VirtualMachineInstance {
		return &virtv1.VirtualMachineInstance{
			ObjectMeta: metav1.ObjectMeta{Name: vm.Name, Namespace: testNS, UID: types.UID("vmi-" + vm.Name),
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm, virtv1.VirtualMachineGroupVersionKind)}},
			Status: virtv1.VirtualMachineInstanceStatus{Phase: phase},
		}
	}
	always := testVM("always", virtv1.RunStrategyAlways)
	once := testVM("once", virtv1.RunStrategyOnce)
	halted := testVM("halted", virtv1.RunStrategyHalted)
	manual := testVM("manual", virtv1.RunStrategyManual)
	manualDone := testVM("manual-done", virtv1.RunStrategyManual)
	manualDone.UID = "uid-manual-done"
	rerun := testVM("rerun", virtv1.RunStrategyRerunOnFailure)
	rerun.UID = "uid-rerun"
	e := newEnv(t, always, once, halted, manual, manualDone, withVMI(manualDone, virtv1.Succeeded), rerun, withVMI(rerun, virtv1.Running))
	s, ctx := e.sub, e.ctx

	for _, tc := range []struct {
		name string
		err  error
		code int32
		msg  string
	}{
		{"start missing VM", s.Start(ctx, testNS, "nope", nil), 404, `virtualmachine.kubevirt.io "nope" not found`},
		{"stop missing VM", s.Stop(ctx, testNS, "nope", nil), 404, "not found"},
		{"restart missing VM", s.Restart(ctx, testNS, "nope", nil), 404, "not found"},
		{"pause missing VMI", s.Pause(ctx, testNS, "nope"), 404, `virtualmachineinstance.kubevirt.io "nope" not found`},
		{"unpause missing VMI", s.Unpause(ctx, testNS, "nope"), 404, "not found"},
		{"softreboot missing VMI", s.SoftReboot(ctx, testNS, "nope"), 404, "not found"},
		{"reset missing VMI", s.Reset(ctx, testNS, "nope"), 404, "not found"},
		{"start Always", s.Start(ctx, testNS, "always", nil), 409, "Always does not support manual start requests"},
		{"start Once", s.Start(ctx, testNS, "once", nil), 409, "Once does not support manual start requests"},
		{"stop Halted without VMI", s.Stop(ctx, testNS, "halted", nil), 409, `Operation cannot be fulfilled on virtualmachine.kubevirt.io "halted": VM is not running`},
		{"stop Manual without VMI", s.Stop(ctx, testNS, "manual", nil), 409, "VM is not running"},
		{"stop Manual with final VMI", s.Stop(ctx, testNS, "manual-done", nil), 409, "VM is not running"},
		{"start running VM", s.Start(ctx, testNS, "rerun", nil), 409, "VM is already running"},
		{"restart Halted", s.Restart(ctx, testNS, "halted", nil), 409, "RunStategy Halted does not support manual restart requests"},
		{"restart Once", s.Restart(ctx, testNS, "once", nil), 409, "RunStategy Once does not support manual restart requests"},
		{"restart without VMI", s.Restart(ctx, testNS, "manual", nil), 409, "VM is not running: Halted"},
		{"restart with grace 7", s.Restart(ctx, testNS, "rerun", &virtv1.RestartOptions{GracePeriodSeconds: ptr(int64(7))}), 400, "only gracePeriod=0"},
		{"reset of a final VMI", s.Reset(ctx, testNS, "manual-done"), 400, "Failed to reset non-running VMI with phase Succeeded"},
		{"pause of a final VMI", s.Pause(ctx, testNS, "manual-done"), 409, "VM is not running"},
	} {
		t.Run(tc.name, func(t *testing.T) { requireStatus(t, tc.err, tc.code, tc.msg) })
	}

	// Dry runs validate but change nothing.
	if err := s.Start(ctx, testNS, "halted", &virtv1.StartOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(ctx, testNS, "always", &virtv1.StopOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatal(err)
	}
	if *e.getVM("halted").Spec.RunStrategy != virtv1.RunStrategyHalted || *e.getVM("always").Spec.RunStrategy != virtv1.RunStrategyAlways {
		t.Fatal("dry run changed a VM")
	}

	// Start of a Manual VM whose guest shut down: stop the old VMI, then start.
	if err := s.Start(ctx, testNS, "manual-done", nil); err != nil {
		t.Fatal(err)
	}
	reqs := e.getVM("manual-done").Status.StateChangeRequests
	if len(reqs) != 2 || reqs[0].Action != virtv1.StopRequest || *reqs[0].UID != "vmi-manual-done" || reqs[1].Action != virtv1.StartRequest {
		t.Fatalf("requests = %+v", reqs)
	}
	// A pending start/stop refuses another start (virt-api answers 500),
	// but a stop replaces pending requests.
	requireStatus(t, s.Start(ctx, testNS, "manual-done", nil), 500, "stop/start already underway")
	if err := s.Start(ctx, testNS, "manual", nil); err != nil {
		t.Fatal(err)
	}
	requireStatus(t, s.Start(ctx, testNS, "manual", nil), 500, "stop/start already underway")
	if err := s.Stop(ctx, testNS, "rerun", &virtv1.StopOptions{GracePeriod: ptr(int64(3))}); err != nil {
		t.Fatal(err)
	}
	if reqs := e.getVM("rerun").Status.StateChangeRequests; len(reqs) != 1 || reqs[0].Action != virtv1.StopRequest || *reqs[0].UID != "vmi-rerun" {
		t.Fatalf("rerun requests = %+v", reqs)
	}
	if g := e.getVMI("rerun").Spec.TerminationGracePeriodSeconds; g == nil || *g != 3 {
		t.Fatalf("grace period not patched: %v", g)
	}
	if err := s.Restart(ctx, testNS, "rerun", nil); err == nil {
		t.Fatal("restart with a pending stop must fail")
	}
}

func TestLifecyclePatchesUseTestOperations(t *testing.T) {
	vm := testVM("web", virtv1.RunStrategyHalted)
	if got, want := string(runningPatch(vm, true)), `[{"op":"test","path":"/spec/runStrategy","value":"Halted"},{"op":"replace","path":"/spec/runStrategy","value":"Always"}]`; got != want {
		t.Errorf("running patch:\n got %s\nwant %s", got, want)
	}
	vm.Spec.RunStrategy = nil
	vm.Spec.Running = ptr(true)
	if got, want := string(runningPatch(vm, false)), `[{"op":"test","path":"/spec/running","value":true},{"op":"replace","path":"/spec/running","value":false}]`; got != want {
		t.Errorf("running patch (spec.running):\n got %s\nwant %s", got, want)
	}

	// No status at all: the whole status is added.
	p, err := changeRequestPatch(vm, virtv1.VirtualMachineStateChangeRequest{Action: virtv1.StartRequest})
	if err != nil || string(p) != `[{"op":"add","path":"/status","value":{"stateChangeRequests":[{"action":"Start"}]}}]` {
		t.Errorf("empty status: %s %v", p, err)
	}
	// Otherwise guarded by a test of the current requests.
	vm.Status.PrintableStatus = virtv1.VirtualMachineStatusStopped
	vm.Status.StartFailure = &virtv1.VirtualMachineStartFailure{ConsecutiveFailCount: 1}
	uid := types.UID("u1")
	p, err = changeRequestPatch(vm, virtv1.VirtualMachineStateChangeRequest{Action: virtv1.StopRequest, UID: &uid})
	if err != nil || string(p) != `[{"op":"test","path":"/status/stateChangeRequests","value":null},{"op":"add","path":"/status/stateChangeRequests","value":[{"action":"Stop","uid":"u1"}]},{"op":"remove","path":"/status/startFailure"}]` {
		t.Errorf("with status: %s %v", p, err)
	}
}
