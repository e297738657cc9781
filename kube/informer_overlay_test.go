package kube

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// TestReadYourWritesOverOlderEvent: a watch event older than our own
// write (a controller's earlier write, delivered after the apiserver
// answered ours) does not hide the write from reads, by key or in lists;
// once the informer has caught up, it serves again.
func TestReadYourWritesOverOlderEvent(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cm := func(rv, v string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm", ResourceVersion: rv}, Data: map[string]string{"v": v}}
	}
	events := watch.NewFake()
	s := newStore(ctx, []string{"ns"}, &corev1.ConfigMap{}, listWatchFuncs{
		list: func(context.Context, string, metav1.ListOptions) (runtime.Object, error) {
			return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "2"}, Items: []corev1.ConfigMap{*cm("2", "initial")}}, nil
		},
		watch: func(context.Context, string, metav1.ListOptions) (watch.Interface, error) { return events, nil },
	}, 0, nil, nil, nil)
	s.run(ctx)
	waitFor(t, "sync", func() bool { return s.hasSynced() })
	// The informer has applied an event once its store holds it.
	applied := func(rv string) {
		t.Helper()
		waitFor(t, "event "+rv, func() bool {
			o, _, _ := s.informerFor("ns").GetStore().GetByKey("ns/vm")
			return o != nil && o.(*corev1.ConfigMap).ResourceVersion == rv
		})
	}
	read := func() (string, string) {
		got := s.get("ns", "vm").(*corev1.ConfigMap)
		listed := s.list()[0].(*corev1.ConfigMap)
		return got.Data["v"], listed.Data["v"]
	}

	s.put(cm("5", "ours"), false) // our write's answer
	events.Modify(cm("3", "controller-earlier"))
	applied("3")
	if got, listed := read(); got != "ours" || listed != "ours" {
		t.Fatalf("after an older event: get %q, list %q; want our write", got, listed)
	}
	events.Modify(cm("5", "ours"))
	events.Modify(cm("6", "controller-later"))
	applied("6")
	if got, listed := read(); got != "controller-later" || listed != "controller-later" {
		t.Fatalf("after the informer caught up: get %q, list %q; want the newer event", got, listed)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
