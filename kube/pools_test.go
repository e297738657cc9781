package kube

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/caddy-proxmox/caddy-proxmox/kubevirtsim"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// poolCluster starts a Cluster with a CDI client on the seed plus objs.
func poolCluster(t *testing.T, opts Options, objs ...k8sruntime.Object) *Cluster {
	t.Helper()
	checkGoroutines(t)
	kc, kv, cdi := kubevirtsim.NewFakeClientsWithCDI(append(kubevirtsim.Seed(), objs...)...)
	opts.CDI = cdi
	c := New(kc, kv, nil, opts)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

func namespaceObj(name string, managed bool) *corev1.Namespace {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}}
	if managed {
		ns.Labels = map[string]string{translate.LabelPool: "true"}
	}
	return ns
}

func claim(ns, name string, owner *metav1.OwnerReference) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	if owner != nil {
		pvc.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	return pvc
}

func TestPoolWrites(t *testing.T) {
	ctrl := true
	goneVM := &metav1.OwnerReference{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: "gone", UID: "0000-gone", Controller: &ctrl}
	withComment := namespaceObj("with-vm", true)
	withComment.Annotations = map[string]string{translate.AnnotationPoolComment: "old comment"}
	c := poolCluster(t, Options{},
		namespaceObj("made", true),
		namespaceObj("plain", false),
		namespaceObj("with-claim", true), claim("with-claim", "data", nil),
		namespaceObj("with-dv", true), &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Name: "disk", Namespace: "with-dv"}},
		namespaceObj("orphans", true), claim("orphans", "vm-gone-disk-0", goneVM),
		withComment, &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "guest", Namespace: "with-vm"}},
	)
	ctx := context.Background()
	if !c.ServesAll() {
		t.Fatal("ServesAll without a namespace list")
	}

	// A namespace that earlier versions made for a pool goes once empty.
	if err := c.DeletePool(ctx, "made"); err != nil {
		t.Fatal(err)
	}
	if c.Serves("made") {
		t.Fatal("deleted pool still served")
	}
	if p, ok := c.NamespacePool("with-vm"); !ok || !p.Managed || p.Comment != "old comment" {
		t.Fatalf("NamespacePool(with-vm) = %+v %v", p, ok)
	}

	// Refusals.
	if err := c.DeletePool(ctx, "plain"); !errors.Is(err, ErrPoolNotManaged) {
		t.Fatalf("unlabelled namespace: %v", err)
	}
	if err := c.DeletePool(ctx, c.TaskNamespace()); !errors.Is(err, ErrPoolHoldsTasks) {
		t.Fatalf("task namespace: %v", err)
	}
	var left *PoolNotEmptyError
	if err := c.DeletePool(ctx, "with-claim"); !errors.As(err, &left) || left.Kind != "PersistentVolumeClaim" || left.Name != "data" || left.Going {
		t.Fatalf("namespace with a claim: %v", err)
	}
	if err := c.DeletePool(ctx, "with-vm"); !errors.As(err, &left) || left.Kind != "VirtualMachine" || left.Name != "guest" || left.Going {
		t.Fatalf("namespace with a VM: %v", err)
	}
	if err := c.DeletePool(ctx, "with-dv"); !errors.As(err, &left) || left.Kind != "DataVolume" || left.Going {
		t.Fatalf("namespace with a DataVolume: %v", err)
	}
	if _, err := c.own.kube.CoreV1().Namespaces().Get(ctx, "with-claim", metav1.GetOptions{}); err != nil {
		t.Fatalf("refused delete removed the namespace: %v", err)
	}

	// A claim whose VM is gone is going: waited for, and refused if it
	// stays (no garbage collector here) ...
	defer func(d time.Duration) { poolDrainTimeout = d }(poolDrainTimeout)
	poolDrainTimeout = 300 * time.Millisecond
	if err := c.DeletePool(ctx, "orphans"); !errors.As(err, &left) || !left.Going {
		t.Fatalf("namespace with an orphaned claim: %v", err)
	}
	// ... and the delete goes ahead once it is gone.
	poolDrainTimeout = 5 * time.Second
	go func() {
		time.Sleep(200 * time.Millisecond)
		_ = c.own.kube.CoreV1().PersistentVolumeClaims("orphans").Delete(ctx, "vm-gone-disk-0", metav1.DeleteOptions{})
	}()
	if err := c.DeletePool(ctx, "orphans"); err != nil {
		t.Fatalf("after the orphan went: %v", err)
	}
}

