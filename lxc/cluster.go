package lxc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
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
	// Lock is the config lock (backup, migrate, snapshot...), "" if none.
	Lock string `json:"lock,omitempty"`
	// HAState is pve-ha-manager's state of the guest's service ("" when
	// not in HA; "ignored" when in HA's config but managed directly).
	HAState  string `json:"hastate,omitempty"`
	Template bool   `json:"template,omitempty"`
	// Tags are the guest's Proxmox tags (see HasTag).
	Tags []string `json:"tags,omitempty"`
	// Usage is what pvestatd last measured (busy.go).
	Usage Usage `json:"-"`
}

// obs is the part of the row that, when it changes, ends a failed wake's
// back-off (see guestStatus.obs).
func (r Resource) obs() string {
	ha := r.HAState
	if ha == "ignored" {
		ha = ""
	}
	return obsKey(r.Status, r.Lock, ha)
}

// resourceRow is a /cluster/resources row as PVE sends it; numbers may
// come as strings.
type resourceRow struct {
	VMID     json.Number `json:"vmid"`
	Type     string      `json:"type"`
	Node     string      `json:"node"`
	Name     string      `json:"name"`
	Status   string      `json:"status"`
	Lock     string      `json:"lock"`
	HAState  string      `json:"hastate"`
	Template *pveBool    `json:"template"`
	Tags     string      `json:"tags"`
	usageRow
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

	// pollMu serialises polls: the ticker's and those a wake asks for.
	pollMu sync.Mutex

	mu     sync.RWMutex
	client *proxmox.Client
	nodes  []string
	byVMID map[int]Resource
	byName map[string][]Resource
	// known keeps what RRD-fed fields said last (name, template) for
	// rows that come without them: a node whose pvestatd stalled.
	known     map[int]Resource
	pollErr   error
	pollEnd   chan struct{} // closed (and replaced) when a poll ends
	polled    bool
	described bool
	subs      map[*Guest]struct{}
	simKey    string

	// nodeOps are the node wakes in progress, by node (see wol.go).
	nodeMu  sync.Mutex
	nodeOps map[string]*nodeOp
	// share, when set, shares activity and power ownership with other
	// Caddy instances (see shared.go).
	share atomic.Pointer[Share]
	// notify are the lifecycle event receivers (notify.go).
	notify notifiers
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
			known: map[int]Resource{}, subs: map[*Guest]struct{}{}, pollEnd: make(chan struct{}),
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
		_ = c.poll()
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// connect builds the client. It makes no request: the first poll tells
// whether the cluster answers.
func (c *Cluster) connect() error {
	c.mu.RLock()
	client := c.client
	c.mu.RUnlock()
	if client != nil {
		return nil
	}
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
	return nil
}

// describe reads /cluster/status once, after the first poll, for the log
// line naming the cluster and its nodes. It needs Sys.Audit on /, which a
// least-privilege token lacks: then nothing is logged above debug, and
// the nodes are those the poll names.
func (c *Cluster) describe() {
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.RequestTimeout)
	defer cancel()
	var rows []struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if err := c.Client().Get(ctx, "/cluster/status", &rows); err != nil {
		c.logger.Debug("not reading /cluster/status (optional; needs Sys.Audit on /)", zap.Error(err))
		c.logger.Info("Proxmox VE cluster polled", zap.Strings("nodes", c.Nodes()))
		return
	}
	name := ""
	for _, r := range rows {
		if r.Type == "cluster" {
			name = r.Name
		}
	}
	c.logger.Info("Proxmox VE cluster discovered", zap.String("pve_cluster", name), zap.Strings("nodes", c.Nodes()))
}

// Client is the API client (nil before Start connected).
func (c *Cluster) Client() *proxmox.Client {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.client
}

// Nodes are the node names the last poll saw guests on.
func (c *Cluster) Nodes() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return append([]string(nil), c.nodes...)
}

// poll reads /cluster/resources once and feeds every subscribed guest.
func (c *Cluster) poll() error {
	c.pollMu.Lock()
	defer c.pollMu.Unlock()
	ctx, cancel := context.WithTimeout(c.ctx, min(c.cfg.RequestTimeout, max(c.cfg.PollInterval*4, time.Second)))
	defer cancel()
	var rows []resourceRow
	err := c.Client().Get(ctx, "/cluster/resources?type=vm", &rows)
	now := time.Now()
	if err != nil {
		if c.ctx.Err() != nil {
			return err
		}
		metrics.polls.WithLabelValues(c.cfg.Name, "error").Inc()
		c.mu.Lock()
		first := c.pollErr == nil
		c.pollErr = err
		c.endPollLocked()
		c.mu.Unlock()
		// Log the first error of a run of failures, not every tick.
		switch {
		case first && isPermission(err):
			c.logger.Error("Proxmox VE refuses the API token: check token_id and token_secret; wakes fail until it is fixed", zap.Error(err))
		case first:
			c.logger.Warn("polling /cluster/resources failed; guest states are kept until it recovers", zap.Error(err))
		}
		return err
	}
	metrics.polls.WithLabelValues(c.cfg.Name, "ok").Inc()
	c.mu.Lock()
	byVMID, byName, known, nodes := indexRows(rows, c.known)
	recovered := c.pollErr != nil
	describe := !c.described
	c.described = true
	c.byVMID, c.byName, c.known, c.nodes, c.pollErr, c.polled = byVMID, byName, known, nodes, nil, true
	c.endPollLocked()
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
	if describe {
		go c.describe()
	}
	for _, g := range subs {
		res, err := c.Lookup(g.ref)
		g.observe(c, res, err, now)
	}
	return nil
}

