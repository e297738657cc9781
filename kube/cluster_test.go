package kube

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubevirt"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testutil"
	"github.com/caddy-proxmox/caddy-proxmox/kubevirtsim"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

type guestWant struct {
	vmid      int
	key, node string
}

func guestList(gs []Guest) []guestWant {
	var out []guestWant
	for _, g := range gs {
		out = append(out, guestWant{g.VMID, g.Namespace() + "/" + g.Name(), g.Node})
	}
	return out
}

var seedPVENodes = []string{seedNode1, seedNode2, seedNode3}

func seedGuests() []guestWant {
	return []guestWant{
		{100, "default/debian-12", seedNode1},
		{101, "default/win-11", seedNode2},
		{fallback("lab", "legacy-app"), "lab/legacy-app", seedNode1}, // homeNode of its UID
	}
}

func TestClusterStartAndGuests(t *testing.T) {
	e := newEnv(t, envOptions{controller: true})
	c := e.cluster(Options{}, true)
	if !c.Synced() {
		t.Fatal("Synced() = false after Start")
	}
	if got, want := guestList(c.Guests()), seedGuests(); !slices.Equal(got, want) {
		t.Fatalf("Guests() = %v, want %v", got, want)
	}
	if want := fallback("lab", "legacy-app"); want <= 101 {
		t.Fatalf("fixture: legacy-app's fallback id %d sorts before the labelled ones", want)
	}

	g := mustGuest(t, c, 100)
	if g.VMID != 100 || g.Namespace() != "default" || g.Name() != "debian-12" || g.Node != seedNode1 ||
		string(g.VM().UID) != seedDebianUID || g.PVEName() != "debian-12" || g.Template() {
		t.Fatalf("Guest(100) = vmid %d %s/%s node %s uid %s name %s template %v",
			g.VMID, g.Namespace(), g.Name(), g.Node, g.VM().UID, g.PVEName(), g.Template())
	}
	// debian-12 runs Always: the controller starts it.
	waitRunning(t, c, 100)
	if g := mustGuest(t, c, 101); g.Name() != "win-11" || g.InstanceMeta() != nil {
		t.Fatalf("Guest(101) = %s with VMI %v, want win-11 without instance", g.Name(), g.VMI())
	}
	legacy := mustGuest(t, c, fallback("lab", "legacy-app"))
	if legacy.Name() != "legacy-app" || legacy.Node != homeNodeFor(seedLegacyUID, seedPVENodes) {
		t.Fatalf("legacy-app: %s on %s", legacy.Name(), legacy.Node)
	}
	for _, id := range []int{99, 102, 5000} {
		if _, err := c.Guest(id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Guest(%d) error = %v, want ErrNotFound", id, err)
		}
	}
	if !c.VMNameTaken("default", "win-11") || c.VMNameTaken("lab", "win-11") || c.VMNameTaken("default", "nope") {
		t.Error("VMNameTaken answers wrongly")
	}
	if got := c.Namespaces(); !slices.Equal(got, []string{"default", "lab"}) {
		t.Errorf("Namespaces() = %v", got)
	}
	if c.TaskNamespace() != "default" {
		t.Errorf("TaskNamespace() = %q, want default", c.TaskNamespace())
	}
	var scs []string
	for _, sc := range c.StorageClasses() {
		scs = append(scs, sc.Name)
	}
	if !slices.Equal(scs, []string{"ceph-rbd", "local-lvm"}) {
		t.Errorf("StorageClasses() = %v", scs)
	}
	for name, want := range map[string]bool{"local-lvm": true, "ceph-rbd": true, "nfs": false, "": false, "Local-LVM": false} {
		if got := c.StorageClassExists(name); got != want {
			t.Errorf("StorageClassExists(%q) = %v, want %v", name, got, want)
		}
	}
	// A PVE name annotation and a template label are shown.
	vm := e.mustGetVM("default", "win-11")
	vm.Annotations[translate.AnnotationName] = "Windows"
	vm.Labels[translate.LabelTemplate] = "true"
	if _, err := e.kv.KubevirtV1().VirtualMachines("default").Update(e.ctx, vm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the annotation in the cache", func() (bool, string) {
		g := mustGuest(t, c, 101)
		return g.PVEName() == "Windows" && g.Template(), g.PVEName()
	})
}

