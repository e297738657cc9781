package integration

import (
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
)

// loadCaddy starts (or reloads) the in-process Caddy and waits until the
// API answers.
func loadCaddy(caddyfile string) error {
	cfgJSON, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), nil)
	if err != nil {
		return fmt.Errorf("adapting: %w", err)
	}
	if err := caddy.Load(cfgJSON, true); err != nil {
		return fmt.Errorf("loading: %w", err)
	}
	c := testcaddy.Client()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if res, err := c.Get(base + "/api2/json/version"); err == nil {
			res.Body.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("caddy did not answer on %s", base)
}
