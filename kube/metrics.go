package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/api/resource"
)

// DefaultMetricsInterval is how often usage is polled when
// Options.MetricsInterval is zero.
const DefaultMetricsInterval = 15 * time.Second

// Usage is what a node or guest uses right now.
type Usage struct {
	CPUCores float64
	MemBytes int64
	// NetIn, NetOut, DiskRead and DiskWrite are a guest's cumulative byte
	// counters (PVE's netin, netout, diskread, diskwrite).
	NetIn, NetOut, DiskRead, DiskWrite int64
	// Load is a node's 1, 5 and 15 minute load average.
	Load [3]float64
	// BootTime is when a node booted (unix seconds).
	BootTime int64
	// RootUsed and RootTotal are a node's root filesystem bytes.
	RootUsed, RootTotal int64
	// SwapUsed and SwapTotal are a node's swap bytes.
	SwapUsed, SwapTotal int64
	// IOWait and Idle are the fractions of a node's CPU time spent waiting
	// for I/O and idle.
	IOWait, Idle float64
	// Has lists the fields this reading carries. Zero means CPUCores and
	// MemBytes only, which is what metrics.k8s.io gives.
	Has UsageFields
}

// UsageFields is a set of Usage fields.
type UsageFields uint32

// The fields of Usage, for Usage.Has.
const (
	HasCPU UsageFields = 1 << iota
	HasMem
	HasNetIn
	HasNetOut
	HasDiskRead
	HasDiskWrite
	HasLoad1
	HasLoad5
	HasLoad15
	HasBootTime
	HasRootUsed
	HasRootTotal
	HasSwapUsed
	HasSwapTotal
	HasIOWait
	HasIdle
)

// Fields is u.Has, with the zero value read as CPU and memory.
func (u Usage) Fields() UsageFields {
	if u.Has == 0 {
		return HasCPU | HasMem
	}
	return u.Has
}

// Overlay returns u with every field that o carries taken from o.
func (u Usage) Overlay(o Usage) Usage {
	has, oh := u.Fields(), o.Fields()
	for _, f := range []struct {
		bit      UsageFields
		dst, src *int64
	}{
		{HasMem, &u.MemBytes, &o.MemBytes},
		{HasNetIn, &u.NetIn, &o.NetIn},
		{HasNetOut, &u.NetOut, &o.NetOut},
		{HasDiskRead, &u.DiskRead, &o.DiskRead},
		{HasDiskWrite, &u.DiskWrite, &o.DiskWrite},
		{HasBootTime, &u.BootTime, &o.BootTime},
		{HasRootUsed, &u.RootUsed, &o.RootUsed},
		{HasRootTotal, &u.RootTotal, &o.RootTotal},
		{HasSwapUsed, &u.SwapUsed, &o.SwapUsed},
		{HasSwapTotal, &u.SwapTotal, &o.SwapTotal},
	} {
		if oh&f.bit != 0 {
			*f.dst = *f.src
		}
	}
	for _, f := range []struct {
		bit      UsageFields
		dst, src *float64
	}{
		{HasCPU, &u.CPUCores, &o.CPUCores},
		{HasLoad1, &u.Load[0], &o.Load[0]},
		{HasLoad5, &u.Load[1], &o.Load[1]},
		{HasLoad15, &u.Load[2], &o.Load[2]},
		{HasIOWait, &u.IOWait, &o.IOWait},
		{HasIdle, &u.Idle, &o.Idle},
	} {
		if oh&f.bit != 0 {
			*f.dst = *f.src
		}
	}
	u.Has = has | oh
	return u
}

// GuestKey names a VirtualMachineInstance.
type GuestKey struct{ Namespace, Name string }

// MetricsSample is one reading of the cluster's usage. A nil map means the
// part could not be read; the previous reading of that part is kept.
type MetricsSample struct {
	// Nodes is keyed by Kubernetes node name.
	Nodes map[string]Usage
	// Guests is keyed by VMI namespace and name.
	Guests map[GuestKey]Usage
}

// MetricsSource supplies usage readings; simulated clusters and tests use
// it in place of the metrics.k8s.io API.
type MetricsSource interface {
	// Sample reads current usage of the nodes and of the guests in
	// namespaces (all namespaces when empty).
	Sample(ctx context.Context, namespaces []string) (MetricsSample, error)
}

// MetricsSourceFunc adapts a function to MetricsSource.
type MetricsSourceFunc func(ctx context.Context, namespaces []string) (MetricsSample, error)

// Sample calls f.
func (f MetricsSourceFunc) Sample(ctx context.Context, namespaces []string) (MetricsSample, error) {
	return f(ctx, namespaces)
}

// metricsSnapshot is the last good reading; it is never modified once
// published.
type metricsSnapshot struct {
	nodes  map[string]Usage
	guests map[GuestKey]Usage
	at     time.Time
}

