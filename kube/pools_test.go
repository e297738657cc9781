package kube

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
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
	c := poolCluster(t, Options{},
		namespaceObj("plain", false),
		namespaceObj("with-claim", true), claim("with-claim", "data", nil),
		namespaceObj("with-dv", true), &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Name: "disk", Namespace: "with-dv"}},
		namespaceObj("orphans", true), claim("orphans", "vm-gone-disk-0", goneVM),
		namespaceObj("with-vm", true), &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "guest", Namespace: "with-vm"}},
	)
	ctx := context.Background()
	if !c.ServesAll() {
		t.Fatal("ServesAll without a namespace list")
	}

	// Created and commented: read back at once, before any watch event.
	if err := c.CreatePool(ctx, "made", "first"); err != nil {
		t.Fatal(err)
	}
	if p, ok := c.Pool("made"); !ok || p.Comment != "first" || !p.Managed {
		t.Fatalf("Pool(made) = %+v %v", p, ok)
	}
	if err := c.SetPoolComment(ctx, "made", "second"); err != nil {
		t.Fatal(err)
	}
	if p, _ := c.Pool("made"); p.Comment != "second" {
		t.Fatalf("comment %q", p.Comment)
	}
	if err := c.SetPoolComment(ctx, "made", ""); err != nil {
		t.Fatal(err)
	}
	if p, _ := c.Pool("made"); p.Comment != "" {
		t.Fatalf("comment %q after removing it", p.Comment)
	}
	ns, err := c.own.kube.CoreV1().Namespaces().Get(ctx, "made", metav1.GetOptions{})
	if err != nil || ns.Labels[translate.LabelPool] != "true" {
		t.Fatalf("namespace %v %v", ns, err)
	}
	if _, has := ns.Annotations[translate.AnnotationPoolComment]; has {
		t.Fatalf("removed comment still annotated: %v", ns.Annotations)
	}
	if err := c.DeletePool(ctx, "made"); err != nil {
		t.Fatal(err)
	}
	if c.Serves("made") {
		t.Fatal("deleted pool still served")
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
	for name, err := range map[string]error{
		"create":  c.CreatePool(ctx, "new", ""),
		"comment": c.SetPoolComment(ctx, "lab", "x"),
		"delete":  c.DeletePool(ctx, "lab"),
	} {
		if !errors.Is(err, ErrPoolsFixed) {
			t.Errorf("%s: %v, want ErrPoolsFixed", name, err)
		}
	}
	if p, ok := c.Pool("lab"); !ok || p.Comment != "" || p.Managed {
		t.Fatalf("Pool(lab) = %+v %v", p, ok)
	}
	if _, ok := c.Pool("default"); ok {
		t.Fatal("unserved namespace is a pool")
	}
}
