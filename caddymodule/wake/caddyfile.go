package wake

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/caddy-proxmox/caddy-proxmox/lxc"
)

func init() {
	httpcaddyfile.RegisterGlobalOption("proxmox", parseProxmoxGlobal)
	httpcaddyfile.RegisterHandlerDirective("proxmox_wake", parseWakeCaddyfile)
	// Before reverse_proxy, so that a plain site block works without an
	// order option or a route block. proxmox_api sits before abort,
	// earlier still; both can share a site.
	httpcaddyfile.RegisterDirectiveOrder("proxmox_wake", httpcaddyfile.Before, "reverse_proxy")
}

// parseWakeCaddyfile sets up a proxmox_wake handler from its directive
// (see WakeHandler.UnmarshalCaddyfile) and resolves the named matchers of
// its ignore lines, which only the site block knows.
func parseWakeCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	m := new(WakeHandler)
	if err := m.UnmarshalCaddyfile(h.Dispenser); err != nil {
		return nil, err
	}
	if err := m.FinalizeUnmarshalCaddyfile(h); err != nil {
		return nil, err
	}
	return m, nil
}

// UnmarshalCaddyfile reads:
//
//	proxmox_wake <cluster>/<vmid|name|placeholders> {
//		tag <tag>                        # placeholders only: the opt-in tag (caddy-wake)
//		idle_timeout <duration>          # 15m; 0 never stops
//		wake_timeout <duration>          # 2m
//		hold_timeout <duration>          # 60s
//		stop_method shutdown|stop|suspend
//		stop_timeout <duration>          # 1m, graceful shutdown before forcing
//		address <host>                   # skip discovery
//		port <port>                      # 80
//		probe tcp | http [<path>] | none
//		probe_interval <duration>        # 100ms
//		ready_after <duration>
//		retry_backoff <duration> [<max>] # 10s 5m
//		task_poll_interval <duration>    # 200ms
//		max_pending <n>
//		mode auto|page|hold
//		keep_warm [<days>] <HH:MM-HH:MM> # repeatable; starts the guest when it opens
//		time_zone <IANA name>            # of keep_warm; local time by default
//		depends_on <guest>...
//		leave_external
//		ignore <@matcher> | ignore { <matchers> }   # repeatable
//		events_path <path>
//		show_details                     # node, address and error text on the page
//		busy_if <metric> > <value>... [for <window>]  # repeatable; see lxc.ParseBusyIf
//		pre_stop_check <url> [<timeout>] # 2xx = may stop
//		stream_idle_timeout <duration>   # silent streams stop counting
//		page <file>                      # html/template for the loading and error page
//		use_handle_errors                # error answers go to handle_errors
//	}
//
// The options from idle_timeout to stream_idle_timeout but mode, ignore,
// events_path and show_details are GuestOptions, read by its
// UnmarshalOption as layer4's proxmox_wake reads them.
//
// An ignore line naming a matcher (@name, or a path) is only recorded
// here: FinalizeUnmarshalCaddyfile resolves it with the site's matcher
// definitions.
func (m *WakeHandler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive
	if !d.NextArg() {
		return d.ArgErr()
	}
	m.Guest = d.Val()
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		opt := d.Val()
		if known, err := m.GuestOptions.UnmarshalOption(d, opt); known {
			if err == nil && opt == "probe" && m.Probe == lxc.ProbeUDP {
				return d.Err(errProbeUDP.Error())
			}
			if err != nil {
				return err
			}
			continue
		}
		switch opt {
		case "mode", "events_path", "tag", "page":
			p := map[string]*string{"mode": &m.Mode, "events_path": &m.EventsPath, "tag": &m.Tag, "page": &m.Page}[opt]
			if err := oneArg(d, func(v string) error { *p = v; return nil }); err != nil {
				return err
			}
		case "show_details", "use_handle_errors":
			if d.NextArg() {
				return d.ArgErr()
			}
			if opt == "show_details" {
				m.ShowDetails = true
			} else {
				m.UseHandleErrors = true
			}
		case "ignore":
			ignore := d.Token()
			if d.NextArg() {
				// The set is filled in by FinalizeUnmarshalCaddyfile.
				m.namedIgnores = append(m.namedIgnores, namedIgnore{at: len(m.IgnoreRaw), tokens: []caddyfile.Token{ignore, d.Token()}})
				m.IgnoreRaw = append(m.IgnoreRaw, nil)
				if d.NextArg() {
					return d.ArgErr()
				}
				break
			}
			ms, err := caddyhttp.ParseCaddyfileNestedMatcherSet(d)
			if err != nil {
				return err
			}
			if len(ms) == 0 {
				return d.Errf("ignore needs a named matcher (@name) or a matcher block")
			}
			m.IgnoreRaw = append(m.IgnoreRaw, ms)
		default:
			return d.Errf("unknown proxmox_wake option '%s'", opt)
		}
	}
	return nil
}