func TestNamespacesOption(t *testing.T) {
	cases := []struct {
		name       string
		opts       Options
		namespaces []string
		taskNS     string
		guests     []guestWant
		serves     map[string]bool
	}{{
		name:       "all namespaces",
		namespaces: []string{"default", "lab"},
		taskNS:     "default",
		guests:     seedGuests(),
		serves:     map[string]bool{"default": true, "lab": true, "kube-system": false},
	}, {
		name:       "only lab",
		opts:       Options{Namespaces: []string{"lab"}},
		namespaces: []string{"lab"},
		taskNS:     "lab",
		guests:     seedGuests()[2:],
		serves:     map[string]bool{"default": false, "lab": true},
	}, {
		name:       "default with its own task namespace",
		opts:       Options{Namespaces: []string{"default"}, TaskNamespace: "tasks"},
		namespaces: []string{"default"},
		taskNS:     "tasks",
		guests:     seedGuests()[:2],
		serves:     map[string]bool{"default": true, "lab": false, "tasks": false},
	}, {
		name:       "both, listed",
		opts:       Options{Namespaces: []string{"lab", "default"}},
		namespaces: []string{"lab", "default"},
		taskNS:     "lab",
		guests:     seedGuests(),
		serves:     map[string]bool{"default": true, "lab": true, "other": false},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{})
			c := e.cluster(tc.opts, true)
			if got := c.Namespaces(); !slices.Equal(got, tc.namespaces) {
				t.Errorf("Namespaces() = %v, want %v", got, tc.namespaces)
			}
			if c.TaskNamespace() != tc.taskNS {
				t.Errorf("TaskNamespace() = %q, want %q", c.TaskNamespace(), tc.taskNS)
			}
			if got := guestList(c.Guests()); !slices.Equal(got, tc.guests) {
				t.Errorf("Guests() = %v, want %v", got, tc.guests)
			}
			for _, g := range seedGuests() {
				_, err := c.Guest(g.vmid)
				served := slices.Contains(tc.guests, g)
				if served != (err == nil) || (!served && !errors.Is(err, ErrNotFound)) {
					t.Errorf("Guest(%d) error = %v, served %v", g.vmid, err, served)
				}
			}
			for ns, want := range tc.serves {
				if got := c.Serves(ns); got != want {
					t.Errorf("Serves(%q) = %v, want %v", ns, got, want)
				}
				// CreateVM refuses unserved namespaces without writing.
				if want {
					continue
				}
				vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "refused"}}
				if _, err := c.CreateVM(e.ctx, vm); err == nil || err.Error() != fmt.Sprintf("namespace %q is not served", ns) {
					t.Errorf("CreateVM in %q: %v", ns, err)
				}
				if _, err := e.getVM(ns, "refused"); !apierrors.IsNotFound(err) {
					t.Errorf("CreateVM in unserved %q wrote the VM: %v", ns, err)
				}
			}
		})
	}
}

// powerStep is one lifecycle call and the state it must lead to.
type powerStep struct {
	name    string
	vmid    int
	do      func(ctx context.Context, c *Cluster, g Guest) error
	wantErr error
	// until holds once the cluster reached the expected state; prev is the
	// guest as it was before the call.
	until func(c *Cluster, prev Guest) (bool, string)
	// spec checks the VM object in the API after the call.
	spec func(t *testing.T, vm *kubevirtv1.VirtualMachine)
}

func runPowerSteps(t *testing.T, e *env, c *Cluster, steps []powerStep) {
	t.Helper()
	for _, st := range steps {
		g := mustGuest(t, c, st.vmid)
		err := st.do(e.ctx, c, g)
		if st.wantErr != nil {
			if !errors.Is(err, st.wantErr) {
				t.Fatalf("%s: error %v, want %v", st.name, err, st.wantErr)
			}
		} else if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if st.spec != nil {
			st.spec(t, e.mustGetVM(g.Namespace(), g.Name()))
		}
		if st.until != nil {
			eventually(t, st.name, func() (bool, string) { return st.until(c, g) })
		}
	}
}

func running(vmid int) func(*Cluster, Guest) (bool, string) {
	return func(c *Cluster, _ Guest) (bool, string) { return vmiRunning(c, vmid) }
}

func noInstance(vmid int) func(*Cluster, Guest) (bool, string) {
	return func(c *Cluster, _ Guest) (bool, string) {
		g, err := c.Guest(vmid)
		return err == nil && g.InstanceMeta() == nil, vmiState(c, vmid)
	}
}

