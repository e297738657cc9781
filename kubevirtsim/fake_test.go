package kubevirtsim

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	virtv1 "kubevirt.io/api/core/v1"
)

// The fake's reactors run under the clientset's lock; the subresource
// reactor must not call back into the same clientset.
func TestFakeSubresourceCallsDoNotDeadlock(t *testing.T) {
	e := newEnv(t, testVM("man", virtv1.RunStrategyManual))
	vms := e.kv.KubevirtV1().VirtualMachines(testNS)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := vms.Start(e.ctx, "man", &virtv1.StartOptions{}); err != nil {
			t.Errorf("start: %v", err)
		}
		// No controller runs, so the start request is still queued and a
		// second start must be refused the way virt-api refuses it.
		requireStatusNoFatal(t, vms.Start(e.ctx, "man", nil), 500, "stop/start already underway")
		requireStatusNoFatal(t, vms.Stop(e.ctx, "man", nil), 409, "VM is not running")
		requireStatusNoFatal(t, vms.Restart(e.ctx, "man", nil), 409, "VM is not running")
		requireStatusNoFatal(t, e.kv.KubevirtV1().VirtualMachineInstances(testNS).Pause(e.ctx, "man", nil), 404, "not found")
		requireStatusNoFatal(t, vms.Migrate(e.ctx, "man", &virtv1.MigrateOptions{}), 404, "not found")
		requireStatusNoFatal(t, vms.AddVolume(e.ctx, "man", &virtv1.AddVolumeOptions{Name: "x"}), 404, "does not simulate")
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("subresource calls through the fake clientset deadlocked")
	}
	vm := e.getVM("man")
	if len(vm.Status.StateChangeRequests) != 1 || vm.Status.StateChangeRequests[0].Action != virtv1.StartRequest {
		t.Fatalf("start request not recorded: %s", describeVM(vm))
	}
	// The fake recorded the subresource actions like the generated client sends them.
	var puts []string
	for _, a := range e.kv.(*FakeKubeVirtClientset).Actions() {
		if a.GetVerb() == "put" {
			puts = append(puts, a.GetResource().Resource+"/"+a.GetSubresource())
		}
	}
	if len(puts) != 7 || puts[0] != "virtualmachines/start" || puts[4] != "virtualmachineinstances/pause" {
		t.Errorf("recorded put actions = %v", puts)
	}
}

func requireStatusNoFatal(t *testing.T, err error, code int32, msg string) {
	t.Helper()
	st, ok := err.(apierrors.APIStatus)
	if !ok || st.Status().Code != code || !strings.Contains(st.Status().Message, msg) {
		t.Errorf("expected %d %q, got %v", code, msg, err)
	}
}

// Informers on the fakes see changes made through the clientset, by the
// subresource reactors and by the controller.
func TestFakeInformersSeeChanges(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()

	factory := informers.NewSharedInformerFactory(e.k8s, 0)
	nodeInf := factory.Core().V1().Nodes().Informer()
	vmInf := NewVirtualMachineInformer(e.kv, metav1.NamespaceAll, 0)
	vmiInf := NewVirtualMachineInstanceInformer(e.kv, testNS, 0)

	type event struct{ kind, name, detail string }
	var mu sync.Mutex
	var events []event
	record := func(kind string, detail func(any) string) cache.ResourceEventHandlerFuncs {
		add := func(verb string) func(any) {
			return func(obj any) {
				if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = tomb.Obj
				}
				m := obj.(metav1.Object)
				mu.Lock()
				events = append(events, event{kind + " " + verb, m.GetName(), detail(obj)})
				mu.Unlock()
			}
		}
		return cache.ResourceEventHandlerFuncs{AddFunc: add("add"), UpdateFunc: func(_, o any) { add("update")(o) }, DeleteFunc: add("delete")}
	}
	vmDetail := func(o any) string {
		vm := o.(*virtv1.VirtualMachine)
		if vm.Spec.RunStrategy == nil {
			return ""
		}
		return string(*vm.Spec.RunStrategy) + "/" + string(vm.Status.PrintableStatus)
	}
	vmiDetail := func(o any) string { return string(o.(*virtv1.VirtualMachineInstance).Status.Phase) }
	for inf, h := range map[cache.SharedIndexInformer]cache.ResourceEventHandlerFuncs{
		nodeInf: record("node", func(any) string { return "" }),
		vmInf:   record("vm", vmDetail),
		vmiInf:  record("vmi", vmiDetail),
	} {
		if _, err := inf.AddEventHandler(h); err != nil {
			t.Fatal(err)
		}
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { vmInf.RunWithContext(ctx) })
	wg.Go(func() { vmiInf.RunWithContext(ctx) })
	if !cache.WaitForCacheSync(ctx.Done(), nodeInf.HasSynced, vmInf.HasSynced, vmiInf.HasSynced) {
		t.Fatal("caches did not sync")
	}
	has := func(kind, name, detail string) func() (bool, string) {
		return func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			for _, ev := range events {
				if ev.kind == kind && ev.name == name && (detail == "" || ev.detail == detail) {
					return true, ""
				}
			}
			return false, ""
		}
	}
	eventually(t, "initial nodes listed", has("node add", "node-a", ""))

	// Plain client writes.
	if _, err := e.k8s.CoreV1().Nodes().Create(ctx, testNode("node-z"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "node add event", has("node add", "node-z", ""))
	e.createVM(testVM("web", virtv1.RunStrategyHalted))
	eventually(t, "vm add event", has("vm add", "web", "Halted/"))

	// A write made by the subresource reactor (start patches runStrategy).
	if err := e.kv.KubevirtV1().VirtualMachines(testNS).Start(ctx, "web", nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "vm update from start", has("vm update", "web", "Always/"))

	// Writes made by the controller.
	e.run(Options{})
	eventually(t, "vmi add by controller", has("vmi add", "web", string(virtv1.Pending)))
	eventually(t, "vmi running", has("vmi update", "web", string(virtv1.Running)))
	eventually(t, "vm status by controller", has("vm update", "web", "Always/Running"))
	if err := e.kv.KubevirtV1().VirtualMachines(testNS).Stop(ctx, "web", nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "vmi delete", has("vmi delete", "web", string(virtv1.Succeeded)))
	eventually(t, "vm stopped", has("vm update", "web", "Halted/Stopped"))
}

