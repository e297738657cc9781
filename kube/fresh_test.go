package kube

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testutil"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// A VM another replica made reaches this one's cache through its watch,
// which may lag: GuestFresh finds it in kube-apiserver meanwhile, within
// its budget, and never invents one.
func TestGuestFresh(t *testing.T) {
	e := newEnv(t, envOptions{beforeController: blindVMWatch})
	c := e.cluster(Options{}, true)
	halted := kubevirtv1.RunStrategyHalted
	for name, vmid := range map[string]string{"elsewhere": "4242", "later": "4343"} {
		vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{translate.LabelVMID: vmid}},
			Spec: kubevirtv1.VirtualMachineSpec{RunStrategy: &halted, Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{}}}
		if _, err := e.kv.KubevirtV1().VirtualMachines("default").Create(e.ctx, vm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The watch is blind: the cache alone does not know the VM.
	if _, err := c.Guest(4242); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Guest(4242) from the cache: %v; want not found", err)
	}
	g, err := c.GuestFresh(e.ctx, 4242)
	if err != nil || g.Name() != "elsewhere" {
		t.Fatalf("GuestFresh(4242) = %s, %v", g.Name(), err)
	}
	// It is cached now, for every reader.
	if g, err := c.Guest(4242); err != nil || g.Name() != "elsewhere" {
		t.Fatalf("Guest(4242) after GuestFresh = %s, %v", g.Name(), err)
	}
	if _, err := c.GuestFresh(e.ctx, 4244); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GuestFresh of a vmid no VM has: %v; want not found", err)
	}
	// Past its budget the cache answers alone.
	c.freshLookups = rate.NewLimiter(0, 0)
	if _, err := c.GuestFresh(e.ctx, 4343); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GuestFresh(4343) without budget: %v; want the cache's not found", err)
	}
}