func newInstance(vmid int) func(*Cluster, Guest) (bool, string) {
	return func(c *Cluster, prev Guest) (bool, string) {
		ok, state := vmiRunning(c, vmid)
		g, _ := c.Guest(vmid)
		return ok && prev.VMI() != nil && g.VMI().UID != prev.VMI().UID, state
	}
}

func paused(vmid int, want bool) func(*Cluster, Guest) (bool, string) {
	return func(c *Cluster, _ Guest) (bool, string) {
		ok, state := vmiRunning(c, vmid)
		g, _ := c.Guest(vmid)
		return ok && translate.VMIPaused(g.VMI()) == want, state
	}
}

func runStrategyIs(want kubevirtv1.VirtualMachineRunStrategy) func(*testing.T, *kubevirtv1.VirtualMachine) {
	return func(t *testing.T, vm *kubevirtv1.VirtualMachine) {
		t.Helper()
		if vm.Spec.RunStrategy == nil || *vm.Spec.RunStrategy != want || vm.Spec.Running != nil {
			t.Fatalf("%s: spec.runStrategy %v, spec.running %v; want %s and no running", vm.Name, deref(vm.Spec.RunStrategy), vm.Spec.Running, want)
		}
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestPowerVirtAPI(t *testing.T) {
	e := newEnv(t, envOptions{controller: true})
	c := e.cluster(Options{}, true)
	if !c.HasVirtAPI(e.ctx) {
		t.Fatal("HasVirtAPI = false after SetVirtAPI(true)")
	}
	waitRunning(t, c, 100)
	var resetVMI string
	steps := []powerStep{
		{name: "start win-11", vmid: 101, do: func(ctx context.Context, c *Cluster, g Guest) error { return c.StartVM(ctx, g) },
			until: running(101), spec: runStrategyIs(kubevirtv1.RunStrategyManual)},
		{name: "pause win-11", vmid: 101, do: func(ctx context.Context, c *Cluster, g Guest) error { return c.PauseVM(ctx, g) },
			until: paused(101, true)},
		{name: "unpause win-11", vmid: 101, do: func(ctx context.Context, c *Cluster, g Guest) error { return c.UnpauseVM(ctx, g) },
			until: paused(101, false)},
		{name: "reset win-11", vmid: 101, do: func(ctx context.Context, c *Cluster, g Guest) error {
			resetVMI = string(g.VMI().UID)
			return c.ResetVM(ctx, g)
		}, until: func(c *Cluster, _ Guest) (bool, string) {
			g, _ := c.Guest(101)
			n := g.VMI().Annotations[kubevirtsim.AnnotationResets]
			return n == "1" && string(g.VMI().UID) == resetVMI, "resets=" + n + " " + vmiState(c, 101)
		}},
		{name: "restart win-11", vmid: 101, do: func(ctx context.Context, c *Cluster, g Guest) error { return c.RestartVM(ctx, g) },
			until: newInstance(101)},
		{name: "stop win-11", vmid: 101, do: func(ctx context.Context, c *Cluster, g Guest) error { return c.StopVM(ctx, g, nil) },
			until: noInstance(101), spec: runStrategyIs(kubevirtv1.RunStrategyManual)},
		{name: "restart debian-12", vmid: 100, do: func(ctx context.Context, c *Cluster, g Guest) error { return c.RestartVM(ctx, g) },
			until: newInstance(100)},
		{name: "hard stop debian-12", vmid: 100, do: func(ctx context.Context, c *Cluster, g Guest) error {
			zero := int64(0)
			return c.StopVM(ctx, g, &zero)
		}, until: noInstance(100), spec: runStrategyIs(kubevirtv1.RunStrategyHalted)},
		// A Halted VM is started through Manual: virt-api would make it
		// Always, and a guest shutdown would then restart it (not PVE).
		{name: "start debian-12", vmid: 100, do: func(ctx context.Context, c *Cluster, g Guest) error { return c.StartVM(ctx, g) },
			until: running(100), spec: runStrategyIs(kubevirtv1.RunStrategyManual)},
	}
	runPowerSteps(t, e, c, steps)
}

func TestPowerRunStrategyFallback(t *testing.T) {
	on := true
	oldStyle := &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "old-style", Namespace: "default", Labels: map[string]string{translate.LabelVMID: "300"}},
		Spec: kubevirtv1.VirtualMachineSpec{Running: &on, Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
			Spec: kubevirtv1.VirtualMachineInstanceSpec{Domain: kubevirtv1.DomainSpec{}},
		}},
	}
	e := newEnv(t, envOptions{controller: true, extra: []k8sruntime.Object{oldStyle}})
	c := e.cluster(Options{}, false)
	if c.HasVirtAPI(e.ctx) {
		t.Fatal("HasVirtAPI = true after SetVirtAPI(false)")
	}
	waitRunning(t, c, 100)
	waitRunning(t, c, 300)
	waitRunning(t, c, fallback("lab", "legacy-app"))
	steps := []powerStep{
		{name: "reset needs virt-api", vmid: 100, do: func(ctx context.Context, c *Cluster, g Guest) error { return c.ResetVM(ctx, g) },
			wantErr: ErrNeedsVirtAPI},
		{name: "pause needs virt-api", vmid: 100, do: func(ctx context.Context, c *Cluster, g Guest) error { return c.PauseVM(ctx, g) },
			wantErr: ErrNeedsVirtAPI, until: paused(100, false)},
		{name: "unpause needs virt-api", vmid: 100, do: func(ctx context.Context, c *Cluster, g Guest) error { return c.UnpauseVM(ctx, g) },
			wantErr: ErrNeedsVirtAPI},
		{name: "start win-11 switches to RerunOnFailure", vmid: 101, do: func(ctx context.Context, c *Cluster, g Guest) error { return c.StartVM(ctx, g) },
			spec: runStrategyIs(kubevirtv1.RunStrategyRerunOnFailure), until: running(101)},
		// RerunOnFailure does not replace a deleted instance: Always does.
		{name: "restart win-11 deletes the instance", vmid: 101, do: func(ctx context.Context, c *Cluster, g Guest) error { return c.RestartVM(ctx, g) },
			spec: runStrategyIs(kubevirtv1.RunStrategyAlways), until: newInstance(101)},
		{name: "restart of an Always VM keeps it", vmid: 101, do: func(ctx context.Context, c *Cluster, g Guest) error { return c.RestartVM(ctx, g) },
			spec: runStrategyIs(kubevirtv1.RunStrategyAlways), until: newInstance(101)},
		{name: "stop win-11 switches to Halted", vmid: 101, do: func(ctx context.Context, c *Cluster, g Guest) error { return c.StopVM(ctx, g, nil) },
			spec: runStrategyIs(kubevirtv1.RunStrategyHalted), until: noInstance(101)},
		{name: "restart of a halted VM starts it", vmid: 101, do: func(ctx context.Context, c *Cluster, g Guest) error { return c.RestartVM(ctx, g) },
			spec: runStrategyIs(kubevirtv1.RunStrategyAlways), until: running(101)},
		{name: "restart of a RerunOnFailure VM (legacy-app)", vmid: fallback("lab", "legacy-app"), do: func(ctx context.Context, c *Cluster, g Guest) error {
			if g.InstanceMeta() == nil {
				return errors.New("legacy-app has no instance")
			}
			return c.RestartVM(ctx, g)
		}, spec: runStrategyIs(kubevirtv1.RunStrategyAlways), until: newInstance(fallback("lab", "legacy-app"))},
		{name: "stop of spec.running drops it", vmid: 300, do: func(ctx context.Context, c *Cluster, g Guest) error { return c.StopVM(ctx, g, nil) },
			spec: runStrategyIs(kubevirtv1.RunStrategyHalted), until: noInstance(300)},
		{name: "stop debian-12 (Always)", vmid: 100, do: func(ctx context.Context, c *Cluster, g Guest) error { return c.StopVM(ctx, g, nil) },
			spec: runStrategyIs(kubevirtv1.RunStrategyHalted), until: noInstance(100)},
	}
	runPowerSteps(t, e, c, steps)
}