func TestPoolWritesWithFixedNamespaces(t *testing.T) {
	c := poolCluster(t, Options{Namespaces: []string{"lab"}})
	ctx := context.Background()
	if c.ServesAll() {
		t.Fatal("ServesAll with a namespace list")
	}
	if err := c.DeletePool(ctx, "lab"); !errors.Is(err, ErrPoolsFixed) {
		t.Errorf("delete: %v, want ErrPoolsFixed", err)
	}
	if p, ok := c.NamespacePool("lab"); !ok || p.Comment != "" || p.Managed {
		t.Fatalf("NamespacePool(lab) = %+v %v", p, ok)
	}
	if _, ok := c.NamespacePool("default"); ok {
		t.Fatal("unserved namespace is a pool")
	}
	// Records live in the task namespace (the first served one) whatever
	// namespaces are served.
	if err := c.CreatePoolRecord(ctx, translate.PoolRecord{ID: "Team/x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.own.kube.CoreV1().ConfigMaps("lab").Get(ctx, translate.PoolRecordName("Team/x"), metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestPoolRecords: a record reads back at once after each write (no
// watch event needed), an update applies its change to what the apiserver
// holds (also after another writer changed it), a change that changes
// nothing writes nothing, and a ConfigMap that is no valid record is
// ignored.
func TestPoolRecords(t *testing.T) {
	bogus := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "pve-pool-bogus", Namespace: "default", Labels: map[string]string{translate.LabelPoolRecord: "true"}},
		Data: map[string]string{"poolid": "elsewhere"}}
	c := poolCluster(t, Options{}, bogus)
	ctx := context.Background()
	if err := c.CreatePoolRecord(ctx, translate.PoolRecord{ID: "team/dev", Comment: "first"}); err != nil {
		t.Fatal(err)
	}
	if r, ok := c.PoolRecord("team/dev"); !ok || r.Comment != "first" {
		t.Fatalf("PoolRecord right after create: %+v %v", r, ok)
	}
	if err := c.CreatePoolRecord(ctx, translate.PoolRecord{ID: "team/dev"}); !IsAlreadyExists(err) {
		t.Fatalf("second create: %v", err)
	}
	// Another writer adds a storage behind the cache's back: an update
	// still keeps it.
	cms := c.own.kube.CoreV1().ConfigMaps("default")
	name := translate.PoolRecordName("team/dev")
	cm, err := cms.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["storage"] = "nfs"
	cm.ResourceVersion = "2"
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the other write cached", func() (bool, string) {
		r, _ := c.PoolRecord("team/dev")
		return r.HasStorage("nfs"), fmt.Sprint(r)
	})
	if err := c.UpdatePoolRecord(ctx, "team/dev", func(r *translate.PoolRecord) bool {
		r.SetStorage("local", true)
		r.Comment = "second"
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if r, _ := c.PoolRecord("team/dev"); r.Comment != "second" || !slices.Equal(r.Storage, []string{"local", "nfs"}) {
		t.Fatalf("after update: %+v", r)
	}
	// A pool without a record (a namespace's) gets one.
	if err := c.UpdatePoolRecord(ctx, "lab", func(r *translate.PoolRecord) bool { r.Comment = "lab's"; return true }); err != nil {
		t.Fatal(err)
	}
	if r, ok := c.PoolRecord("lab"); !ok || r.Comment != "lab's" {
		t.Fatalf("record made by update: %+v %v", r, ok)
	}
	calls := 0
	if err := c.UpdatePoolRecord(ctx, "nothing", func(r *translate.PoolRecord) bool { calls++; return false }); err != nil || calls != 1 {
		t.Fatalf("no-op update: %v, %d calls", err, calls)
	}
	if _, ok := c.PoolRecord("nothing"); ok {
		t.Fatal("a no-op update made a record")
	}
	var ids []string
	for _, r := range c.PoolRecords() {
		ids = append(ids, r.ID)
	}
	if !slices.Equal(ids, []string{"lab", "team/dev"}) {
		t.Fatalf("PoolRecords = %v (the bogus record must be ignored)", ids)
	}
	if err := c.DeletePoolRecord(ctx, "team/dev"); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.PoolRecord("team/dev"); ok {
		t.Fatal("deleted record still read")
	}
	if err := c.DeletePoolRecord(ctx, "team/dev"); !IsNotFound(err) {
		t.Fatalf("second delete: %v", err)
	}
}

// TestSetGuestPool: the annotation is set, emptied and removed on the VM
// as read; a VM changed since it was read is written when its pool is
// still the one read, and not when that changed.
func TestSetGuestPool(t *testing.T) {
	c := poolCluster(t, Options{})
	ctx := context.Background()
	g := mustGuest(t, c, 100)
	if p, set := g.PoolAnnotation(); set {
		t.Fatalf("seed VM has pool %q", p)
	}
	for _, want := range []*string{ptr.To("team/dev"), ptr.To(""), nil} {
		if err := c.SetGuestPool(ctx, g, want); err != nil {
			t.Fatal(err)
		}
		g = mustGuest(t, c, 100)
		p, set := g.PoolAnnotation()
		if want == nil && set || want != nil && (!set || p != *want) {
			t.Fatalf("after SetGuestPool(%v): %q %v", want, p, set)
		}
	}
	if err := c.SetGuestPool(ctx, g, nil); err != nil {
		t.Fatalf("removing an absent annotation: %v", err)
	}
	// A VM without annotations, once with some and then none again (an
	// empty map, which its JSON does not hold).
	bare := mustGuest(t, c, fallback("lab", "legacy-app"))
	for _, want := range []*string{ptr.To("x"), nil, ptr.To("")} {
		if err := c.SetGuestPool(ctx, bare, want); err != nil {
			t.Fatalf("legacy-app, SetGuestPool(%v): %v", want, err)
		}
		bare = mustGuest(t, c, bare.VMID)
	}
	// Another write (a controller's) since the read: the pool is still
	// what was read, so it is written.
	vm, err := c.own.kv.KubevirtV1().VirtualMachines(g.Namespace()).Get(ctx, g.Name(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vm.Labels["touched"] = "yes"
	if _, err := c.own.kv.KubevirtV1().VirtualMachines(g.Namespace()).Update(ctx, vm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	stale := g
	if err := c.SetGuestPool(ctx, g, ptr.To("a")); err != nil {
		t.Fatal(err)
	}
	if err := c.SetGuestPool(ctx, stale, ptr.To("b")); !errors.Is(err, ErrModified) {
		t.Fatalf("write on a stale read: %v", err)
	}
	// What the apiserver holds: the cache may briefly show the controller's
	// earlier write after ours (an informer applies watch events as they
	// come; see the issue noted on read-your-writes).
	got, err := c.own.kv.KubevirtV1().VirtualMachines(g.Namespace()).Get(ctx, g.Name(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p := got.Annotations[translate.AnnotationPool]; p != "a" {
		t.Fatalf("stale write landed: %q", p)
	}
}
