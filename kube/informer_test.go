package kube

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// TestPutNeverGoesBack: put stores what a write answered, as client-go's
// mutation cache would, but never an object older than the cached one,
// never an update of an object the cache no longer has (its deletion came
// first), and tells the store's listener of what it stores.
func TestPutNeverGoesBack(t *testing.T) {
	// The watch delivers nothing: the store holds what was listed and what
	// put puts.
	listed := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", ResourceVersion: "10"}}
	lw := listWatchFuncs{
		list: func(context.Context, string, metav1.ListOptions) (runtime.Object, error) {
			return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}, Items: []corev1.ConfigMap{*listed}}, nil
		},
		watch: func(context.Context, string, metav1.ListOptions) (watch.Interface, error) {
			return watch.NewFake(), nil
		},
	}
	var heard []string
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := newStore(ctx, nil, &corev1.ConfigMap{}, lw, 0, nil, stripMeta, func(old, new any) {
		o, _ := old.(*corev1.ConfigMap)
		n, _ := new.(*corev1.ConfigMap)
		switch {
		case o == nil && n != nil:
			heard = append(heard, "add "+n.Name+"@"+n.ResourceVersion)
		case n != nil:
			heard = append(heard, "update "+n.Name+"@"+n.ResourceVersion)
		}
	})
	s.run(ctx)
	for !s.hasSynced() {
		time.Sleep(time.Millisecond)
	}
	heard = nil
	rv := func(name string) string {
		if o := cached[corev1.ConfigMap](s, "ns", name); o != nil {
			return o.ResourceVersion
		}
		return "absent"
	}
	cm := func(name, rv string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: rv,
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "x"}}}}
	}

	s.put(cm("a", "12"), false)
	if rv("a") != "12" {
		t.Errorf("an update's answer: cached at %s, want 12", rv("a"))
	}
	if o := cached[corev1.ConfigMap](s, "ns", "a"); len(o.ManagedFields) != 0 {
		t.Error("put skipped the informer's transform")
	}
	s.put(cm("a", "11"), false)
	if rv("a") != "12" {
		t.Errorf("an answer older than the cache: cached at %s, want 12 kept", rv("a"))
	}
	s.put(cm("a", "12"), false)
	s.put(cm("b", "13"), false)
	if rv("b") != "absent" {
		t.Errorf("an update of an object not cached (deleted meanwhile) was stored at %s", rv("b"))
	}
	s.put(cm("c", "14"), true)
	if rv("c") != "14" {
		t.Errorf("a create's answer: cached at %s, want 14", rv("c"))
	}
	want := []string{"update a@12", "update a@12", "add c@14"}
	if len(heard) != len(want) {
		t.Fatalf("the listener heard %v, want %v", heard, want)
	}
	for i := range want {
		if heard[i] != want[i] {
			t.Fatalf("the listener heard %v, want %v", heard, want)
		}
	}
}

// TestPutKeepsNewerWatchEvent: the answer to a write, put into the cache
// for read-your-writes, must not replace a newer version the watch stored
// first (a clone's VM: created, then given status Stopped by the
// controller before the create call returned), else the cache shows the
// older object until the next change, which may never come.
func TestPutKeepsNewerWatchEvent(t *testing.T) {
	idx := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, cache.Indexers{})
	s := &store{byNS: map[string]*informer{metav1.NamespaceAll: {indexer: idx}}}
	vm := func(rv string, status kubevirtv1.VirtualMachinePrintableStatus) *kubevirtv1.VirtualMachine {
		return &kubevirtv1.VirtualMachine{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "clone", ResourceVersion: rv},
			Status:     kubevirtv1.VirtualMachineStatus{PrintableStatus: status},
		}
	}
	status := func() kubevirtv1.VirtualMachinePrintableStatus {
		return s.get("default", "clone").(*kubevirtv1.VirtualMachine).Status.PrintableStatus
	}

	s.put(vm("23", ""), true) // nothing cached yet: the answer to the create is stored
	if got := status(); got != "" {
		t.Fatalf("after first put: %q", got)
	}
	_ = idx.Update(vm("31", kubevirtv1.VirtualMachineStatusStopped)) // the watch
	s.put(vm("23", ""), true)                                        // the late answer
	if got := status(); got != kubevirtv1.VirtualMachineStatusStopped {
		t.Fatalf("a late answer replaced the newer cached VM: status %q", got)
	}
	s.put(vm("40", kubevirtv1.VirtualMachineStatusRunning), false) // a newer answer still wins
	if got := status(); got != kubevirtv1.VirtualMachineStatusRunning {
		t.Fatalf("a newer answer was dropped: status %q", got)
	}
	// Versions that are not numbers cannot be ordered: the answer wins.
	_ = idx.Update(vm("x", kubevirtv1.VirtualMachineStatusStopped))
	s.put(vm("y", kubevirtv1.VirtualMachineStatusStarting), false)
	if got := status(); got != kubevirtv1.VirtualMachineStatusStarting {
		t.Fatalf("opaque versions: status %q", got)
	}
}

// TestPutNoGhostAfterDelete: an answer read before its object was deleted
// (a create's, or a live lookup's) and put after the delete event does not
// bring the object back, whether the informer or the plugin's own delete
// (drop) removed it; a new object of that name (another UID) is stored.
func TestPutNoGhostAfterDelete(t *testing.T) {
	cm := func(name, uid, rv string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(uid), ResourceVersion: rv}}
	}
	events := watch.NewFake()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := newStore(ctx, nil, &corev1.ConfigMap{}, listWatchFuncs{
		list: func(context.Context, string, metav1.ListOptions) (runtime.Object, error) {
			return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}, Items: []corev1.ConfigMap{*cm("a", "uid-a", "10")}}, nil
		},
		watch: func(context.Context, string, metav1.ListOptions) (watch.Interface, error) { return events, nil },
	}, 0, nil, nil, nil)
	s.run(ctx)
	waitFor(t, "sync", s.hasSynced)
	// Anywhere: reads by key go through the overlay, lists through the
	// informer's store.
	has := func(name string) bool {
		_, stored, _ := s.informerFor("ns").GetStore().GetByKey("ns/" + name)
		return stored || cached[corev1.ConfigMap](s, "ns", name) != nil
	}

	events.Delete(cm("a", "uid-a", "11"))
	waitFor(t, "the delete event", func() bool { return !has("a") })
	s.put(cm("a", "uid-a", "10"), true)
	if has("a") {
		t.Error("an answer read before the informer's delete brought the object back")
	}

	s.put(cm("b", "uid-b", "12"), true)
	s.drop(cm("b", "uid-b", "12"))
	s.put(cm("b", "uid-b", "12"), true)
	if has("b") {
		t.Error("an answer read before the plugin's own delete brought the object back")
	}

	s.put(cm("a", "uid-a2", "13"), true)
	if !has("a") {
		t.Error("a new object of a deleted one's name was refused")
	}
	if s.deletedLately("") {
		t.Error("an object without a UID counts as deleted")
	}
}
