package api

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-proxmox/caddy-proxmox/prom"
)

// PrometheusConfig is where KubeVirt's and node_exporter's metrics are
// read: VM I/O counters, cpu and memory, node load, uptime and root
// filesystem, and the rrddata history.
type PrometheusConfig struct {
	// URL of the Prometheus-compatible HTTP API (Prometheus, Thanos,
	// Mimir, VictoriaMetrics...), without /api/v1.
	URL string `json:"url"`
	// BearerTokenFile is sent as "Authorization: Bearer"; it is read
	// before every query so rotated (projected) tokens work.
	BearerTokenFile string `json:"bearer_token_file,omitempty"`
	// Headers are added to every query; values may be {env.NAME}
	// placeholders and are never logged.
	Headers map[string]string `json:"headers,omitempty"`
	// Interval between polls of current values and history refreshes
	// (default 15 s).
	Interval caddy.Duration `json:"interval,omitempty"`
}

// unmarshalPrometheus parses
//
//	prometheus <url> {
//		bearer_token_file <path>
//		header <name> <value>
//		interval <duration>
//	}
func unmarshalPrometheus(d *caddyfile.Dispenser) (*PrometheusConfig, error) {
	if !d.NextArg() {
		return nil, d.ArgErr()
	}
	p := &PrometheusConfig{URL: d.Val()}
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch d.Val() {
		case "bearer_token_file":
			if !d.NextArg() {
				return nil, d.ArgErr()
			}
			p.BearerTokenFile = d.Val()
		case "header":
			args := d.RemainingArgs()
			if len(args) != 2 {
				return nil, d.Errf("header needs <name> <value>")
			}
			if p.Headers == nil {
				p.Headers = map[string]string{}
			}
			p.Headers[args[0]] = args[1]
			continue
		case "interval":
			if !d.NextArg() {
				return nil, d.ArgErr()
			}
			dur, err := caddy.ParseDuration(d.Val())
			if err != nil {
				return nil, d.Errf("bad prometheus interval: %v", err)
			}
			p.Interval = caddy.Duration(dur)
		default:
			return nil, d.Errf("unknown prometheus option '%s'", d.Val())
		}
		if d.NextArg() {
			return nil, d.ArgErr()
		}
	}
	return p, nil
}

// validate checks what can be checked without the network.
func (p *PrometheusConfig) validate() error {
	u, err := url.Parse(p.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("proxmox_api: prometheus url %q must be http(s)://host[:port][/prefix]", p.URL)
	}
	if p.Interval < 0 || (p.Interval > 0 && time.Duration(p.Interval) < time.Second) {
		return fmt.Errorf("proxmox_api: prometheus interval must be at least 1s")
	}
	return nil
}

func (p *PrometheusConfig) interval() time.Duration {
	if p.Interval > 0 {
		return time.Duration(p.Interval)
	}
	return 15 * time.Second
}

// client builds the query client, resolving placeholders in headers.
func (p *PrometheusConfig) client() *prom.Client {
	repl := caddy.NewReplacer()
	h := http.Header{}
	for k, v := range p.Headers {
		h.Set(k, repl.ReplaceKnown(v, ""))
	}
	return &prom.Client{URL: p.URL, BearerTokenFile: repl.ReplaceKnown(p.BearerTokenFile, ""), Header: h}
}

// key identifies the settings in the shared backend's key.
func (p *PrometheusConfig) key() string {
	if p == nil {
		return ""
	}
	names := make([]string, 0, len(p.Headers))
	for k := range p.Headers {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "%s\x00%s\x00%d", p.URL, p.BearerTokenFile, p.Interval)
	for _, k := range names {
		fmt.Fprintf(&b, "\x00%s=%s", k, p.Headers[k])
	}
	return b.String()
}

// redactURL drops user info from a URL for logs.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable)"
	}
	u.User = nil
	u.RawQuery = ""
	return u.String()
}
