package api

import (
	"context"
	"strings"
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
		st, res := vmStatus(g, f), vmResource(g, f, g.Namespace())
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

// KubeVirt's metrics (Prometheus) fill the I/O counters of VM rows and
// load, uptime and rootfs of nodes; without them those stay 0.
func TestRowsCarryKubeVirtMetrics(t *testing.T) {
	const kubeNode = "kv-node-1.lab.internal"
	vmi := &kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "debian-12", Namespace: "default"},
		Status:     kubevirtv1.VirtualMachineInstanceStatus{Phase: kubevirtv1.Running, NodeName: kubeNode},
	}
	kc, kv := kubevirtsim.NewFakeClients(append(kubevirtsim.Seed(), vmi)...)
	boot := time.Now().Add(-time.Hour).Unix()
	src := kube.MetricsSourceFunc(func(context.Context, []string) (kube.MetricsSample, error) {
		return kube.MetricsSample{
			Nodes: map[string]kube.Usage{kubeNode: {Load: [3]float64{1.5, 0.25, 0.125}, BootTime: boot, RootUsed: 10, RootTotal: 40,
				Has: kube.HasLoad1 | kube.HasLoad5 | kube.HasLoad15 | kube.HasBootTime | kube.HasRootUsed | kube.HasRootTotal}},
			Guests: map[kube.GuestKey]kube.Usage{{Namespace: "default", Name: "debian-12"}: {CPUCores: 0.5, NetIn: 1, NetOut: 2, DiskRead: 3, DiskWrite: 4,
				Has: kube.HasCPU | kube.HasNetIn | kube.HasNetOut | kube.HasDiskRead | kube.HasDiskWrite}},
		}, nil
	})
	c := kube.New(kc, kv, nil, kube.Options{KubeVirtMetrics: src, KubeVirtMetricsInterval: 10 * time.Millisecond, AssumeKubeVirtAPIs: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	for {
		if _, ok := c.NodeMetrics(kubeNode); ok {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("no reading")
		}
		time.Sleep(5 * time.Millisecond)
	}
	now := time.Now()
	seenVM, seenNode := false, false
	for _, g := range c.Guests() {
		f := factsOf(c, g, now)
		st, res := vmStatus(g, f), vmResource(g, f, g.Namespace())
		if g.Name() != "debian-12" {
			if st.NetIn != 0 || *res.DiskWrite != 0 {
				t.Errorf("%s: counters without a reading", g.Name())
			}
			continue
		}
		seenVM = true
		if st.NetIn != 1 || st.NetOut != 2 || st.DiskRead != 3 || st.DiskWrite != 4 ||
			*res.NetIn != 1 || *res.NetOut != 2 || *res.DiskRead != 3 || *res.DiskWrite != 4 {
			t.Errorf("counters: status %+v resource %v %v %v %v", st, *res.NetIn, *res.NetOut, *res.DiskRead, *res.DiskWrite)
		}
		if st.CPU != 0.5/float64(f.cpus) || st.Mem != 0 {
			t.Errorf("cpu %v mem %v: cpu from the reading, mem has none", st.CPU, st.Mem)
		}
	}
	for _, n := range c.Nodes() {
		row := nodeFacts(c, n, now)
		if n.KubeName != kubeNode {
			if got := loadavg(row); got[0] != "0.00" {
				t.Errorf("node %s: load %v without a reading", n.Name, got)
			}
			continue
		}
		seenNode = true
		if got := loadavg(row); strings.Join(got, " ") != "1.50 0.25 0.12" {
			t.Errorf("loadavg %v", got)
		}
		if row.Uptime < 3590 || row.Uptime > 3700 || row.Disk != 10 || row.MaxDisk != 40 {
			t.Errorf("node row %+v", row)
		}
	}
	if !seenVM || !seenNode {
		t.Fatalf("debian-12 row seen %v, node %s seen %v: nothing was checked", seenVM, kubeNode, seenNode)
	}
}
