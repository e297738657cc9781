package bench

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/internal/fleet"
	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/kubevirtsim"
)

func heap() uint64 {
	var m runtime.MemStats
	for i := 0; i < 3; i++ {
		runtime.GC()
	}
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkCacheMemoryPerVM reports the informer-cache memory one VM
// costs the plugin: the heap grown by starting a kube.Cluster over an
// already-filled fake API, divided by the VMs. Each VM is as the API
// creates it and KubeVirt and CDI fill it in (fleet): a disk with its
// DataVolume and claim, a NIC, cloud-init, and every other one running
// with its instance, all of which the caches hold.
func BenchmarkCacheMemoryPerVM(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("vms=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				bulk, err := fleet.Objects(fleet.Spec{Namespace: "default", N: n, FirstVMID: 1000, Nodes: []string{"kv-node-1.lab.internal"}})
				if err != nil {
					b.Fatal(err)
				}
				kc, kv, cdi := kubevirtsim.NewFakeClientsWithCDI(append(kubevirtsim.Seed(), bulk...)...)
				bulk = nil
				before := heap()
				c := kube.New(kc, kv, nil, kube.Options{SyncTimeout: time.Minute, CDI: cdi, AssumeKubeVirtAPIs: true})
				if err := c.Start(context.Background()); err != nil {
					b.Fatal(err)
				}
				if got := len(c.Guests()); got < n {
					b.Fatalf("cache has %d guests, want %d", got, n)
				}
				after := heap()
				c.Stop()
				b.ReportMetric(float64(after-before)/float64(n), "B/VM")
			}
		})
	}
}
