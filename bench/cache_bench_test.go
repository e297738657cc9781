package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

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
// with its instance. B/VM counts all of that; B/VM+VMI only the VMs and
// instances (a second cluster over the same VMs without their disks'
// objects).
func BenchmarkCacheMemoryPerVM(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("vms=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				objs, err := fleet.Objects(fleet.Spec{Namespace: "default", N: n, FirstVMID: 1000, Nodes: []string{"kv-node-1.lab.internal"}})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(perVM(b, n, objs), "B/VM")
				var vms []k8sruntime.Object
				for _, o := range objs {
					switch o.(type) {
					case *cdiv1.DataVolume, *corev1.PersistentVolumeClaim:
					default:
						vms = append(vms, o)
					}
				}
				b.ReportMetric(perVM(b, n, vms), "B/VM+VMI")
			}
		})
	}
}

// perVM starts a cluster over the seed lab and objs and returns the heap
// it grew by, per VM.
func perVM(b *testing.B, n int, objs []k8sruntime.Object) float64 {
	kc, kv, cdi := kubevirtsim.NewFakeClientsWithCDI(append(kubevirtsim.Seed(), objs...)...)
	before := heap()
	dir := os.Getenv("CACHE_HEAP_PROFILE")
	if dir != "" {
		writeHeapProfile(b, fmt.Sprintf("%s/cache-%d-%d-before.prof", dir, n, len(objs)))
	}
	c := kube.New(kc, kv, nil, kube.Options{SyncTimeout: time.Minute, CDI: cdi, AssumeKubeVirtAPIs: true})
	if err := c.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer c.Stop()
	if got := len(c.Guests()); got < n {
		b.Fatalf("cache has %d guests, want %d", got, n)
	}
	grown := heap() - before
	if dir != "" {
		writeHeapProfile(b, fmt.Sprintf("%s/cache-%d-%d.prof", dir, n, len(objs)))
	}
	return float64(grown) / float64(n)
}

func init() {
	if os.Getenv("CACHE_HEAP_PROFILE") != "" {
		// Fine enough to see bookkeeping of tens of bytes per object.
		runtime.MemProfileRate = 4096
	}
}

// writeHeapProfile writes the heap profile as of now, the cluster still
// running (CACHE_HEAP_PROFILE=<dir>: what the test binary's -memprofile
// would miss, as it is written after the clusters stopped); the one
// written before the cluster starts is the base to compare with
// (go tool pprof -diff_base).
func writeHeapProfile(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}
