package bench

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

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
// costs the plugin (half of them running, so VMIs are counted too): the
// heap grown by starting a kube.Cluster over an already-filled fake API.
func BenchmarkCacheMemoryPerVM(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("vms=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				objs := append(kubevirtsim.Seed(), kubevirtsim.BulkVMs("default", n, 1000, []string{"kv-node-1.lab.internal"})...)
				kc, kv := kubevirtsim.NewFakeClients(objs...)
				before := heap()
				c := kube.New(kc, kv, nil, kube.Options{SyncTimeout: time.Minute})
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
