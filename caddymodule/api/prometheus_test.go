package api

import (
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

func TestPrometheusCaddyfile(t *testing.T) {
	d := caddyfile.NewTestDispenser(`proxmox_api {
		insecure_no_auth
		prometheus https://prom.monitoring:9090/prefix {
			bearer_token_file /var/run/secrets/token
			header X-Scope-OrgID tenant-a
			header Authorization "Basic {env.PROM_AUTH}"
			interval 30s
		}
	}`)
	var h APIHandler
	if err := h.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	p := h.Prometheus
	if p == nil || p.URL != "https://prom.monitoring:9090/prefix" || p.BearerTokenFile != "/var/run/secrets/token" ||
		p.Headers["X-Scope-OrgID"] != "tenant-a" || p.Headers["Authorization"] != "Basic {env.PROM_AUTH}" || p.Interval != caddy.Duration(30*time.Second) {
		t.Fatalf("parsed %+v", p)
	}
	if err := h.Validate(); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PROM_AUTH", "dXNlcjpwdw==")
	if c := p.client(); c.Header.Get("Authorization") != "Basic dXNlcjpwdw==" || c.Header.Get("X-Scope-OrgID") != "tenant-a" {
		t.Errorf("client headers %v", c.Header)
	}

	d = caddyfile.NewTestDispenser("proxmox_api {\n insecure_no_auth\n prometheus http://prometheus:9090\n}")
	h = APIHandler{}
	if err := h.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	if h.Prometheus == nil || h.Prometheus.URL != "http://prometheus:9090" || h.Prometheus.interval() != 15*time.Second {
		t.Fatalf("parsed %+v", h.Prometheus)
	}
	other := *h.Prometheus
	other.Headers = map[string]string{"X": "y"}
	if h.Prometheus.key() == other.key() || (*PrometheusConfig)(nil).key() != "" {
		t.Error("backend keys do not tell settings apart")
	}
}

func TestPrometheusCaddyfileErrors(t *testing.T) {
	for in, says := range map[string]string{
		"prometheus":                                   "wrong argument count",
		"prometheus http://a http://b":                 "wrong argument count",
		"prometheus http://a {\n bogus\n}":             "unknown prometheus option",
		"prometheus http://a {\n header X\n}":          "header needs",
		"prometheus http://a {\n interval soon\n}":     "bad prometheus interval",
		"prometheus http://a {\n interval 1s 2s\n}":    "wrong argument count",
		"prometheus http://a {\n bearer_token_file\n}": "wrong argument count",
	} {
		d := caddyfile.NewTestDispenser("proxmox_api {\n" + in + "\n}")
		var h APIHandler
		if err := h.UnmarshalCaddyfile(d); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("%q: %v, want an error saying %q", in, err, says)
		}
	}
	for url, ok := range map[string]bool{
		"http://prometheus:9090": true, "https://x/prefix": true, "prometheus:9090": false, "ftp://x": false, "http://": false,
	} {
		h := APIHandler{InsecureNoAuth: true, Prometheus: &PrometheusConfig{URL: url}}
		if err := h.Validate(); (err == nil) != ok {
			t.Errorf("url %q: %v", url, err)
		}
	}
	h := APIHandler{InsecureNoAuth: true, Prometheus: &PrometheusConfig{URL: "http://p", Interval: caddy.Duration(time.Millisecond)}}
	if err := h.Validate(); err == nil {
		t.Error("1ms interval accepted")
	}
}