// indexRows indexes a poll's guests by vmid and name. A row without its
// RRD-fed fields (status "unknown": the node's pvestatd stalled or the
// node dropped out) keeps the name and template flag last seen, so that a
// guest referenced by name stays found.
func indexRows(rows []resourceRow, prev map[int]Resource) (byVMID map[int]Resource, byName map[string][]Resource, known map[int]Resource, nodes []string) {
	byVMID = make(map[int]Resource, len(rows))
	byName = make(map[string][]Resource, len(rows))
	known = make(map[int]Resource, len(rows))
	seenNode := map[string]bool{}
	for _, r := range rows {
		if r.Type != "lxc" && r.Type != "qemu" {
			continue
		}
		id, err := r.VMID.Int64()
		if err != nil || id <= 0 {
			continue
		}
		res := Resource{VMID: int(id), Kind: r.Type, Node: r.Node, Name: r.Name, Status: r.Status, Lock: r.Lock, HAState: r.HAState, Tags: splitTags(r.Tags)}
		res.Usage = r.usage()
		if r.Template != nil {
			res.Template = bool(*r.Template)
		}
		if p, ok := prev[res.VMID]; ok && r.Name == "" && r.Template == nil {
			res.Name, res.Template = p.Name, p.Template
		}
		if res.Status == "" {
			res.Status = "unknown"
		}
		byVMID[res.VMID] = res
		known[res.VMID] = res
		if res.Name != "" {
			byName[res.Name] = append(byName[res.Name], res)
		}
		if res.Node != "" && !seenNode[res.Node] {
			seenNode[res.Node] = true
			nodes = append(nodes, res.Node)
		}
	}
	sort.Strings(nodes)
	return byVMID, byName, known, nodes
}

// Refresh polls the cluster now and resolves ref against that poll: a
// wake that finds the guest gone from its node asks where it went.
func (c *Cluster) Refresh(ctx context.Context, ref string) (Resource, error) {
	done := make(chan error, 1)
	go func() { done <- c.poll() }()
	select {
	case err := <-done:
		if err != nil {
			return Resource{}, err
		}
	case <-ctx.Done():
		return Resource{}, ctx.Err()
	}
	return c.Lookup(ref)
}

// endPollLocked wakes WaitReady callers to look at a poll's outcome.
func (c *Cluster) endPollLocked() {
	if c.pollEnd != nil {
		close(c.pollEnd)
	}
	c.pollEnd = make(chan struct{})
}

// WaitReady waits for the first successful poll. A poll refused for the
// token (401/403) ends the wait at once: no retry mends that.
func (c *Cluster) WaitReady(ctx context.Context) error {
	for {
		select {
		case <-c.ready:
			return nil
		default:
		}
		c.mu.RLock()
		pollErr, next := c.pollErr, c.pollEnd
		c.mu.RUnlock()
		if isPermission(pollErr) {
			return fmt.Errorf("cluster %s refuses the token: %w", c.cfg.Name, pollErr)
		}
		select {
		case <-c.ready:
			return nil
		case <-next:
		case <-ctx.Done():
			if pollErr != nil {
				return fmt.Errorf("cluster %s not reachable: %w", c.cfg.Name, pollErr)
			}
			return fmt.Errorf("cluster %s not polled yet: %w", c.cfg.Name, ctx.Err())
		case <-c.ctx.Done():
			return errors.New("cluster runtime stopped")
		}
	}
}

// errNotFound is a guest absent from the last poll.
var errNotFound = errors.New("guest not found in the cluster (or the token lacks VM.Audit on it)")

// templateError is a ref that names a template, with PVE's own refusal.
type templateError struct {
	res Resource
}

func (e *templateError) Error() string {
	return fmt.Sprintf("%s %d is a template: %s", kindLabel(e.res.Kind), e.res.VMID, templateReason(e.res.Kind))
}

// Lookup resolves a ref (vmid or name) against the last poll. A template
// is returned with a *templateError.
func (c *Cluster) Lookup(ref string) (Resource, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var r Resource
	if id, err := strconv.Atoi(ref); err == nil {
		var ok bool
		if r, ok = c.byVMID[id]; !ok {
			return Resource{}, fmt.Errorf("vmid %d: %w", id, errNotFound)
		}
	} else {
		rs := c.byName[ref]
		switch len(rs) {
		case 0:
			return Resource{}, fmt.Errorf("name %q: %w", ref, errNotFound)
		case 1:
			r = rs[0]
		default:
			return Resource{}, fmt.Errorf("name %q is ambiguous (%d guests): use the vmid", ref, len(rs))
		}
	}
	if r.Template {
		return r, &templateError{res: r}
	}
	return r, nil
}

// lookupPolled resolves ref against the last poll (templates come with a
// *templateError); polled is false before the first poll, when nothing is
// known.
func (c *Cluster) lookupPolled(ref string) (res Resource, polled bool, err error) {
	c.mu.RLock()
	polled = c.polled
	c.mu.RUnlock()
	if !polled {
		return Resource{}, false, nil
	}
	res, err = c.Lookup(ref)
	return res, true, err
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
