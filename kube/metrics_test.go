package kube

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// fakeMetrics serves a fixed sample until fail is set.
type fakeMetrics struct {
	mu     sync.Mutex
	sample MetricsSample
	fail   bool
	calls  int
}

func (f *fakeMetrics) Sample(context.Context, []string) (MetricsSample, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.fail {
		return MetricsSample{}, errors.New("metrics API unavailable")
	}
	return f.sample, nil
}

func (f *fakeMetrics) set(fn func(f *fakeMetrics)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeMetrics) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func runningVMI(ns, name, node string) *kubevirtv1.VirtualMachineInstance {
	return &kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Status:     kubevirtv1.VirtualMachineInstanceStatus{Phase: kubevirtv1.Running, NodeName: node},
	}
}

func TestMetricsSnapshot(t *testing.T) {
	const kubeNode = "kv-node-1.lab.internal"
	e := newEnv(t, envOptions{extra: []k8sruntime.Object{runningVMI("default", "debian-12", kubeNode)}})
	src := &fakeMetrics{sample: MetricsSample{
		Nodes:  map[string]Usage{kubeNode: {CPUCores: 1.5, MemBytes: 3 << 30}},
		Guests: map[GuestKey]Usage{{"default", "debian-12"}: {CPUCores: 0.5, MemBytes: 1 << 30}},
	}}
	core, logs := observer.New(zapcore.InfoLevel)
	c := e.cluster(Options{Metrics: src, MetricsInterval: 10 * time.Millisecond, Logger: zap.New(core)}, true)

	eventually(t, "first reading", func() (bool, string) {
		_, _, ok := c.NodeUsage(kubeNode)
		return ok, "no node usage yet"
	})
	if cpu, mem, ok := c.NodeUsage(kubeNode); !ok || cpu != 1.5 || mem != 3<<30 {
		t.Fatalf("NodeUsage = %v %v %v", cpu, mem, ok)
	}
	if cpu, mem, ok := c.GuestUsage("default", "debian-12"); !ok || cpu != 0.5 || mem != 1<<30 {
		t.Fatalf("GuestUsage = %v %v %v", cpu, mem, ok)
	}
	if _, _, ok := c.GuestUsage("default", "win-11"); ok {
		t.Fatal("usage for a guest without a reading")
	}

	// What rows read: the Guest and Node values of this cluster.
	var found bool
	for _, g := range c.Guests() {
		cpu, mem, ok := c.GuestUsageOf(g)
		if g.Name() == "debian-12" {
			found = true
			if g.InstanceMeta() == nil || !ok || cpu != 0.5 || mem != 1<<30 {
				t.Fatalf("GuestUsageOf(debian-12) = %v %v %v (vmi %v)", cpu, mem, ok, g.InstanceMeta() != nil)
			}
		} else if ok {
			t.Errorf("GuestUsageOf(%s) has a reading", g.Name())
		}
	}
	if !found {
		t.Fatal("debian-12 not listed")
	}
	for _, n := range c.Nodes() {
		_, mem, ok := c.NodeUsageOf(n)
		if (n.KubeName == kubeNode) != ok || (ok && mem != 3<<30) {
			t.Errorf("NodeUsageOf(%s) = %v %v", n.KubeName, mem, ok)
		}
	}

	// A failing source keeps the last good snapshot and logs once.
	src.set(func(f *fakeMetrics) { f.fail = true })
	n := src.count()
	eventually(t, "several failing polls", func() (bool, string) { return src.count() >= n+5, "" })
	if cpu, _, ok := c.NodeUsage(kubeNode); !ok || cpu != 1.5 {
		t.Fatalf("snapshot lost after failures: %v %v", cpu, ok)
	}
	if got := logs.FilterMessage("usage metrics unavailable; keeping the previous values").Len(); got != 1 {
		t.Fatalf("failure logged %d times, want 1", got)
	}

	// Recovery publishes the new numbers.
	src.set(func(f *fakeMetrics) {
		f.fail = false
		f.sample = MetricsSample{Nodes: map[string]Usage{kubeNode: {CPUCores: 2, MemBytes: 4 << 30}}}
	})
	eventually(t, "new reading", func() (bool, string) {
		cpu, _, _ := c.NodeUsage(kubeNode)
		return cpu == 2, ""
	})
	// A part missing from a reading keeps its previous values.
	if cpu, _, ok := c.GuestUsage("default", "debian-12"); !ok || cpu != 0.5 {
		t.Fatalf("guest reading dropped: %v %v", cpu, ok)
	}

	c.Stop()
	eventually(t, "poller stopped", func() (bool, string) {
		_, _, ok := c.NodeUsage(kubeNode)
		return !ok, "poller still registered"
	})
}

func TestMetricsAbsent(t *testing.T) {
	e := newEnv(t, envOptions{})
	c := e.cluster(Options{}, true)
	if _, _, ok := c.NodeUsage("kv-node-1.lab.internal"); ok {
		t.Fatal("usage without a source")
	}
	for _, n := range c.Nodes() {
		if _, _, ok := c.NodeUsageOf(n); ok {
			t.Fatalf("NodeUsageOf(%s) without a source", n.Name)
		}
	}
}

func TestAddPodMetrics(t *testing.T) {
	var l metricsList
	body := `{"items":[
	 {"metadata":{"name":"virt-launcher-a-x","namespace":"ns","labels":{"kubevirt.io/domain":"a"}},
	  "containers":[{"name":"compute","usage":{"cpu":"250m","memory":"512Mi"}},{"name":"guest-console-log","usage":{"cpu":"1m","memory":"1Mi"}}]},
	 {"metadata":{"name":"virt-launcher-b-y","namespace":"ns","labels":{"vm.kubevirt.io/name":"b"}},
	  "containers":[{"name":"c1","usage":{"cpu":"1","memory":"1Gi"}},{"name":"c2","usage":{"cpu":"500m","memory":"1Gi"}}]},
	 {"metadata":{"name":"other","namespace":"ns","labels":{}},"containers":[{"name":"x","usage":{"cpu":"1","memory":"1"}}]}]}`
	if err := jsonUnmarshal(body, &l); err != nil {
		t.Fatal(err)
	}
	got := map[GuestKey]Usage{}
	addPodMetrics(got, &l)
	want := map[GuestKey]Usage{
		{"ns", "a"}: {CPUCores: 0.25, MemBytes: 512 << 20},
		{"ns", "b"}: {CPUCores: 1.5, MemBytes: 2 << 30},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for k, w := range want {
		if g := got[k]; g != w {
			t.Errorf("%v = %+v, want %+v", k, g, w)
		}
	}
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
