package prom

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/kubevirtsim"
)

// stub serves the kubevirtsim Prometheus stand-in for one running VMI in
// namespace "default" and one node.
func stub(t *testing.T) *httptest.Server {
	t.Helper()
	vmi := func(ns, name string, phase kubevirtv1.VirtualMachineInstancePhase) *kubevirtv1.VirtualMachineInstance {
		return &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Status: kubevirtv1.VirtualMachineInstanceStatus{Phase: phase}}
	}
	kc, kv := kubevirtsim.NewFakeClients(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kv-node-1"}},
		vmi("default", "web", kubevirtv1.Running), vmi("lab", "db", kubevirtv1.Running), vmi("default", "off", kubevirtv1.Pending))
	srv := httptest.NewServer(kubevirtsim.NewPrometheus(kc, kv))
	t.Cleanup(srv.Close)
	return srv
}

func TestSource(t *testing.T) {
	srv := stub(t)
	s := NewSource(&Client{URL: srv.URL})
	before := time.Now().Unix()
	sample, err := s.Sample(context.Background(), []string{"default"})
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now().Unix()
	if len(sample.Guests) != 1 {
		t.Fatalf("guests %v: want default/web only (namespace filter, running only)", sample.Guests)
	}
	u := sample.Guests[kube.GuestKey{Namespace: "default", Name: "web"}]
	want := kubevirtsim.PromGuest("default", "web")
	if u.Has != kube.HasCPU|kube.HasMem|kube.HasNetIn|kube.HasNetOut|kube.HasDiskRead|kube.HasDiskWrite {
		t.Errorf("fields %b", u.Has)
	}
	if u.CPUCores != want.CPUCores || u.MemBytes != want.MemUsed {
		t.Errorf("cpu %v mem %v, want %v %v", u.CPUCores, u.MemBytes, want.CPUCores, want.MemUsed)
	}
	if u.NetIn < int64(kubevirtsim.Counter(want.NetInRate, before)) || u.NetIn > int64(kubevirtsim.Counter(want.NetInRate, after)) ||
		u.DiskWrite < int64(kubevirtsim.Counter(want.DiskWriteRate, before)) || u.DiskWrite > int64(kubevirtsim.Counter(want.DiskWriteRate, after)) {
		t.Errorf("counters %+v", u)
	}
	n := sample.Nodes["kv-node-1"]
	wn := kubevirtsim.PromNode("kv-node-1")
	if n.Load != [3]float64{wn.Load1, wn.Load5, wn.Load15} || n.BootTime != wn.BootTime || n.RootTotal != wn.RootSize || n.RootUsed != wn.RootSize-wn.RootAvail {
		t.Errorf("node %+v, want %+v", n, wn)
	}

	// Prometheus goes away: the previous answers are kept, with an error.
	srv.Close()
	again, err := s.Sample(context.Background(), nil)
	if err == nil {
		t.Fatal("no error from a closed server")
	}
	if again.Guests[kube.GuestKey{Namespace: "default", Name: "web"}].CPUCores != want.CPUCores {
		t.Errorf("previous answers not kept: %+v", again)
	}
	// A source that never had an answer has nothing to keep.
	if s2, err := NewSource(&Client{URL: srv.URL}).Sample(context.Background(), nil); err == nil || s2.Guests != nil || s2.Nodes != nil {
		t.Errorf("fresh source against a dead server: %+v %v", s2, err)
	}
}

func TestHistoryFillsInTheBackground(t *testing.T) {
	srv := stub(t)
	h := NewHistory(&Client{URL: srv.URL}, time.Hour, nil) // only Get wakes it
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.Run(ctx)
	vm := Key{Namespace: "default", Name: "web", Step: 60, CF: "AVERAGE"}
	node := Key{Node: true, Name: "kv-node-1", Step: 1800, CF: "MAX"}
	if h.Get(vm) != nil || h.Get(node) != nil {
		t.Fatal("values before any fetch")
	}
	var pv, pn Points
	deadline := time.Now().Add(20 * time.Second)
	for pv == nil || pn == nil {
		if time.Now().After(deadline) {
			t.Fatalf("not fetched: vm %v node %v", pv != nil, pn != nil)
		}
		time.Sleep(10 * time.Millisecond)
		pv, pn = h.Get(vm), h.Get(node)
	}
	last := time.Now().Unix() / 60 * 60
	wv := kubevirtsim.PromGuest("default", "web")
	if len(pv) != RRDPoints {
		t.Fatalf("%d VM points", len(pv))
	}
	p, ok := pv[last-60]
	if !ok || p["cpu"] != wv.CPUCores || p["netin"] != wv.NetInRate || p["mem"] != float64(wv.MemUsed) || p["diskread"] != wv.DiskReadRate {
		t.Fatalf("VM point %v (want cpu %v netin %v)", p, wv.CPUCores, wv.NetInRate)
	}
	wn := kubevirtsim.PromNode("kv-node-1")
	lastN := time.Now().Unix() / 1800 * 1800
	q := pn[lastN-1800]
	if q == nil || q["loadavg"] != wn.Load1 || q["cpu"] != 1-wn.Idle || q["maxcpu"] != float64(wn.Cores) || q["memused"] != float64(wn.MemTotal-wn.MemAvail) || q["netin"] != wn.NetInRate {
		t.Fatalf("node point %v", q)
	}
}

// No Get waits on Prometheus, even while every query hangs.
func TestHistoryNeverBlocksOnAHangingPrometheus(t *testing.T) {
	var asked atomic.Int32
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(hang)
	h := NewHistory(&Client{URL: srv.URL}, 10*time.Millisecond, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.Run(ctx)
	k := Key{Namespace: "default", Name: "web", Step: 60, CF: "AVERAGE"}
	_ = h.Get(k)
	for asked.Load() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	// A fetch is in flight and will not end; Gets of that key and of new
	// keys still answer.
	done := make(chan Points)
	go func() {
		for i := 0; i < 1000; i++ {
			_ = h.Get(Key{Name: "vm", Step: int64(60 + i), CF: "MAX"})
		}
		done <- h.Get(k)
	}()
	select {
	case p := <-done:
		if p != nil {
			t.Fatalf("points from a hanging server: %v", p)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Get blocked while Prometheus hangs")
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("%d queries in flight, want 1: rounds must not pile up", n)
	}
}

func TestHistoryForgetsAndBounds(t *testing.T) {
	defer func(idle time.Duration, maxKeys int) { historyIdle, historyMaxKeys = idle, maxKeys }(historyIdle, historyMaxKeys)
	historyIdle, historyMaxKeys = time.Minute, 3
	now := time.Unix(1_800_000_000, 0)
	h := NewHistory(&Client{URL: "http://127.0.0.1:1"}, time.Second, nil)
	h.now = func() time.Time { return now }
	for i := 0; i < 5; i++ {
		now = now.Add(time.Second)
		h.Get(Key{Name: "vm", Step: int64(60 * (i + 1))})
	}
	if len(h.entries) != 3 {
		t.Fatalf("%d keys, want the bound 3", len(h.entries))
	}
	if _, ok := h.entries[Key{Name: "vm", Step: 60}]; ok {
		t.Error("the least recently asked key was kept")
	}
	if due := h.due(now); len(due) != 3 || due[0].Step != 300 {
		t.Errorf("due %v: want all three, most recently asked first", due)
	}
	now = now.Add(2 * time.Minute)
	if due := h.due(now); len(due) != 0 || len(h.entries) != 0 {
		t.Errorf("idle keys kept: due %v, %d entries", due, len(h.entries))
	}
}
