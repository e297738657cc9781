package hostile_test

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	// Caddyfile.example's layer4 route hands connections to caddy-l4's
	// proxy, which xcaddy.sh builds into ./caddy.
	_ "github.com/mholt/caddy-l4/modules/l4proxy"
)

// TestExampleTimeouts: Caddyfile.example carries the slow-client limits
// the README recommends, on every server it defines.
func TestExampleTimeouts(t *testing.T) {
	src, err := os.ReadFile("../../../Caddyfile.example")
	if err != nil {
		t.Fatal(err)
	}
	raw, _, err := caddyconfig.GetAdapter("caddyfile").Adapt(src, map[string]any{"filename": "Caddyfile.example"})
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Apps struct {
			HTTP caddyhttp.App `json:"http"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Apps.HTTP.Servers) == 0 {
		t.Fatal("no servers")
	}
	for name, srv := range cfg.Apps.HTTP.Servers {
		if srv.ReadHeaderTimeout != caddy.Duration(10*time.Second) || srv.ReadIdleTimeout != caddy.Duration(10*time.Second) ||
			srv.ReadMinRate != 1024 || srv.IdleTimeout != caddy.Duration(2*time.Minute) || srv.ReadTimeout != 0 {
			t.Errorf("server %s: read_header %v read_body_idle %v/%d idle %v read_body %v", name,
				srv.ReadHeaderTimeout, srv.ReadIdleTimeout, srv.ReadMinRate, srv.IdleTimeout, srv.ReadTimeout)
		}
	}
}