// metricsPoller keeps the latest snapshot of one source.
type metricsPoller struct {
	c        *Cluster
	name     string
	src      MetricsSource
	interval time.Duration
	slot     *atomic.Pointer[metricsPoller]
	snap     atomic.Pointer[metricsSnapshot]
	failing  map[string]bool // only the poll goroutine touches it
}

// startMetrics starts the usage pollers in the background. The base source
// is Options.Metrics when set, else the metrics.k8s.io API of a real
// cluster; a simulated cluster without Options.Metrics polls nothing.
// Options.KubeVirtMetrics, when set, runs on its own interval and its
// readings win field by field when rows read them (GuestMetrics).
func (c *Cluster) startMetrics(ctx context.Context) {
	src := c.opts.Metrics
	if src == nil && c.own.cfg != nil {
		src = &apiMetricsSource{c: c}
	}
	if src != nil {
		c.startPoller(ctx, "metrics", src, c.opts.MetricsInterval, &c.metrics)
	}
	if c.opts.KubeVirtMetrics != nil {
		c.startPoller(ctx, "kubevirt metrics", c.opts.KubeVirtMetrics, c.opts.KubeVirtMetricsInterval, &c.kvMetrics)
	}
}

func (c *Cluster) startPoller(ctx context.Context, name string, src MetricsSource, interval time.Duration, slot *atomic.Pointer[metricsPoller]) {
	if interval <= 0 {
		interval = DefaultMetricsInterval
	}
	p := &metricsPoller{c: c, name: name, src: src, interval: interval, slot: slot, failing: map[string]bool{}}
	slot.Store(p)
	go p.run(ctx)
}

