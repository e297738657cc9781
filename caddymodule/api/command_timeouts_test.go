package api

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// TestCommandServerTimeouts: `caddy proxmox-api` serves with the limits the
// README recommends against slow clients.
func TestCommandServerTimeouts(t *testing.T) {
	cfg, err := apiConfig(":8006", APIHandler{Simulate: true, InsecureNoAuth: true}, false)
	if err != nil {
		t.Fatal(err)
	}
	var app caddyhttp.App
	if err := json.Unmarshal(cfg.AppsRaw["http"], &app); err != nil {
		t.Fatal(err)
	}
	srv := app.Servers["proxmox"]
	if srv == nil || srv.ReadHeaderTimeout != caddy.Duration(10*time.Second) || srv.ReadIdleTimeout != caddy.Duration(10*time.Second) ||
		srv.ReadMinRate != 1024 || srv.IdleTimeout != caddy.Duration(2*time.Minute) || srv.ReadTimeout != 0 {
		t.Fatalf("server %+v", srv)
	}
}