func TestFakeAPIServerSemantics(t *testing.T) {
	e := newEnv(t)
	vms := e.kv.KubevirtV1().VirtualMachines(testNS)

	// Create fills in server-side metadata and drops status (status subresource).
	in := testVM("web", virtv1.RunStrategyHalted)
	in.Status.PrintableStatus = virtv1.VirtualMachineStatusRunning
	vm := e.createVM(in)
	if vm.UID == "" || vm.ResourceVersion == "" || vm.Generation != 1 || vm.CreationTimestamp.IsZero() || vm.Status.PrintableStatus != "" {
		t.Fatalf("created VM metadata/status: uid=%q rv=%q gen=%d ts=%v status=%+v", vm.UID, vm.ResourceVersion, vm.Generation, vm.CreationTimestamp, vm.Status)
	}
	if _, err := vms.Create(e.ctx, testVM("web", virtv1.RunStrategyHalted), metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Errorf("duplicate create: %v", err)
	}
	gen := testVM("", virtv1.RunStrategyHalted)
	gen.GenerateName = "vm-"
	if got, err := vms.Create(e.ctx, gen, metav1.CreateOptions{}); err != nil || len(got.Name) != len("vm-")+5 {
		t.Errorf("generateName: %v %v", got, err)
	}

	// Main resource updates ignore status and bump generation on spec changes.
	upd := vm.DeepCopy()
	upd.Spec.RunStrategy = ptr(virtv1.RunStrategyManual)
	upd.Status.PrintableStatus = virtv1.VirtualMachineStatusRunning
	v2, err := vms.Update(e.ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v2.Generation != 2 || v2.Status.PrintableStatus != "" || *v2.Spec.RunStrategy != virtv1.RunStrategyManual || v2.ResourceVersion == vm.ResourceVersion {
		t.Fatalf("update: gen=%d status=%q rv %s->%s", v2.Generation, v2.Status.PrintableStatus, vm.ResourceVersion, v2.ResourceVersion)
	}
	// A stale resourceVersion conflicts.
	if _, err := vms.Update(e.ctx, upd, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("stale update: %v", err)
	}
	// Status updates only touch status and keep generation.
	st := v2.DeepCopy()
	st.Status.PrintableStatus = virtv1.VirtualMachineStatusStopped
	st.Spec.RunStrategy = ptr(virtv1.RunStrategyAlways)
	v3, err := vms.UpdateStatus(e.ctx, st, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v3.Status.PrintableStatus != virtv1.VirtualMachineStatusStopped || *v3.Spec.RunStrategy != virtv1.RunStrategyManual || v3.Generation != 2 {
		t.Fatalf("status update: %s gen=%d", describeVM(v3), v3.Generation)
	}
	// A no-op update does not change the resourceVersion.
	if v4, err := vms.Update(e.ctx, v3, metav1.UpdateOptions{}); err != nil || v4.ResourceVersion != v3.ResourceVersion {
		t.Errorf("no-op update: rv %s -> %v (%v)", v3.ResourceVersion, v4, err)
	}

	// JSON patch test failures and strategic merge patches are refused.
	_, err = vms.Patch(e.ctx, "web", types.JSONPatchType, []byte(`[{"op":"test","path":"/spec/runStrategy","value":"Always"},{"op":"replace","path":"/spec/runStrategy","value":"Halted"}]`), metav1.PatchOptions{})
	requireStatus(t, err, 422, "the server rejected our request due to an error in our request")
	_, err = vms.Patch(e.ctx, "web", types.StrategicMergePatchType, []byte(`{}`), metav1.PatchOptions{})
	requireStatus(t, err, 415, "unknown format")
	patched, err := vms.Patch(e.ctx, "web", types.MergePatchType, []byte(`{"metadata":{"labels":{"a":"b"}},"status":{"printableStatus":"Running"}}`), metav1.PatchOptions{})
	if err != nil || patched.Labels["a"] != "b" || patched.Status.PrintableStatus != virtv1.VirtualMachineStatusStopped || patched.Generation != 2 {
		t.Fatalf("merge patch: %v %v", patched, err)
	}

	// Finalizers delay deletion until they are removed; preconditions hold.
	fin := patched.DeepCopy()
	fin.Finalizers = []string{"example.com/hold"}
	if _, err = vms.Update(e.ctx, fin, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wrong := types.UID("nope")
	if err := vms.Delete(e.ctx, "web", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &wrong}}); !apierrors.IsConflict(err) {
		t.Fatalf("delete with wrong UID precondition: %v", err)
	}
	if err := vms.Delete(e.ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	held := e.getVM("web")
	if held.DeletionTimestamp == nil {
		t.Fatal("a VM with finalizers must stay with a deletionTimestamp")
	}
	held.Finalizers = nil
	if _, err := vms.Update(e.ctx, held, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := vms.Get(e.ctx, "web", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("VM should be gone after its last finalizer: %v", err)
	}

	// Field and label selectors.
	e.createVM(testVM("a", virtv1.RunStrategyHalted))
	b := testVM("b", virtv1.RunStrategyHalted)
	b.Labels = map[string]string{"tier": "db"}
	e.createVM(b)
	list, err := vms.List(e.ctx, metav1.ListOptions{FieldSelector: "metadata.name=a"})
	if err != nil || len(list.Items) != 1 || list.Items[0].Name != "a" {
		t.Errorf("field selector list: %v %v", list, err)
	}
	list, err = vms.List(e.ctx, metav1.ListOptions{LabelSelector: "tier=db"})
	if err != nil || len(list.Items) != 1 || list.Items[0].Name != "b" {
		t.Errorf("label selector list: %v %v", list, err)
	}
	if _, err := vms.List(e.ctx, metav1.ListOptions{FieldSelector: "status.printableStatus=Running"}); !apierrors.IsBadRequest(err) {
		t.Errorf("unsupported field selector: %v", err)
	}
}

// A watch started from an object's resourceVersion delivers exactly the
// later changes, as on a real API server.
func TestFakeWatchFromResourceVersion(t *testing.T) {
	e := newEnv(t)
	vms := e.kv.KubevirtV1().VirtualMachines(testNS)
	vm := e.createVM(testVM("web", virtv1.RunStrategyHalted))
	other := e.createVM(testVM("other", virtv1.RunStrategyHalted))

	w, err := vms.Watch(e.ctx, metav1.ListOptions{ResourceVersion: vm.ResourceVersion, FieldSelector: "metadata.name=web"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	upd := vm.DeepCopy()
	upd.Labels = map[string]string{"x": "1"}
	if _, err := vms.Update(e.ctx, upd, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	next := func(what string) *virtv1.VirtualMachine {
		t.Helper()
		select {
		case ev := <-w.ResultChan():
			got, _ := ev.Object.(*virtv1.VirtualMachine)
			if ev.Type != watch.Modified || got == nil {
				t.Fatalf("%s: event %s %v", what, ev.Type, ev.Object)
			}
			return got
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no watch event", what)
			return nil
		}
	}
	if got := next("the update of web"); got.Name != "web" || got.Labels["x"] != "1" {
		t.Fatalf("first event: %s %v, want the update of web", got.Name, got.Labels)
	}
	// Nothing else comes: after a change of other (not selected) and one
	// more of web, the next event is web's.
	other.Labels = map[string]string{"x": "1"}
	if _, err := vms.Update(e.ctx, other, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	upd, err = vms.Get(e.ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	upd.Labels["x"] = "2"
	if _, err := vms.Update(e.ctx, upd, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := next("the second update of web"); got.Name != "web" || got.Labels["x"] != "2" {
		t.Fatalf("event after the first: %s %v, want the second update of web", got.Name, got.Labels)
	}
}

func TestNewFakeClientsSortsObjects(t *testing.T) {
	k8s, kv := NewFakeClients(testNode("n1"), testVM("web", virtv1.RunStrategyHalted),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "lab"}})
	ctx := t.Context()
	if _, err := k8s.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{}); err != nil {
		t.Error(err)
	}
	if _, err := k8s.CoreV1().Namespaces().Get(ctx, "lab", metav1.GetOptions{}); err != nil {
		t.Error(err)
	}
	vm, err := kv.KubevirtV1().VirtualMachines(testNS).Get(ctx, "web", metav1.GetOptions{})
	if err != nil || vm.UID == "" || vm.ResourceVersion == "" {
		t.Fatalf("seeded VM: %v %v", vm, err)
	}
	// Kubernetes objects created later get server-side metadata too.
	ns, err := k8s.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "tmp-"}}, metav1.CreateOptions{})
	if err != nil || ns.UID == "" || ns.CreationTimestamp.IsZero() || len(ns.Name) != len("tmp-")+5 {
		t.Fatalf("created namespace: %+v %v", ns, err)
	}
}

// The plain tracker panics once a watcher has 100 undelivered events; the
// fake must survive a consumer that stops reading.
func TestFakeWatchSurvivesSlowConsumer(t *testing.T) {
	e := newEnv(t)
	vms := e.kv.KubevirtV1().VirtualMachines(testNS)
	w, err := vms.Watch(e.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vm := e.createVM(testVM("web", virtv1.RunStrategyHalted))
	for i := range 250 {
		vm.Labels = map[string]string{"n": strconv.Itoa(i)}
		if vm, err = vms.Update(e.ctx, vm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// All events are still delivered, in order.
	for i := -1; i < 250; i++ {
		select {
		case ev := <-w.ResultChan():
			got := ev.Object.(*virtv1.VirtualMachine)
			if want := strconv.Itoa(i); i >= 0 && got.Labels["n"] != want {
				t.Fatalf("event %d has label %q", i, got.Labels["n"])
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("event %d missing", i)
		}
	}
	w.Stop()
	eventually(t, "result channel closed", func() (bool, string) {
		select {
		case _, ok := <-w.ResultChan():
			return !ok, "open"
		default:
			return false, "open"
		}
	})
}

// Many objects and a busy controller: watches without a resourceVersion
// start with more than the tracker's 100-event buffer, and writes never
// overflow a watcher.
func TestFakeManyObjects(t *testing.T) {
	const n = 400
	k8s, kv := NewFakeClients(append(Seed(), BulkVMs("default", n, 1000, []string{"kv-node-1.lab.internal"})...)...)
	e := &env{t: t, ctx: t.Context(), k8s: k8s, kv: kv}
	w, err := kv.KubevirtV1().VirtualMachines(testNS).Watch(e.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	e.run(Options{})
	seen := map[string]bool{}
	timeout := time.After(waitTimeout)
	for len(seen) < n+2 { // the bulk VMs plus debian-12 and win-11
		select {
		case ev := <-w.ResultChan():
			if ev.Type == watch.Added {
				seen[ev.Object.(*virtv1.VirtualMachine).Name] = true
			}
		case <-timeout:
			t.Fatalf("saw %d ADDED events", len(seen))
		}
	}
	// Stop reading: the controller keeps writing without a panic.
	eventually(t, "every VM carries the controller's finalizer", func() (bool, string) {
		list, err := kv.KubevirtV1().VirtualMachines(testNS).List(e.ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		missing := 0
		for _, vm := range list.Items {
			if len(vm.Finalizers) == 0 || vm.Status.PrintableStatus == "" {
				missing++
			}
		}
		return missing == 0, strconv.Itoa(missing) + " VMs not reconciled"
	})
	nodes, err := k8s.CoreV1().Nodes().Watch(e.ctx, metav1.ListOptions{FieldSelector: "metadata.name=kv-node-2.lab.internal"})
	if err != nil {
		t.Fatal(err)
	}
	defer nodes.Stop()
	select {
	case ev := <-nodes.ResultChan():
		if ev.Type != watch.Added || ev.Object.(*corev1.Node).Name != "kv-node-2.lab.internal" {
			t.Errorf("node watch: %s %v", ev.Type, ev.Object)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("node watch delivered nothing")
	}
}
