// Package wake is wake on request for Proxmox VE guests, as Caddy
// modules: the proxmox app (a pool of Proxmox VE clusters, set up by the
// proxmox global option), the proxmox_wake HTTP handler, the proxmox
// dynamic upstreams of reverse_proxy and the admin.api.proxmox admin
// endpoints. The guests' runtimes live in package lxc.
package wake

import (
	"errors"
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/caddy-proxmox/caddy-proxmox/lxc"
)

func init() {
	caddy.RegisterModule(ProxmoxApp{})
}

// ProxmoxApp is the proxmox app: a pool of Proxmox VE clusters that the
// proxmox_wake handler wakes guests on. Each cluster is polled once per
// poll_interval with one /cluster/resources call, whatever the number of
// guests. Provisioning only builds clients; nothing is contacted, and no
// guest is ever started or stopped, before Start. The guests' wakes,
// readiness, failures and sleeps are Caddy events (see appEvents).
type ProxmoxApp struct {
	// Clusters are the Proxmox VE clusters, by unique name.
	Clusters []*PVECluster `json:"clusters,omitempty"`
	// Share, when set, shares guests' activity and start/stop ownership
	// with other Caddy instances through Caddy's storage.
	Share *Share `json:"share,omitempty"`

	runtimes map[string]*lxc.Cluster
	logger   *zap.Logger
	// share is Share on this config's storage.
	share *lxc.Share
	// events emits the guests' lifecycle as Caddy events (events.go).
	events appEvents
}