func (p *metricsPoller) run(ctx context.Context) {
	defer func() {
		p.slot.Store(nil)
		p.c.metricsGen.Add(1)
	}()
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		p.poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// poll takes one reading and publishes it; parts that fail keep their
// previous values.
func (p *metricsPoller) poll(ctx context.Context) {
	timeout := p.interval
	if timeout > 10*time.Second {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	s, err := p.src.Sample(ctx, p.c.opts.Namespaces)
	p.report(p.name, err)
	if err != nil && s.Nodes == nil && s.Guests == nil {
		return
	}
	prev := p.snap.Load()
	next := &metricsSnapshot{nodes: s.Nodes, guests: s.Guests, at: time.Now()}
	if next.nodes == nil && prev != nil {
		next.nodes = prev.nodes
	}
	if next.guests == nil && prev != nil {
		next.guests = prev.guests
	}
	p.snap.Store(next)
	p.c.metricsGen.Add(1)
}

// report logs a failure once, and the recovery once.
func (p *metricsPoller) report(what string, err error) {
	log := p.c.logger
	switch {
	case err != nil && !p.failing[what]:
		p.failing[what] = true
		log.Info("usage metrics unavailable; keeping the previous values", zap.String("source", what), zap.Error(err))
	case err == nil && p.failing[what]:
		p.failing[what] = false
		log.Info("usage metrics available again", zap.String("source", what))
	}
}

func snapshotOf(slot *atomic.Pointer[metricsPoller]) *metricsSnapshot {
	p := slot.Load()
	if p == nil {
		return nil
	}
	return p.snap.Load()
}

// lookup merges the base reading with the KubeVirt metrics reading.
func lookup[K comparable](c *Cluster, k K, part func(*metricsSnapshot) map[K]Usage) (Usage, bool) {
	var u Usage
	found := false
	if s := snapshotOf(&c.metrics); s != nil {
		u, found = part(s)[k]
	}
	if s := snapshotOf(&c.kvMetrics); s != nil {
		if o, ok := part(s)[k]; ok {
			if !found {
				u = Usage{Has: o.Fields()}
			}
			u, found = u.Overlay(o), true
		}
	}
	return u, found
}

// MetricsVersion changes whenever a usage reading is published (or a
// source stops); what NodeMetrics and GuestMetrics return stays the same
// while it does.
func (c *Cluster) MetricsVersion() uint64 { return c.metricsGen.Load() }

// NodeMetrics is the last known usage of a Kubernetes node, all sources
// merged; Has says which fields have a reading.
func (c *Cluster) NodeMetrics(kubeNode string) (Usage, bool) {
	return lookup(c, kubeNode, func(s *metricsSnapshot) map[string]Usage { return s.nodes })
}

// GuestMetrics is the last known usage of a VMI, all sources merged; Has
// says which fields have a reading.
func (c *Cluster) GuestMetrics(ns, vmiName string) (Usage, bool) {
	return lookup(c, GuestKey{ns, vmiName}, func(s *metricsSnapshot) map[GuestKey]Usage { return s.guests })
}

// NodeUsage is the last known CPU and memory use of a Kubernetes node.
func (c *Cluster) NodeUsage(kubeNode string) (cpuCores float64, memBytes int64, ok bool) {
	u, ok := c.NodeMetrics(kubeNode)
	return u.CPUCores, u.MemBytes, ok && u.Fields()&(HasCPU|HasMem) != 0
}

// GuestUsage is the last known CPU and memory use of a VMI.
func (c *Cluster) GuestUsage(ns, vmiName string) (cpuCores float64, memBytes int64, ok bool) {
	u, ok := c.GuestMetrics(ns, vmiName)
	return u.CPUCores, u.MemBytes, ok && u.Fields()&(HasCPU|HasMem) != 0
}

// GuestUsageOf is the last known usage of g's instance; ok is false when
// it has none or no reading exists.
func (c *Cluster) GuestUsageOf(g Guest) (cpuCores float64, memBytes int64, ok bool) {
	if g.InstanceMeta() == nil {
		return 0, 0, false
	}
	return c.GuestUsage(g.InstanceMeta().Namespace, g.InstanceMeta().Name)
}

// NodeUsageOf is the last known usage of n.
func (c *Cluster) NodeUsageOf(n Node) (cpuCores float64, memBytes int64, ok bool) {
	if n.Obj == nil {
		return 0, 0, false
	}
	return c.NodeUsage(n.Obj.Name)
}

// apiMetricsSource reads metrics.k8s.io/v1beta1 (metrics-server).
type apiMetricsSource struct{ c *Cluster }

// metricsList is the part of NodeMetricsList / PodMetricsList read here.
type metricsList struct {
	Items []struct {
		Metadata struct {
			Name      string            `json:"name"`
			Namespace string            `json:"namespace"`
			Labels    map[string]string `json:"labels"`
		} `json:"metadata"`
		Usage      map[string]resource.Quantity `json:"usage"`
		Containers []struct {
			Name  string                       `json:"name"`
			Usage map[string]resource.Quantity `json:"usage"`
		} `json:"containers"`
	} `json:"items"`
}

const metricsAPI = "/apis/metrics.k8s.io/v1beta1"

func (s *apiMetricsSource) get(ctx context.Context, path string, params map[string]string) (*metricsList, error) {
	// The poller fills one cache for every caller: it reads as the plugin.
	req := s.c.own.kube.CoreV1().RESTClient().Get().AbsPath(path)
	for k, v := range params {
		req = req.Param(k, v)
	}
	body, err := req.DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	var l metricsList
	if err := json.Unmarshal(body, &l); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", path, err)
	}
	return &l, nil
}

func usageOf(l map[string]resource.Quantity) Usage {
	var u Usage
	if q, ok := l["cpu"]; ok {
		u.CPUCores = q.AsApproximateFloat64()
	}
	if q, ok := l["memory"]; ok {
		u.MemBytes = q.Value()
	}
	return u
}

// Sample reads node and virt-launcher pod metrics. A part that fails is
// left nil (kept from before); the error names the first failure.
func (s *apiMetricsSource) Sample(ctx context.Context, namespaces []string) (MetricsSample, error) {
	var out MetricsSample
	var firstErr error
	if l, err := s.get(ctx, metricsAPI+"/nodes", nil); err != nil {
		firstErr = err
	} else {
		out.Nodes = map[string]Usage{}
		for _, it := range l.Items {
			out.Nodes[it.Metadata.Name] = usageOf(it.Usage)
		}
	}
	paths := []string{metricsAPI + "/pods"}
	if len(namespaces) > 0 {
		paths = paths[:0]
		for _, ns := range namespaces {
			paths = append(paths, metricsAPI+"/namespaces/"+ns+"/pods")
		}
	}
	guests := map[GuestKey]Usage{}
	for _, p := range paths {
		l, err := s.get(ctx, p, map[string]string{"labelSelector": "kubevirt.io=virt-launcher"})
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			guests = nil
			break
		}
		addPodMetrics(guests, l)
	}
	out.Guests = guests
	return out, firstErr
}

// addPodMetrics maps virt-launcher pod metrics to their VMIs: the compute
// container when listed (the guest plus QEMU), else the whole pod.
func addPodMetrics(dst map[GuestKey]Usage, l *metricsList) {
	for _, it := range l.Items {
		name := it.Metadata.Labels["kubevirt.io/domain"]
		if name == "" {
			name = it.Metadata.Labels["vm.kubevirt.io/name"]
		}
		if name == "" {
			continue
		}
		var u Usage
		found := false
		for _, ct := range it.Containers {
			if ct.Name == "compute" {
				u, found = usageOf(ct.Usage), true
			}
		}
		if !found {
			for _, ct := range it.Containers {
				cu := usageOf(ct.Usage)
				u.CPUCores += cu.CPUCores
				u.MemBytes += cu.MemBytes
			}
		}
		k := GuestKey{it.Metadata.Namespace, name}
		// A migrating VMI has two pods; the reading of either will do, the
		// larger being the one running the guest.
		if prev, ok := dst[k]; !ok || u.MemBytes > prev.MemBytes {
			dst[k] = u
		}
	}
}