// The run strategy patch is guarded by the VM's UID: a namesake created after
// the caller resolved the guest is never touched.
func TestSetRunStrategyRefusesRecreatedVM(t *testing.T) {
	cases := []struct {
		name string
		do   func(ctx context.Context, c *Cluster, g Guest) error
	}{
		{"start", func(ctx context.Context, c *Cluster, g Guest) error { return c.StartVM(ctx, g) }},
		{"stop", func(ctx context.Context, c *Cluster, g Guest) error { return c.StopVM(ctx, g, nil) }},
		{"restart", func(ctx context.Context, c *Cluster, g Guest) error { return c.RestartVM(ctx, g) }},
	}
	e := newEnv(t, envOptions{controller: true})
	c := e.cluster(Options{}, false)
	g := mustGuest(t, c, 101)
	if g.VMI() != nil || string(g.VM().UID) != seedWinUID {
		t.Fatalf("win-11 %s has instance %v", g.VM().UID, g.VMI())
	}
	fresh := e.recreate("default", "win-11")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do(e.ctx, c, g)
			if err == nil {
				t.Fatal("the call succeeded on a recreated VM")
			}
			var status apierrors.APIStatus
			if !errors.As(err, &status) || status.Status().Code != http.StatusUnprocessableEntity {
				t.Errorf("error %v, want the 422 of a failed JSON patch test", err)
			}
			if !strings.HasPrefix(err.Error(), "VM default/win-11 changed while being updated (retry): ") {
				t.Errorf("error %q", err)
			}
			now := e.mustGetVM("default", "win-11")
			if now.UID != fresh.UID || now.DeletionTimestamp != nil {
				t.Fatalf("namesake replaced or deleted: uid %s (want %s)", now.UID, fresh.UID)
			}
			runStrategyIs(kubevirtv1.RunStrategyManual)(t, now)
		})
	}
	// The controller has acted on every write the calls made: a start
	// that reached the namesake would have created its instance.
	vm, err := kubevirtsim.SyncBarrier(e.ctx, e.kv, "default", "win-11")
	if err != nil {
		t.Fatal(err)
	}
	if vm.UID != fresh.UID || vm.Status.Created || vm.Status.PrintableStatus != kubevirtv1.VirtualMachineStatusStopped {
		t.Errorf("namesake after the controller's reconcile: uid %s created %v status %s", vm.UID, vm.Status.Created, vm.Status.PrintableStatus)
	}
	if vmi, err := e.kv.KubevirtV1().VirtualMachineInstances("default").Get(e.ctx, "win-11", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("namesake got an instance: %v %v", vmi.GetUID(), err)
	}
}

