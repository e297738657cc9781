package kube

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/caddy-proxmox/caddy-proxmox/internal/fleet"
	"github.com/caddy-proxmox/caddy-proxmox/kubevirtsim"
)

// BenchmarkTaskWorker measures what one cluster event costs the task
// worker while many tasks run: n start tasks wait on n stopped VMs (no
// controller starts them), and another VM changes 100 times a second. It
// reports the task evaluations per event and the process CPU time per
// event, both beyond an equally long quiet spell (which has the periodic
// passes over all tasks too); they stay flat as n grows when events
// evaluate only the tasks of the VM they are about. Run with
// -benchtime 1x (bench/run.sh does).
func BenchmarkTaskWorker(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("running-tasks=%d", n), func(b *testing.B) {
			objs, err := fleet.Objects(fleet.Spec{Namespace: "default", N: n + 1, FirstVMID: 1000, Nodes: []string{"kv-node-1.lab.internal"}, Running: -1})
			if err != nil {
				b.Fatal(err)
			}
			kc, kv, cdi := kubevirtsim.NewFakeClientsWithCDI(append(kubevirtsim.Seed(), objs...)...)
			c := New(kc, kv, nil, Options{CDI: cdi, AssumeKubeVirtAPIs: true, SyncTimeout: time.Minute})
			ctx := context.Background()
			if err := c.Start(ctx); err != nil {
				b.Fatal(err)
			}
			defer c.Stop()
			for i := 0; i < n; i++ {
				g, err := c.Guest(1000 + i)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.Tasks.Begin(ctx, TaskSpec{Node: g.Node, Type: "qmstart", ID: strconv.Itoa(g.VMID), User: "root@pam",
					Goal: GoalRunning, Namespace: g.Namespace(), Name: g.Name(), UID: g.VM().UID, Timeout: time.Hour}); err != nil {
					b.Fatal(err)
				}
			}
			for len(c.Tasks.running()) < n {
				time.Sleep(10 * time.Millisecond)
			}
			other := fmt.Sprintf("web-%05d", n)
			const rate, spell = 100, 2 * time.Second
			for i := 0; i < b.N; i++ {
				time.Sleep(2 * c.Tasks.Interval) // let the first passes end
				idle, idleEvals := cpu(), c.Tasks.evaluations.Load()
				time.Sleep(spell)
				idle, idleEvals = cpu()-idle, c.Tasks.evaluations.Load()-idleEvals
				evals, busy := c.Tasks.evaluations.Load(), cpu()
				events := 0
				for t := time.Now(); time.Since(t) < spell; events++ {
					vm, err := kv.KubevirtV1().VirtualMachines("default").Get(ctx, other, metav1.GetOptions{})
					if err != nil {
						b.Fatal(err)
					}
					vm.Annotations["bench"] = strconv.Itoa(events)
					if _, err := kv.KubevirtV1().VirtualMachines("default").Update(ctx, vm, metav1.UpdateOptions{}); err != nil {
						b.Fatal(err)
					}
					time.Sleep(time.Second / rate)
				}
				busy = cpu() - busy
				evals = c.Tasks.evaluations.Load() - evals
				b.ReportMetric(float64(evals-idleEvals)/float64(events), "evaluations/event")
				b.ReportMetric(float64((busy-idle).Microseconds())/float64(events), "µs/event")
			}
		})
	}
}

// cpu is the process's CPU time so far.
func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
