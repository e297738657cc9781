package kube

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"

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
	halted := kubevirtv1.RunStrategyHalted
	made, err := e.kv.KubevirtV1().VirtualMachines("default").Create(e.ctx, &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "made-elsewhere", UID: "uid-made", Labels: map[string]string{translate.LabelVMID: "4545"}},
		Spec:       kubevirtv1.VirtualMachineSpec{RunStrategy: &halted, Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	record := func(pid uint32, exit string, uid types.UID) string {
		u := translate.UPID{Node: "node-1", PID: pid, PStart: 7, StartTime: now.Unix(), Type: translate.TaskCreate, ID: "4545", User: "root@pam"}
		task := &Task{UPID: u, goal: GoalNone, namespace: made.Namespace, name: made.Name, uid: uid, cmName: taskPrefix + u.Key(), deadline: now.Add(time.Hour)}
		task.finish(exit, now)
		if _, err := e.kube.CoreV1().ConfigMaps("default").Create(e.ctx, task.toConfigMap("default"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return u.String()
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