// namedIgnore is an ignore line naming its matcher: its place in
// IgnoreRaw and its tokens (ignore, then the matcher token).
type namedIgnore struct {
	at     int
	tokens []caddyfile.Token
}

// FinalizeUnmarshalCaddyfile resolves the ignore lines that name a matcher
// (@name, defined in the site block, or a path) with the site's matcher
// definitions, as reverse_proxy finalizes its handle_response blocks.
func (m *WakeHandler) FinalizeUnmarshalCaddyfile(helper httpcaddyfile.Helper) error {
	for _, n := range m.namedIgnores {
		h := helper
		h.Dispenser = caddyfile.NewDispenser(n.tokens)
		h.Next() // ignore
		ms, ok, err := h.MatcherToken()
		if err != nil {
			return err
		}
		if !ok || ms == nil {
			return h.Errf("ignore needs a named matcher (@name) or a matcher block")
		}
		m.IgnoreRaw[n.at] = ms
	}
	m.namedIgnores = nil
	return nil
}

// parseProxmoxGlobal sets up the proxmox app from the global option:
//
//	proxmox {
//		share {                           # act as one with other Caddy instances on the same storage
//			interval <duration>           # 10s: activity written at most this often per guest
//		}
//		cluster <name> {
//			url <https://host:8006>       # repeatable: failover entry points
//			token_id <user@realm!name>
//			token_secret <secret>
//			tls_trusted_ca_certs <pem_file...>
//			tls_insecure_skip_verify
//			poll_interval <duration>
//			request_timeout <duration>
//			simulate                      # embedded demo cluster instead
//			wake_nodes {                  # wake a guest's powered-off node first
//				join_timeout <duration>   # 5m
//				node <node> <mac> [<broadcast[:port]>]  # Caddy sends the packet
//			}
//		}
//	}
//
// Several proxmox blocks merge.
func parseProxmoxGlobal(d *caddyfile.Dispenser, existing any) (any, error) {
	app := new(ProxmoxApp)
	if existing != nil {
		if prev, ok := existing.(httpcaddyfile.App); ok {
			if err := json.Unmarshal(prev.Value, app); err != nil {
				return nil, err
			}
		}
	}
	if err := app.UnmarshalCaddyfile(d); err != nil {
		return nil, err
	}
	return httpcaddyfile.App{Name: "proxmox", Value: caddyconfig.JSON(app, nil)}, nil
}

