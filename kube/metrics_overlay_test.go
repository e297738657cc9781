package kube

import (
	"testing"
	"time"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
)

func TestUsageOverlay(t *testing.T) {
	base := Usage{CPUCores: 1, MemBytes: 100}
	for _, c := range []struct {
		name string
		over Usage
		want Usage
	}{
		{"io only keeps the base cpu and mem", Usage{NetIn: 5, DiskWrite: 7, Has: HasNetIn | HasDiskWrite},
			Usage{CPUCores: 1, MemBytes: 100, NetIn: 5, DiskWrite: 7, Has: HasCPU | HasMem | HasNetIn | HasDiskWrite}},
		{"cpu wins, mem stays", Usage{CPUCores: 0.25, MemBytes: 999, Has: HasCPU},
			Usage{CPUCores: 0.25, MemBytes: 100, Has: HasCPU | HasMem}},
		{"zero Has is cpu and mem", Usage{CPUCores: 2, MemBytes: 200},
			Usage{CPUCores: 2, MemBytes: 200, Has: HasCPU | HasMem}},
		{"node fields", Usage{Load: [3]float64{1, 2, 3}, BootTime: 42, RootUsed: 1, RootTotal: 2, Has: HasLoad1 | HasLoad15 | HasBootTime | HasRootUsed | HasRootTotal},
			Usage{CPUCores: 1, MemBytes: 100, Load: [3]float64{1, 0, 3}, BootTime: 42, RootUsed: 1, RootTotal: 2, Has: HasCPU | HasMem | HasLoad1 | HasLoad15 | HasBootTime | HasRootUsed | HasRootTotal}},
	} {
		if got := base.Overlay(c.over); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

// KubeVirtMetrics runs on its own poller and wins field by field; a guest
// only it knows is still listed, without cpu and memory.
func TestKubeVirtMetricsOverlay(t *testing.T) {
	const kubeNode = "kv-node-1.lab.internal"
	e := newEnv(t, envOptions{extra: []k8sruntime.Object{runningVMI("default", "debian-12", kubeNode)}})
	base := &fakeMetrics{sample: MetricsSample{
		Nodes:  map[string]Usage{kubeNode: {CPUCores: 1.5, MemBytes: 3 << 30}},
		Guests: map[GuestKey]Usage{{"default", "debian-12"}: {CPUCores: 0.5, MemBytes: 1 << 30}},
	}}
	kv := &fakeMetrics{sample: MetricsSample{
		Nodes: map[string]Usage{kubeNode: {Load: [3]float64{0.5, 0.4, 0.3}, Has: HasLoad1 | HasLoad5 | HasLoad15}},
		Guests: map[GuestKey]Usage{
			{"default", "debian-12"}: {CPUCores: 0.75, NetIn: 1000, Has: HasCPU | HasNetIn},
			{"default", "other"}:     {NetOut: 5, Has: HasNetOut},
		},
	}}
	c := e.cluster(Options{Metrics: base, MetricsInterval: 10 * time.Millisecond, KubeVirtMetrics: kv, KubeVirtMetricsInterval: 10 * time.Millisecond}, true)
	eventually(t, "both readings", func() (bool, string) {
		u, ok := c.GuestMetrics("default", "debian-12")
		return ok && u.NetIn == 1000 && u.MemBytes == 1<<30, "no merged reading"
	})
	u, _ := c.GuestMetrics("default", "debian-12")
	if u.CPUCores != 0.75 || u.MemBytes != 1<<30 || u.NetIn != 1000 || u.Fields() != HasCPU|HasMem|HasNetIn {
		t.Errorf("merged guest %+v", u)
	}
	if cpu, mem, ok := c.GuestUsage("default", "debian-12"); !ok || cpu != 0.75 || mem != 1<<30 {
		t.Errorf("GuestUsage %v %v %v", cpu, mem, ok)
	}
	if o, ok := c.GuestMetrics("default", "other"); !ok || o.NetOut != 5 || o.Fields() != HasNetOut {
		t.Errorf("overlay-only guest %+v %v", o, ok)
	}
	if _, _, ok := c.GuestUsage("default", "other"); ok {
		t.Error("GuestUsage reports cpu/mem for a guest that has none")
	}
	n, _ := c.NodeMetrics(kubeNode)
	if n.CPUCores != 1.5 || n.Load != [3]float64{0.5, 0.4, 0.3} {
		t.Errorf("merged node %+v", n)
	}
}
