package wake

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testutil"
	"github.com/caddy-proxmox/caddy-proxmox/lxc"
	"github.com/caddy-proxmox/caddy-proxmox/pvesim"
)

// readyHandler is a proxmox_wake handler on a running simulated guest,
// ready to proxy, and the dynamic upstreams that follow it.
func readyHandler(b *testing.B) (*WakeHandler, *WakeUpstreams) {
	b.Helper()
	sim := pvesim.New(pvesim.Options{TaskDelay: 10 * time.Millisecond})
	port := testutil.FreePort(b)
	if err := sim.AddGuest(pvesim.GuestSpec{VMID: 100, Name: "web", IP: "127.0.0.77", Port: port, Running: true}); err != nil {
		b.Fatal(err)
	}
	url, err := sim.Listen("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sim.Close() })
	logger := zap.NewNop()
	c, err := lxc.AcquireCluster(lxc.ClusterConfig{Name: "bench", URLs: []string{url}, TokenID: sim.TokenID(), TokenSecret: sim.TokenSecret(), PollInterval: 100 * time.Millisecond}, logger)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Release() })
	cfg := lxc.GuestConfig{IdleTimeout: 10 * time.Minute, Port: port, ProbeInterval: 10 * time.Millisecond, TaskPollInterval: 10 * time.Millisecond}.WithDefaults()
	bind, err := lxc.AcquireGuest(c, "100", cfg, logger)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = bind.Release() })
	c.Start()
	g := bind.Guest()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.WaitReady(ctx); err != nil {
		b.Fatal(err)
	}
	h := &WakeHandler{Guest: "bench/100", EventsPath: defaultEventsPath, binding: bind, guest: g, port: port, logger: logger, hold: time.Minute}
	h.GuestOptions.Port = port
	return h, &WakeUpstreams{}
}

// caddyRequest is a request as Caddy's server hands it to handlers: with
// its replacer and variables table in the context.
func caddyRequest() *http.Request {
	r := httptest.NewRequest(http.MethodGet, "http://wake.test/bench", nil)
	repl := caddy.NewReplacer()
	ctx := context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl)
	ctx = context.WithValue(ctx, caddyhttp.VarsCtxKey, map[string]any{})
	return r.WithContext(ctx)
}

// BenchmarkWarmServeHTTP is what proxmox_wake adds to a request when its
// guest is up: ServeHTTP in front of a next handler that only asks the
// proxmox dynamic upstreams for the address, as reverse_proxy does. The
// request is made once (Caddy's server makes it, not the handler).
func BenchmarkWarmServeHTTP(b *testing.B) {
	h, u := readyHandler(b)
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		ups, err := u.GetUpstreams(r)
		if err != nil || len(ups) != 1 || ups[0].Dial == "" {
			b.Fatalf("upstreams %v: %v", ups, err)
		}
		return nil
	})
	w := httptest.NewRecorder()
	b.Run("serial", func(b *testing.B) {
		r := caddyRequest()
		b.ReportAllocs()
		for b.Loop() {
			if err := h.ServeHTTP(w, r, next); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			r := caddyRequest()
			w := httptest.NewRecorder()
			for pb.Next() {
				if err := h.ServeHTTP(w, r, next); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}
