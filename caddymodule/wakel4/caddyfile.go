package wakel4

import (
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// UnmarshalCaddyfile reads the handler inside a layer4 route:
//
//	proxmox_wake <cluster>/<vmid|name> [<port>] {
//		port <port>                      # the guest's service port (required)
//		idle_timeout <duration>          # 15m; 0 never stops
//		wake_timeout <duration>          # 2m
//		hold_timeout <duration>          # wake_timeout
//		stop_method shutdown|stop|suspend
//		stop_timeout <duration>          # 1m, graceful shutdown before forcing
//		address <host>                   # skip discovery
//		probe tcp | http [<path>] | none # none (with ready_after) for UDP-only services
//		probe_interval <duration>        # 100ms
//		ready_after <duration>
//		retry_backoff <duration> [<max>] # 10s 5m
//		task_poll_interval <duration>    # 200ms
//		max_pending <n>
//		max_datagrams <n>                # 16: UDP datagrams held per flow while waking
//		keep_warm [<days>] <HH:MM-HH:MM> # repeatable; starts the guest when it opens
//		time_zone <IANA name>            # of keep_warm; local time by default
//		depends_on <guest>...
//		leave_external
//	}
//
// The options mean what they mean for the HTTP proxmox_wake. A typical
// route hands the connection on to proxy:
//
//	layer4 {
//		:2222 {
//			route {
//				proxmox_wake lab/devbox 22
//				proxy {l4.proxmox.upstream}
//			}
//		}
//	}
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // handler name
	if !d.NextArg() {
		return d.ArgErr()
	}
	h.Guest = d.Val()
	if d.NextArg() {
		if err := h.setPort(d); err != nil {
			return err
		}
	}
	if d.NextArg() {
		return d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		if err := h.unmarshalOption(d); err != nil {
			return err
		}
	}
	return nil
}

// durations are the options that take one duration.
func (h *Handler) durations() map[string]*caddy.Duration {
	return map[string]*caddy.Duration{
		"wake_timeout": &h.WakeTimeout, "hold_timeout": &h.HoldTimeout, "stop_timeout": &h.StopTimeout,
		"probe_interval": &h.ProbeInterval, "ready_after": &h.ReadyAfter, "task_poll_interval": &h.TaskPollInterval,
	}
}

// strings are the options that take one word.
func (h *Handler) words() map[string]*string {
	return map[string]*string{"stop_method": &h.StopMethod, "address": &h.Address, "time_zone": &h.TimeZone}
}

func (h *Handler) unmarshalOption(d *caddyfile.Dispenser) error {
	opt := d.Val()
	if p, ok := h.durations()[opt]; ok {
		return durationArg(d, p)
	}
	if p, ok := h.words()[opt]; ok {
		return oneArg(d, func(v string) error { *p = v; return nil })
	}
	switch opt {
	case "port":
		return oneArg(d, func(string) error { return h.setPort(d) })
	case "idle_timeout":
		var dur caddy.Duration
		h.IdleTimeout = &dur
		return durationArg(d, &dur)
	case "max_pending", "max_datagrams":
		return oneArg(d, func(v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return d.Errf("%s: want a count, not '%s'", opt, v)
			}
			if opt == "max_pending" {
				h.MaxPending = n
			} else {
				h.MaxDatagrams = n
			}
			return nil
		})
	case "retry_backoff":
		args := d.RemainingArgs()
		if len(args) < 1 || len(args) > 2 {
			return d.ArgErr()
		}
		for i, a := range args {
			dur, err := caddy.ParseDuration(a)
			if err != nil {
				return d.Errf("bad duration '%s': %v", a, err)
			}
			if i == 0 {
				h.RetryBackoff = caddy.Duration(dur)
			} else {
				h.MaxBackoff = caddy.Duration(dur)
			}
		}
		return nil
	case "probe":
		args := d.RemainingArgs()
		if len(args) < 1 || len(args) > 2 {
			return d.ArgErr()
		}
		h.Probe = args[0]
		if len(args) == 2 {
			if h.Probe != "http" {
				return d.Errf("only the http probe takes a path")
			}
			h.ProbePath = args[1]
		}
		return nil
	case "keep_warm":
		args := d.RemainingArgs()
		if len(args) == 0 {
			return d.ArgErr()
		}
		h.KeepWarm = append(h.KeepWarm, strings.Join(args, " "))
		return nil
	case "depends_on":
		args := d.RemainingArgs()
		if len(args) == 0 {
			return d.ArgErr()
		}
		h.DependsOn = append(h.DependsOn, args...)
		return nil
	case "leave_external":
		if d.NextArg() {
			return d.ArgErr()
		}
		h.LeaveExternal = true
		return nil
	case "mode", "ignore", "events_path", "show_details", "tag", "page":
		return d.Errf("'%s' is an option of the HTTP proxmox_wake; a layer4 connection has no page, request or host name", opt)
	}
	return d.Errf("unknown layer4 proxmox_wake option '%s'", opt)
}

// setPort reads the current token as the service port.
func (h *Handler) setPort(d *caddyfile.Dispenser) error {
	p, err := strconv.Atoi(d.Val())
	if err != nil || p < 1 || p > 65535 {
		return d.Errf("port: want 1-65535, not '%s'", d.Val())
	}
	h.Port = p
	return nil
}

// oneArg reads exactly one argument and hands it to set.
func oneArg(d *caddyfile.Dispenser, set func(string) error) error {
	if !d.NextArg() {
		return d.ArgErr()
	}
	if err := set(d.Val()); err != nil {
		return err
	}
	if d.NextArg() {
		return d.ArgErr()
	}
	return nil
}

// durationArg reads exactly one duration into p.
func durationArg(d *caddyfile.Dispenser, p *caddy.Duration) error {
	return oneArg(d, func(v string) error {
		dur, err := caddy.ParseDuration(v)
		if err != nil {
			return d.Errf("bad duration '%s': %v", v, err)
		}
		*p = caddy.Duration(dur)
		return nil
	})
}

// Interface guard.
var _ caddyfile.Unmarshaler = (*Handler)(nil)