// UnmarshalCaddyfile reads a proxmox global option block.
func (a *ProxmoxApp) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // option name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		if d.Val() == "share" {
			s, err := unmarshalShare(d)
			if err != nil {
				return err
			}
			a.Share = s
			continue
		}
		if d.Val() != "cluster" {
			return d.Errf("unknown proxmox option '%s' (want cluster or share)", d.Val())
		}
		if !d.NextArg() {
			return d.ArgErr()
		}
		pc := &PVECluster{Name: d.Val()}
		if d.NextArg() {
			return d.ArgErr()
		}
		for _, x := range a.Clusters {
			if x.Name == pc.Name {
				return d.Errf("cluster %q defined twice", pc.Name)
			}
		}
		for nesting := d.Nesting(); d.NextBlock(nesting); {
			opt := d.Val()
			switch opt {
			case "url":
				args := d.RemainingArgs()
				if len(args) == 0 {
					return d.ArgErr()
				}
				pc.URLs = append(pc.URLs, args...)
			case "token_id", "token_secret":
				if !d.NextArg() {
					return d.ArgErr()
				}
				if opt == "token_id" {
					pc.TokenID = d.Val()
				} else {
					pc.TokenSecret = d.Val()
				}
				if d.NextArg() {
					return d.ArgErr()
				}
			case "tls_trusted_ca_certs":
				args := d.RemainingArgs()
				if len(args) == 0 {
					return d.ArgErr()
				}
				pc.TLSTrustedCACerts = append(pc.TLSTrustedCACerts, args...)
			case "tls_insecure_skip_verify", "simulate":
				if d.NextArg() {
					return d.ArgErr()
				}
				if opt == "simulate" {
					pc.Simulate = true
				} else {
					pc.TLSInsecureSkipVerify = true
				}
			case "poll_interval", "request_timeout":
				dur, err := durationArg(d)
				if err != nil {
					return err
				}
				if opt == "poll_interval" {
					pc.PollInterval = caddy.Duration(dur)
				} else {
					pc.RequestTimeout = caddy.Duration(dur)
				}
			case "wake_nodes":
				w, err := unmarshalWakeNodes(d)
				if err != nil {
					return err
				}
				pc.WakeNodes = w
			default:
				return d.Errf("unknown cluster option '%s'", opt)
			}
		}
		a.Clusters = append(a.Clusters, pc)
	}
	return nil
}

// durationArg reads exactly one duration argument.
func durationArg(d *caddyfile.Dispenser) (time.Duration, error) {
	if !d.NextArg() {
		return 0, d.ArgErr()
	}
	dur, err := caddy.ParseDuration(d.Val())
	if err != nil {
		return 0, d.Errf("bad duration '%s': %v", d.Val(), err)
	}
	if d.NextArg() {
		return 0, d.ArgErr()
	}
	return dur, nil
}

// UnmarshalCaddyfile reads "dynamic proxmox [<cluster>/<guest>] [<port>]"
// or a block with guest and port.
func (u *WakeUpstreams) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // "proxmox"
	for d.NextArg() {
		if err := u.setArg(d, d.Val()); err != nil {
			return err
		}
	}
	for d.NextBlock(0) {
		opt := d.Val()
		if !d.NextArg() {
			return d.ArgErr()
		}
		switch opt {
		case "port":
			if err := u.setArg(d, d.Val()); err != nil {
				return err
			}
		case "guest":
			u.Guest = d.Val()
		default:
			return d.Errf("unknown dynamic proxmox option '%s'", opt)
		}
		if d.NextArg() {
			return d.ArgErr()
		}
	}
	return nil
}

func (u *WakeUpstreams) setArg(d *caddyfile.Dispenser, v string) error {
	if strings.Contains(v, "/") {
		u.Guest = v
		return nil
	}
	p, err := strconv.Atoi(v)
	if err != nil || p < 1 || p > 65535 {
		return d.Errf("dynamic proxmox: %q is neither a port nor <cluster>/<guest>", v)
	}
	u.Port = p
	return nil
}

// Interface guards.
var (
	_ caddyfile.Unmarshaler = (*ProxmoxApp)(nil)
	_ caddyfile.Unmarshaler = (*WakeHandler)(nil)
	_ caddyfile.Unmarshaler = (*WakeUpstreams)(nil)
)
