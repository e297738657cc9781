package lxc

import (
	"strconv"

	"github.com/caddyserver/caddy/v2"
	proxmox "github.com/luthermonson/go-proxmox"
	"go.uber.org/zap"

	"github.com/caddy-proxmox/caddy-proxmox/pvesim"
)

// sims holds the embedded demo clusters, so that a reload keeps the
// simulated guests (and their state) running.
var sims = caddy.NewUsagePool()

type simRuntime struct {
	sim *pvesim.Sim
	url string
}

func (s *simRuntime) Destruct() error { return s.sim.Close() }

// simulatedClient starts (or shares) the demo simulator for this cluster
// and returns a client for it.
func (c *Cluster) simulatedClient() (*proxmox.Client, error) {
	key := "sim/" + c.cfg.Name
	v, loaded, err := sims.LoadOrNew(key, func() (caddy.Destructor, error) {
		sim := pvesim.NewDemo(c.cfg.Name)
		url, err := sim.Listen("127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		return &simRuntime{sim: sim, url: url}, nil
	})
	if err != nil {
		return nil, err
	}
	rt := v.(*simRuntime)
	c.mu.Lock()
	c.simKey = key
	c.mu.Unlock()
	if !loaded {
		var guests []zap.Field
		for _, id := range rt.sim.GuestIDs() {
			guests = append(guests, zap.String(strconv.Itoa(id), rt.sim.Addr(id)))
		}
		c.logger.Warn("SIMULATED Proxmox VE cluster: no real guests are started or stopped; remove 'simulate' and set url/token_id/token_secret for a real cluster",
			zap.String("api", rt.url), zap.Dict("guests", guests...))
	}
	return newClient(c.cfg, []string{rt.url}, rt.sim.TokenID(), rt.sim.TokenSecret())
}
