package lxc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	proxmox "github.com/luthermonson/go-proxmox"
	"go.uber.org/zap"
)

// clusters holds the cluster runtimes, shared by configs during reloads.
var clusters = caddy.NewUsagePool()

// Resource is a guest as the last /cluster/resources poll saw it.
type Resource struct {
	VMID   int    `json:"vmid"`
	Kind   string `json:"type"`
	Node   string `json:"node"`
	Name   string `json:"name"`
	Status string `json:"status"`
}

// Cluster is the runtime of one configured cluster: its client, its nodes
// and the poller feeding every subscribed guest.
type Cluster struct {
	cfg    ClusterConfig
	key    string
	logger *zap.Logger

	ctx    context.Context
	cancel context.CancelFunc

	startOnce sync.Once
	ready     chan struct{} // closed after the first successful poll

	mu      sync.RWMutex
	client  *proxmox.Client
	nodes   []string
	byVMID  map[int]Resource
	byName  map[string][]Resource
	pollErr error
	subs    map[*Guest]struct{}
	simKey  string
}

// AcquireCluster returns the runtime for cfg, shared with any config
// that has the same cluster settings. Release it with Release. It makes
// no request: polling begins with Start.
func AcquireCluster(cfg ClusterConfig, logger *zap.Logger) (*Cluster, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	key := cfg.key()
	v, _, err := clusters.LoadOrNew(key, func() (caddy.Destructor, error) {
		ctx, cancel := context.WithCancel(context.Background())
		return &Cluster{
			cfg: cfg, key: key, logger: logger.With(zap.String("cluster", cfg.Name)),
			ctx: ctx, cancel: cancel, ready: make(chan struct{}),
			byVMID: map[int]Resource{}, byName: map[string][]Resource{},
			subs: map[*Guest]struct{}{},
		}, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*Cluster), nil
}

// Release drops this config's hold on the runtime; the last one stops it.
func (c *Cluster) Release() error {
	_, err := clusters.Delete(c.key)
	return err
}

// Destruct stops the poller. It implements caddy.Destructor.
func (c *Cluster) Destruct() error {
	c.cancel()
	c.mu.Lock()
	simKey := c.simKey
	c.simKey = ""
	c.mu.Unlock()
	if simKey != "" {
		_, _ = sims.Delete(simKey)
	}
	return nil
}

// Name is the cluster's configured name.
func (c *Cluster) Name() string { return c.cfg.Name }

// Start begins node discovery and polling, once per runtime.
func (c *Cluster) Start() {
	c.startOnce.Do(func() { go c.run() })
}

// run connects and polls until the runtime is destroyed.
func (c *Cluster) run() {
	backoff := c.cfg.PollInterval
	for c.ctx.Err() == nil {
		if err := c.connect(); err != nil {
			c.logger.Error("connecting to Proxmox VE", zap.Error(err))
			if !sleepCtx(c.ctx, backoff) {
				return
			}
			backoff = min(backoff*2, time.Minute)
			continue
		}
		break
	}
	t := time.NewTicker(c.cfg.PollInterval)
	defer t.Stop()
	for {
		c.poll()
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// connect builds the client and discovers the nodes.
func (c *Cluster) connect() error {
	c.mu.RLock()
	client := c.client
	c.mu.RUnlock()
	if client == nil {
		var err error
		if c.cfg.Simulate {
			client, err = c.simulatedClient()
		} else {
			client, err = newClient(c.cfg, c.cfg.URLs, c.cfg.TokenID, c.cfg.TokenSecret)
		}
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.client = client
		c.mu.Unlock()
	}
	return c.discoverNodes()
}

// discoverNodes reads /cluster/status.
func (c *Cluster) discoverNodes() error {
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.RequestTimeout)
	defer cancel()
	cl, err := c.Client().Cluster(ctx)
	if err != nil {
		return fmt.Errorf("reading /cluster/status: %w", err)
	}
	var nodes []string
	for _, n := range cl.Nodes {
		nodes = append(nodes, n.Name)
	}
	c.mu.Lock()
	c.nodes = nodes
	c.mu.Unlock()
	c.logger.Info("Proxmox VE cluster discovered", zap.String("pve_cluster", cl.Name), zap.Strings("nodes", nodes))
	return nil
}

// Client is the API client (nil before Start connected).
func (c *Cluster) Client() *proxmox.Client {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.client
}

// Nodes are the discovered node names.
func (c *Cluster) Nodes() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return append([]string(nil), c.nodes...)
}

// poll reads /cluster/resources once and feeds every subscribed guest.
func (c *Cluster) poll() {
	ctx, cancel := context.WithTimeout(c.ctx, min(c.cfg.RequestTimeout, max(c.cfg.PollInterval*4, time.Second)))
	defer cancel()
	cl := (&proxmox.Cluster{}).New(c.Client())
	rs, err := cl.Resources(ctx, "vm")
	now := time.Now()
	if err != nil {
		if c.ctx.Err() != nil {
			return
		}
		metrics.polls.WithLabelValues(c.cfg.Name, "error").Inc()
		c.mu.Lock()
		first := c.pollErr == nil
		c.pollErr = err
		c.mu.Unlock()
		// Log the first error of a run of failures, not every tick.
		if first {
			c.logger.Warn("polling /cluster/resources failed; guest states are kept until it recovers", zap.Error(err))
		}
		return
	}
	metrics.polls.WithLabelValues(c.cfg.Name, "ok").Inc()
	byVMID := make(map[int]Resource, len(rs))
	byName := make(map[string][]Resource, len(rs))
	unknownNode := false
	c.mu.RLock()
	known := map[string]bool{}
	for _, n := range c.nodes {
		known[n] = true
	}
	c.mu.RUnlock()
	for _, r := range rs {
		if r == nil || (r.Type != "lxc" && r.Type != "qemu") || r.Template != 0 {
			continue
		}
		res := Resource{VMID: int(r.VMID), Kind: r.Type, Node: r.Node, Name: r.Name, Status: r.Status}
		byVMID[res.VMID] = res
		if res.Name != "" {
			byName[res.Name] = append(byName[res.Name], res)
		}
		if !known[res.Node] {
			unknownNode = true
		}
	}
	c.mu.Lock()
	recovered := c.pollErr != nil
	c.byVMID, c.byName, c.pollErr = byVMID, byName, nil
	subs := make([]*Guest, 0, len(c.subs))
	for g := range c.subs {
		subs = append(subs, g)
	}
	c.mu.Unlock()
	if recovered {
		c.logger.Info("polling /cluster/resources recovered")
	}
	select {
	case <-c.ready:
	default:
		close(c.ready)
	}
	if unknownNode {
		// A node joined; cheap and rare, so rediscover right away.
		if err := c.discoverNodes(); err != nil {
			c.logger.Warn("node discovery", zap.Error(err))
		}
	}
	for _, g := range subs {
		res, err := c.Lookup(g.ref)
		g.observe(c, res, err == nil, now)
	}
}

// WaitReady waits for the first successful poll.
func (c *Cluster) WaitReady(ctx context.Context) error {
	select {
	case <-c.ready:
		return nil
	case <-ctx.Done():
		c.mu.RLock()
		err := c.pollErr
		c.mu.RUnlock()
		if err != nil {
			return fmt.Errorf("cluster %s not reachable: %w", c.cfg.Name, err)
		}
		return fmt.Errorf("cluster %s not polled yet: %w", c.cfg.Name, ctx.Err())
	case <-c.ctx.Done():
		return errors.New("cluster runtime stopped")
	}
}

// errNotFound is a guest absent from the last poll.
var errNotFound = errors.New("guest not found in the cluster")

// Lookup resolves a ref (vmid or name) against the last poll.
func (c *Cluster) Lookup(ref string) (Resource, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if id, err := strconv.Atoi(ref); err == nil {
		if r, ok := c.byVMID[id]; ok {
			return r, nil
		}
		return Resource{}, fmt.Errorf("vmid %d: %w", id, errNotFound)
	}
	rs := c.byName[ref]
	switch len(rs) {
	case 0:
		return Resource{}, fmt.Errorf("name %q: %w", ref, errNotFound)
	case 1:
		return rs[0], nil
	}
	return Resource{}, fmt.Errorf("name %q is ambiguous (%d guests): use the vmid", ref, len(rs))
}

func (c *Cluster) subscribe(g *Guest) {
	c.mu.Lock()
	c.subs[g] = struct{}{}
	c.mu.Unlock()
}

func (c *Cluster) unsubscribe(g *Guest) {
	c.mu.Lock()
	delete(c.subs, g)
	c.mu.Unlock()
}

// sleepCtx sleeps d unless ctx ends first; it reports whether it slept.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