// blindVMWatch makes every VirtualMachine watch of kv deliver nothing, so
// that only list results (and CreateVM's own cache write) reach a Cluster.
func blindVMWatch(_ kubernetes.Interface, kv kubevirt.Interface) {
	fake := kv.(*kubevirtsim.FakeKubeVirtClientset)
	fake.PrependWatchReactor("virtualmachines", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, watch.NewRaceFreeFake(), nil
	})
}

// blindVMIWatch makes every VirtualMachineInstance watch of kv deliver
// nothing, so that only list results reach a Cluster.
func blindVMIWatch(_ kubernetes.Interface, kv kubevirt.Interface) {
	fake := kv.(*kubevirtsim.FakeKubeVirtClientset)
	fake.PrependWatchReactor("virtualmachineinstances", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, watch.NewRaceFreeFake(), nil
	})
}

func TestCreateVMReadYourWrites(t *testing.T) {
	e := newEnv(t, envOptions{beforeController: blindVMWatch})
	c := e.cluster(Options{}, true)
	mk := func(name string, labels map[string]string) *kubevirtv1.VirtualMachine {
		halted := kubevirtv1.RunStrategyHalted
		return &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: labels},
			Spec: kubevirtv1.VirtualMachineSpec{RunStrategy: &halted, Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{}}}
	}

	// Control: a VM created behind the cluster's back stays invisible,
	// since the watch is blind.
	if _, err := e.kv.KubevirtV1().VirtualMachines("default").Create(e.ctx, mk("bypass", map[string]string{translate.LabelVMID: "4343"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		labels map[string]string
		vmid   int
	}{
		{"fresh", map[string]string{translate.LabelVMID: "4242"}, 4242},
		{"unlabeled", nil, fallback("default", "unlabeled")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := c.CreateVM(e.ctx, mk(tc.name, tc.labels))
			if err != nil {
				t.Fatal(err)
			}
			if out.UID == "" || out.Name != tc.name {
				t.Fatalf("CreateVM returned %s uid %q", out.Name, out.UID)
			}
			g, err := c.Guest(tc.vmid)
			if err != nil {
				t.Fatalf("Guest(%d) right after CreateVM: %v", tc.vmid, err)
			}
			if g.Name() != tc.name || g.VM().UID != out.UID {
				t.Fatalf("Guest(%d) = %s/%s uid %s", tc.vmid, g.Namespace(), g.Name(), g.VM().UID)
			}
			if !c.VMIDTaken(tc.vmid) || !c.VMNameTaken("default", tc.name) {
				t.Error("vmid or name not taken right after CreateVM")
			}
			if !slices.ContainsFunc(c.Guests(), func(g Guest) bool { return g.VMID == tc.vmid }) {
				t.Errorf("Guests() lacks %d: %s", tc.vmid, joinKeys(c.Guests()))
			}
		})
	}
	if id, ok := c.NextVMID(4242, nil); id != 4243 || !ok {
		t.Errorf("NextVMID(4242) = %d, %v; want 4243", id, ok)
	}
	if _, err := c.Guest(4343); !errors.Is(err, ErrNotFound) {
		t.Fatalf("control VM resolvable (%v): the watch was not blind, the test proves nothing", err)
	}
	// Creating a name twice fails and leaves the cache alone.
	if _, err := c.CreateVM(e.ctx, mk("fresh", nil)); !apierrors.IsAlreadyExists(err) {
		t.Errorf("second CreateVM(fresh) error = %v, want AlreadyExists", err)
	}
	if g := mustGuest(t, c, 4242); g.Name() != "fresh" {
		t.Errorf("Guest(4242) = %s", g.Name())
	}
}