// PVECluster is how to reach one Proxmox VE cluster.
type PVECluster struct {
	// Name is used in proxmox_wake references (<name>/<vmid>).
	Name string `json:"name"`
	// URLs are API entry points (https://pve1:8006); the others are
	// failover targets when the first is unreachable.
	URLs []string `json:"urls,omitempty"`
	// TokenID is user@realm!name.
	TokenID string `json:"token_id,omitempty"`
	// TokenSecret is the token's secret; placeholders such as
	// {env.PVE_TOKEN_SECRET} are expanded. It is never logged.
	TokenSecret string `json:"token_secret,omitempty"`
	// TLSTrustedCACerts are PEM files of CAs trusted for the API.
	TLSTrustedCACerts []string `json:"tls_trusted_ca_certs,omitempty"`
	// TLSInsecureSkipVerify disables certificate verification.
	TLSInsecureSkipVerify bool `json:"tls_insecure_skip_verify,omitempty"`
	// PollInterval is the period of the resources poll (5s).
	PollInterval caddy.Duration `json:"poll_interval,omitempty"`
	// RequestTimeout bounds each API call (15s).
	RequestTimeout caddy.Duration `json:"request_timeout,omitempty"`
	// Simulate serves the cluster from an embedded simulator with demo
	// guests (LXC 100 "web", 101 "wiki", QEMU 200 "app"; wiki and app
	// tagged caddy-wake), for trying things out. It excludes urls and
	// token.
	Simulate bool `json:"simulate,omitempty"`
	// WakeNodes, when set, wakes a guest's powered-off node first.
	WakeNodes *WakeNodes `json:"wake_nodes,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (ProxmoxApp) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "proxmox",
		New: func() caddy.Module { return new(ProxmoxApp) },
	}
}

// Provision builds the cluster runtimes (shared with the previous config
// when unchanged) and registers the metrics. It contacts nothing.
func (a *ProxmoxApp) Provision(ctx caddy.Context) error {
	a.logger = ctx.Logger()
	if err := a.Validate(); err != nil {
		return err
	}
	if err := lxc.RegisterMetrics(ctx.GetMetricsRegistry()); err != nil {
		return fmt.Errorf("registering proxmox metrics: %w", err)
	}
	a.share = a.Share.runtime(ctx.Storage())
	if err := a.events.provision(ctx); err != nil {
		return err
	}
	repl := caddy.NewReplacer()
	a.runtimes = map[string]*lxc.Cluster{}
	for _, pc := range a.Clusters {
		cfg := lxc.ClusterConfig{
			Name:                  pc.Name,
			URLs:                  pc.URLs,
			TokenID:               repl.ReplaceKnown(pc.TokenID, ""),
			TokenSecret:           repl.ReplaceKnown(pc.TokenSecret, ""),
			TLSTrustedCACerts:     pc.TLSTrustedCACerts,
			TLSInsecureSkipVerify: pc.TLSInsecureSkipVerify,
			PollInterval:          time.Duration(pc.PollInterval),
			RequestTimeout:        time.Duration(pc.RequestTimeout),
			Simulate:              pc.Simulate,
			WakeNodes:             pc.WakeNodes.runtime(),
		}
		for i, u := range cfg.URLs {
			cfg.URLs[i] = repl.ReplaceKnown(u, "")
		}
		c, err := lxc.AcquireCluster(cfg, a.logger)
		if err != nil {
			_ = a.Cleanup()
			return fmt.Errorf("proxmox: %w", err)
		}
		a.runtimes[pc.Name] = c
		if pc.TLSInsecureSkipVerify {
			a.logger.Warn("TLS verification disabled for the Proxmox VE API", zap.String("cluster", pc.Name))
		}
	}
	return nil
}

// Validate checks names and settings.
func (a *ProxmoxApp) Validate() error {
	if err := a.Share.validate(); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, pc := range a.Clusters {
		if pc == nil {
			return errors.New("proxmox: empty cluster")
		}
		if seen[pc.Name] {
			return fmt.Errorf("proxmox: cluster %q defined twice", pc.Name)
		}
		seen[pc.Name] = true
		cfg := lxc.ClusterConfig{Name: pc.Name, URLs: pc.URLs, TokenID: pc.TokenID, TokenSecret: pc.TokenSecret,
			PollInterval: time.Duration(pc.PollInterval), Simulate: pc.Simulate, WakeNodes: pc.WakeNodes.runtime()}
		if err := cfg.Validate(); err != nil {
			return fmt.Errorf("proxmox: %w", err)
		}
	}
	return nil
}

// Start begins node discovery and polling of every cluster, and arms the
// guests' keep_warm starts.
func (a *ProxmoxApp) Start() error {
	a.events.start(a.runtimes)
	for _, c := range a.runtimes {
		c.SetShare(a.share)
		c.Start()
		for _, g := range c.Guests() {
			g.ScheduleKeepWarm()
		}
	}
	return nil
}

// Stop ends this config's events; the runtimes are shared with the next
// config and end in Cleanup when no config uses them any more.
func (a *ProxmoxApp) Stop() error {
	a.events.stop()
	return nil
}

// Cleanup releases this config's hold on the cluster runtimes.
func (a *ProxmoxApp) Cleanup() error {
	a.events.stop()
	for name, c := range a.runtimes {
		_ = c.Release()
		delete(a.runtimes, name)
	}
	return nil
}

// Cluster returns the runtime of a configured cluster.
func (a *ProxmoxApp) Cluster(name string) (*lxc.Cluster, error) {
	c, ok := a.runtimes[name]
	if !ok {
		return nil, fmt.Errorf("no cluster %q in the proxmox global option", name)
	}
	return c, nil
}

// Guests returns the runtimes of the guests of this app's clusters that
// a proxmox_wake handler (or a dependency of one) binds; none on a nil
// app (no proxmox global option).
func (a *ProxmoxApp) Guests() []*lxc.Guest {
	if a == nil {
		return nil
	}
	var out []*lxc.Guest
	for _, c := range a.runtimes {
		out = append(out, c.Guests()...)
	}
	return out
}

// FindGuest returns the runtime of guest ref (as configured, or its vmid
// or name) of the named cluster, or nil (always on a nil app).
func (a *ProxmoxApp) FindGuest(cluster, ref string) *lxc.Guest {
	if a == nil {
		return nil
	}
	c, ok := a.runtimes[cluster]
	if !ok {
		return nil
	}
	return c.FindGuest(ref)
}

// Interface guards.
var (
	_ caddy.App          = (*ProxmoxApp)(nil)
	_ caddy.Provisioner  = (*ProxmoxApp)(nil)
	_ caddy.Validator    = (*ProxmoxApp)(nil)
	_ caddy.CleanerUpper = (*ProxmoxApp)(nil)
)
