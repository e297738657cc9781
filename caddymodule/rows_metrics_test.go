package caddymodule

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/kubevirtsim"
)

func TestRowsCarryUsage(t *testing.T) {
	const kubeNode = "kv-node-1.lab.internal"
	vmi := &kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "debian-12", Namespace: "default"},
		Status:     kubevirtv1.VirtualMachineInstanceStatus{Phase: kubevirtv1.Running, NodeName: kubeNode},
	}
	kc, kv := kubevirtsim.NewFakeClients(append(kubevirtsim.Seed(), vmi)...)
	src := kube.MetricsSourceFunc(func(context.Context, []string) (kube.MetricsSample, error) {
		return kube.MetricsSample{
			Nodes:  map[string]kube.Usage{kubeNode: {CPUCores: 1, MemBytes: 3 << 30}},
			Guests: map[kube.GuestKey]kube.Usage{{Namespace: "default", Name: "debian-12"}: {CPUCores: 0.5, MemBytes: 1 << 30}},
		}, nil
	})
	c := kube.New(kc, kv, nil, kube.Options{Metrics: src, MetricsInterval: 10 * time.Millisecond, AssumeKubeVirtAPIs: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	for {
		if _, _, ok := c.NodeUsage(kubeNode); ok {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("no reading")
		}
		time.Sleep(5 * time.Millisecond)
	}
	now := time.Now()
	var seen bool
	for _, g := range c.Guests() {
		f := factsOf(c, g, now)
		st, res := vmStatus(g, f), vmResource(g, f)
		if g.Name() != "debian-12" {
			if st.CPU != 0 || st.Mem != 0 {
				t.Errorf("%s: cpu %v mem %v without a reading", g.Name(), st.CPU, st.Mem)
			}
			continue
		}
		seen = true
		if f.state.Status != "running" || f.cpus == 0 {
			t.Fatalf("debian-12: status %s cpus %d", f.state.Status, f.cpus)
		}
		want := 0.5 / float64(f.cpus)
		if st.CPU != want || st.Mem != 1<<30 || res.CPU != want || res.Mem != 1<<30 {
			t.Fatalf("debian-12 rows: status %v/%v resource %v/%v, want %v/%v", st.CPU, st.Mem, res.CPU, res.Mem, want, 1<<30)
		}
	}
	if !seen {
		t.Fatal("debian-12 not listed")
	}
	for _, n := range c.Nodes() {
		row := nodeFacts(c, n, now)
		if n.KubeName == kubeNode {
			if row.MaxCPU == 0 || row.CPU != 1/float64(row.MaxCPU) || row.Mem != 3<<30 {
				t.Fatalf("node row %+v", row)
			}
		} else if row.CPU != 0 || row.Mem != 0 {
			t.Errorf("node %s: cpu %v mem %v without a reading", n.Name, row.CPU, row.Mem)
		}
	}
}

func TestFraction(t *testing.T) {
	for _, c := range []struct{ used, total, want float64 }{
		{1, 4, 0.25}, {5, 4, 1}, {1, 0, 0}, {-1, 4, 0},
	} {
		if got := fraction(c.used, c.total); got != c.want {
			t.Errorf("fraction(%v, %v) = %v, want %v", c.used, c.total, got, c.want)
		}
	}
}