// A client that read the end of a create task another replica recorded
// finds the VM here too, though this replica's VM watch has not delivered
// it: the task's read puts the VM it made into the cache. A failed create
// or one whose VM was replaced by a namesake puts nothing.
func TestEndedCreateShowsItsVM(t *testing.T) {
	e := newEnv(t, envOptions{beforeController: blindVMWatch})
	c := e.cluster(Options{}, true)
	made := e.createVM("made-elsewhere", "uid-made", "4545", kubevirtv1.RunStrategyHalted)
	now := time.Now()
	record := func(pid uint32, exit string, uid types.UID) string {
		return e.recordEnded(translate.UPID{PID: pid, Type: translate.TaskCreate, ID: "4545"}, GoalNone, made, uid, exit, now)
	}
	cachedHere := func() bool { return c.cachedVM(made.Namespace, made.Name) != nil }

	for _, tc := range []struct {
		name string
		exit string
		uid  types.UID
	}{
		{"failed", "unable to create VM 4545", made.UID},
		{"namesake", translate.ExitOK, "uid-gone"},
	} {
		if _, err := c.Tasks.Get(e.ctx, record(uint32(len(tc.name)), tc.exit, tc.uid)); err != nil {
			t.Fatal(err)
		}
		if cachedHere() {
			t.Fatalf("%s create: its task's read cached the VM", tc.name)
		}
	}
	got, err := c.Tasks.Get(e.ctx, record(99, translate.ExitOK, made.UID))
	if err != nil || got.Running() {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if !cachedHere() {
		t.Fatal("the create task read as ended, but the VM it made is not cached")
	}
	if g, err := c.Guest(4545); err != nil || g.Name() != made.Name {
		t.Fatalf("Guest(4545) = %v, %v", g, err)
	}
}

// A replica whose instance watch lags shows the state a start or stop
// task ended on once a client reads that end there (another replica ended
// it): on PVE, status/current after a start task's OK says running. A
// failed task, a namesake's and one that ended long ago change nothing.
func TestEndedPowerTaskShowsItsState(t *testing.T) {
	e := newEnv(t, envOptions{beforeController: blindVMIWatch})
	c := e.cluster(Options{}, true)
	vm := e.createVM("powered", "uid-powered", "4646", kubevirtv1.RunStrategyAlways)
	testutil.Wait(t, waitTimeout, "the VM in the cache", func() (bool, string) {
		_, err := c.Guest(4646)
		return err == nil, fmt.Sprint(err)
	})
	state := func() string {
		g, err := c.Guest(4646)
		if err != nil {
			t.Fatal(err)
		}
		return g.State().Status
	}
	// The instance another replica saw start; this one's watch is blind.
	if _, err := e.kv.KubevirtV1().VirtualMachineInstances("default").Create(e.ctx, &kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "powered", UID: "uid-powered-vmi"},
		Status:     kubevirtv1.VirtualMachineInstanceStatus{Phase: kubevirtv1.Running},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	pid := uint32(0)
	record := func(typ string, goal Goal, exit string, uid types.UID, ended time.Time) string {
		pid++
		return e.recordEnded(translate.UPID{PID: pid, Type: typ, ID: "4646"}, goal, vm, uid, exit, ended)
	}
	read := func(upid string) {
		t.Helper()
		if got, err := c.Tasks.Get(e.ctx, upid); err != nil || got.Running() {
			t.Fatalf("Get(%s) = %+v, %v", upid, got, err)
		}
	}

	for _, tc := range []struct {
		name  string
		exit  string
		uid   types.UID
		ended time.Time
	}{
		{"failed", "start failed: the VM instance failed", vm.UID, now},
		{"namesake's", translate.ExitOK, "uid-gone", now},
		{"long ended", translate.ExitOK, vm.UID, now.Add(-2 * mutationTTL)},
	} {
		read(record(translate.TaskStart, GoalRunning, tc.exit, tc.uid, tc.ended))
		if st := state(); st != translate.StatusStopped {
			t.Fatalf("%s start task read: the cache shows %s", tc.name, st)
		}
	}
	read(record(translate.TaskStart, GoalRunning, translate.ExitOK, vm.UID, now))
	if st := state(); st != translate.StatusRunning {
		t.Fatalf("start task read as ended OK, but status/current would say %s", st)
	}

	// The instance goes; the blind watch keeps it here until a stop's end
	// is read.
	if err := e.kv.KubevirtV1().VirtualMachineInstances("default").Delete(e.ctx, "powered", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if st := state(); st != translate.StatusRunning {
		t.Fatalf("control: the blind cache shows %s before the stop's end is read", st)
	}
	read(record(translate.TaskStop, GoalStopped, translate.ExitOK, vm.UID, time.Now()))
	if st := state(); st != translate.StatusStopped || c.cachedVMI(vm.Namespace, vm.Name) != nil {
		t.Fatalf("stop task read as ended OK, but the cache shows %s (instance %v)", st, c.cachedVMI(vm.Namespace, vm.Name) != nil)
	}
}

func TestPowerEndShown(t *testing.T) {
	vm := &kubevirtv1.VirtualMachine{}
	inst := func(phase kubevirtv1.VirtualMachineInstancePhase, paused bool) *kubevirtv1.VirtualMachineInstance {
		vmi := &kubevirtv1.VirtualMachineInstance{Status: kubevirtv1.VirtualMachineInstanceStatus{Phase: phase}}
		if paused {
			vmi.Status.Conditions = []kubevirtv1.VirtualMachineInstanceCondition{{Type: kubevirtv1.VirtualMachineInstancePaused, Status: corev1.ConditionTrue}}
		}
		return vmi
	}
	running, paused, failed := inst(kubevirtv1.Running, false), inst(kubevirtv1.Running, true), inst(kubevirtv1.Failed, false)
	scheduled := inst(kubevirtv1.Scheduled, false)
	for _, c := range []struct {
		goal Goal
		vmi  *kubevirtv1.VirtualMachineInstance
		want bool
	}{
		{GoalRunning, running, true},
		{GoalRunning, paused, true}, // a start of a paused guest is done
		{GoalRunning, nil, false},
		{GoalRunning, scheduled, false},
		{GoalRestarted, running, true},
		{GoalResumed, running, true},
		{GoalResumed, paused, false},
		{GoalPaused, paused, true},
		{GoalPaused, running, false},
		{GoalStopped, nil, true},
		{GoalStopped, failed, true},
		{GoalStopped, running, false},
		{GoalStoppedAfterStart, running, false},
		{GoalNone, nil, true},
		{GoalProvisioned, nil, true},
	} {
		if got := powerEndShown(c.goal, vm, c.vmi); got != c.want {
			phase := kubevirtv1.VirtualMachineInstancePhase("none")
			if c.vmi != nil {
				phase = c.vmi.Status.Phase
			}
			t.Errorf("powerEndShown(%s, %s) = %v, want %v", c.goal, phase, got, c.want)
		}
	}
}

// recordEnded records, as another replica would, a task on vm (Node,
// PStart and User of u filled in) with goal and the VM UID uid that ended
// with exit at ended, and returns its UPID.
func (e *env) recordEnded(u translate.UPID, goal Goal, vm *kubevirtv1.VirtualMachine, uid types.UID, exit string, ended time.Time) string {
	e.t.Helper()
	u.Node, u.PStart, u.StartTime, u.User = "node-1", 7, ended.Unix(), "root@pam"
	task := &Task{UPID: u, goal: goal, namespace: vm.Namespace, name: vm.Name, uid: uid, cmName: taskPrefix + u.Key(), deadline: ended.Add(time.Hour)}
	task.finish(exit, ended)
	// The task namespace of Options{}.
	if _, err := e.kube.CoreV1().ConfigMaps("default").Create(e.ctx, task.toConfigMap("default"), metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	return u.String()
}

// createVM creates VM default/name with uid, vmid's label and run
// strategy rs in the fake cluster, behind any Cluster's back.
func (e *env) createVM(name string, uid types.UID, vmid string, rs kubevirtv1.VirtualMachineRunStrategy) *kubevirtv1.VirtualMachine {
	e.t.Helper()
	vm, err := e.kv.KubevirtV1().VirtualMachines("default").Create(e.ctx, &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: uid, Labels: map[string]string{translate.LabelVMID: vmid}},
		Spec:       kubevirtv1.VirtualMachineSpec{RunStrategy: &rs, Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{}},
	}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return vm
}