func TestDeleteVM(t *testing.T) {
	e := newEnv(t, envOptions{controller: true})
	c := e.cluster(Options{}, true)
	stale := mustGuest(t, c, 101)
	fresh := e.recreate("default", "win-11")

	err := c.DeleteVM(e.ctx, stale)
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "Precondition failed: UID in precondition: "+seedWinUID) {
		t.Fatalf("DeleteVM with a stale UID: %v, want a precondition conflict", err)
	}
	now := e.mustGetVM("default", "win-11")
	if now.UID != fresh.UID || now.DeletionTimestamp != nil {
		t.Fatalf("namesake deleted: uid %s (want %s), deletionTimestamp %v", now.UID, fresh.UID, now.DeletionTimestamp)
	}

	// The namesake, once seen, is deleted for real; so is a running VM.
	eventually(t, "the namesake in the cache", func() (bool, string) {
		g, err := c.Guest(101)
		return err == nil && g.VM().UID == fresh.UID, errString(err)
	})
	waitRunning(t, c, 100)
	for _, vmid := range []int{101, 100} {
		g := mustGuest(t, c, vmid)
		if err := c.DeleteVM(e.ctx, g); err != nil {
			t.Fatalf("DeleteVM(%d): %v", vmid, err)
		}
		eventually(t, "the VM to be gone", func() (bool, string) {
			_, apiErr := e.getVM(g.Namespace(), g.Name())
			_, err := c.Guest(vmid)
			return apierrors.IsNotFound(apiErr) && errors.Is(err, ErrNotFound), errString(apiErr) + "; " + errString(err)
		})
	}
	if got := guestList(c.Guests()); !slices.Equal(got, seedGuests()[2:]) {
		t.Errorf("Guests() = %v", got)
	}
}

// Stop must return after a Start that failed to sync.
func TestStartFailureThenStop(t *testing.T) {
	e := newEnv(t, envOptions{beforeController: func(kube kubernetes.Interface, _ kubevirt.Interface) {
		kube.(*k8sfake.Clientset).PrependReactor("list", "nodes", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", errors.New("RBAC"))
		})
	}})
	c := New(e.kube, e.kv, nil, Options{SyncTimeout: 200 * time.Millisecond})
	err := c.Start(e.ctx)
	if err == nil || !strings.Contains(err.Error(), "informers did not sync") {
		t.Fatalf("Start = %v, want a sync failure", err)
	}
	stopped := make(chan struct{})
	go func() { c.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop hangs after a failed Start")
	}
}

// Stop returns on a Cluster never started, ends every goroutine Start
// started, and returns again on a stopped Cluster.
func TestStopIsIdempotent(t *testing.T) {
	e := newEnv(t, envOptions{})
	stops := func(c *Cluster, what string) {
		t.Helper()
		stopped := make(chan struct{})
		go func() { c.Stop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(5 * time.Second):
			t.Fatalf("Stop hangs on %s", what)
		}
	}
	stops(New(e.kube, e.kv, nil, Options{}), "a Cluster never started")
	before := testutil.GoroutineBaseline()
	c := e.cluster(Options{}, true)
	stops(c, "a started Cluster")
	before.Check(t, 5*time.Second)
	stops(c, "a stopped Cluster")
}
