package wake

import (
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("proxmox_wake", parseWakeCaddyfile)
	// Before reverse_proxy, so that a plain site block works without an
	// order option or a route block. proxmox_api sits before abort,
	// earlier still; both can share a site.
	httpcaddyfile.RegisterDirectiveOrder("proxmox_wake", httpcaddyfile.Before, "reverse_proxy")
}

// parseWakeCaddyfile reads:
//
//	proxmox_wake <cluster>/<vmid|name> {
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
//		keep_warm [<days>] <HH:MM-HH:MM> # repeatable
//		depends_on <guest>...
//		leave_external
//		ignore <@matcher> | ignore { <matchers> }   # repeatable
//		events_path <path>
//		show_details                     # node, address and error text on the page
//	}
func parseWakeCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	m := new(WakeHandler)
	d := h.Dispenser
	d.Next() // directive
	if !d.NextArg() {
		return nil, d.ArgErr()
	}
	m.Guest = d.Val()
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	for d.NextBlock(0) {
		opt := d.Val()
		switch opt {
		case "idle_timeout", "wake_timeout", "hold_timeout", "stop_timeout", "probe_interval", "ready_after", "task_poll_interval":
			dur, err := pmxDurationArg(d)
			if err != nil {
				return nil, err
			}
			cd := caddy.Duration(dur)
			switch opt {
			case "idle_timeout":
				m.IdleTimeout = &cd
			case "wake_timeout":
				m.WakeTimeout = cd
			case "hold_timeout":
				m.HoldTimeout = cd
			case "stop_timeout":
				m.StopTimeout = cd
			case "probe_interval":
				m.ProbeInterval = cd
			case "ready_after":
				m.ReadyAfter = cd
			case "task_poll_interval":
				m.TaskPollInterval = cd
			}
		case "retry_backoff":
			args := d.RemainingArgs()
			if len(args) < 1 || len(args) > 2 {
				return nil, d.ArgErr()
			}
			for i, a := range args {
				dur, err := caddy.ParseDuration(a)
				if err != nil {
					return nil, d.Errf("bad duration '%s': %v", a, err)
				}
				if i == 0 {
					m.RetryBackoff = caddy.Duration(dur)
				} else {
					m.MaxBackoff = caddy.Duration(dur)
				}
			}
		case "stop_method", "address", "mode", "events_path":
			if !d.NextArg() {
				return nil, d.ArgErr()
			}
			switch opt {
			case "stop_method":
				m.StopMethod = d.Val()
			case "address":
				m.Address = d.Val()
			case "mode":
				m.Mode = d.Val()
			case "events_path":
				m.EventsPath = d.Val()
			}
			if d.NextArg() {
				return nil, d.ArgErr()
			}
		case "port", "max_pending":
			if !d.NextArg() {
				return nil, d.ArgErr()
			}
			n, err := strconv.Atoi(d.Val())
			if err != nil {
				return nil, d.Errf("%s: %v", opt, err)
			}
			if opt == "port" {
				m.Port = n
			} else {
				m.MaxPending = n
			}
			if d.NextArg() {
				return nil, d.ArgErr()
			}
		case "probe":
			if !d.NextArg() {
				return nil, d.ArgErr()
			}
			m.Probe = d.Val()
			if d.NextArg() {
				if m.Probe != "http" {
					return nil, d.Errf("only the http probe takes a path")
				}
				m.ProbePath = d.Val()
			}
			if d.NextArg() {
				return nil, d.ArgErr()
			}
		case "keep_warm":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return nil, d.ArgErr()
			}
			w := args[0]
			for _, a := range args[1:] {
				w += " " + a
			}
			m.KeepWarm = append(m.KeepWarm, w)
		case "depends_on":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return nil, d.ArgErr()
			}
			m.DependsOn = append(m.DependsOn, args...)
		case "leave_external", "show_details":
			if d.NextArg() {
				return nil, d.ArgErr()
			}
			if opt == "show_details" {
				m.ShowDetails = true
			} else {
				m.LeaveExternal = true
			}
		case "ignore":
			var set caddy.ModuleMap
			if d.NextArg() {
				d.Prev()
				ms, ok, err := h.MatcherToken()
				if err != nil {
					return nil, err
				}
				if !ok || ms == nil {
					return nil, d.Errf("ignore needs a named matcher (@name) or a matcher block")
				}
				set = ms
				if d.NextArg() {
					return nil, d.ArgErr()
				}
			} else {
				ms, err := caddyhttp.ParseCaddyfileNestedMatcherSet(d)
				if err != nil {
					return nil, err
				}
				if len(ms) == 0 {
					return nil, d.Errf("ignore needs a named matcher (@name) or a matcher block")
				}
				set = ms
			}
			m.IgnoreRaw = append(m.IgnoreRaw, set)
		default:
			return nil, d.Errf("unknown proxmox_wake option '%s'", opt)
		}
	}
	return m, nil
}

var _ caddyfile.Unmarshaler = (*WakeUpstreams)(nil)
