package prom

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
)

// Source reads current usage from Prometheus for kube's poller
// (kube.Options.KubeVirtMetrics): per VMI cpu, mem and the I/O counters
// from virt-handler's metrics, per node load, boot time and root
// filesystem from node_exporter. Each interval costs one instant query
// per field for all VMs and nodes together. A query that fails keeps its
// previous answer, so one bad scrape does not zero a dashboard.
type Source struct {
	c *Client

	mu   sync.Mutex // Sample is called by one poller; the lock is for safety
	last map[string][]Sample
}

// NewSource reads through c.
func NewSource(c *Client) *Source { return &Source{c: c, last: map[string][]Sample{}} }

// Sample runs the instant queries concurrently and maps their answers.
func (s *Source) Sample(ctx context.Context, namespaces []string) (kube.MetricsSample, error) {
	all := append(append([]currentQuery(nil), guestQueries...), nodeQueries...)
	results := make([][]Sample, len(all))
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	now := time.Now()
	for i, q := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = s.c.Query(ctx, q.expr, now)
		}()
	}
	wg.Wait()

	s.mu.Lock()
	defer s.mu.Unlock()
	var firstErr error
	ok := 0
	for i, q := range all {
		if errs[i] != nil {
			if firstErr == nil {
				firstErr = errs[i]
			}
			results[i] = s.last[q.expr]
			continue
		}
		ok++
		s.last[q.expr] = results[i]
	}
	if ok == 0 && len(s.last) == 0 {
		return kube.MetricsSample{}, firstErr
	}
	served := map[string]bool{}
	for _, ns := range namespaces {
		served[ns] = true
	}
	out := kube.MetricsSample{Nodes: map[string]kube.Usage{}, Guests: map[kube.GuestKey]kube.Usage{}}
	for i, q := range all {
		for _, smp := range results[i] {
			if i < len(guestQueries) {
				k := kube.GuestKey{Namespace: smp.Labels["namespace"], Name: smp.Labels["name"]}
				if k.Name == "" || (len(served) > 0 && !served[k.Namespace]) {
					continue
				}
				u := out.Guests[k]
				q.set(&u, smp.Value)
				u.Has |= q.field
				out.Guests[k] = u
				continue
			}
			n := smp.Labels["nodename"]
			if n == "" {
				continue
			}
			u := out.Nodes[n]
			q.set(&u, smp.Value)
			u.Has |= q.field
			out.Nodes[n] = u
		}
	}
	if firstErr != nil {
		firstErr = fmt.Errorf("%d of %d queries failed, keeping their previous answers: %w", len(all)-ok, len(all), firstErr)
	}
	return out, firstErr
}

var _ kube.MetricsSource = (*Source)(nil)
