package wakel4

import (
	"strconv"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-proxmox/caddy-proxmox/lxc"
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
//		probe tcp | udp <hex> | none     # udp: a query the UDP service answers; none: with ready_after
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
//		busy_if <metric> > <value>... [for <window>]  # repeatable
//		pre_stop_check <url> [<timeout>] # 2xx = may stop
//		stream_idle_timeout <duration>   # silent connections stop counting
//	}
//
// The options but max_datagrams are wake.GuestOptions, read by the same
// parser as the HTTP proxmox_wake's, and mean the same. A typical route
// hands the connection on to proxy:
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
	if _, _, err := splitGuest(h.Guest); err != nil {
		return d.Err(err.Error())
	}
	if d.NextArg() {
		p, err := strconv.Atoi(d.Val())
		if err != nil || p < 1 || p > 65535 {
			return d.Errf("port: want 1-65535, not '%s'", d.Val())
		}
		h.Port = p
	}
	if d.NextArg() {
		return d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		if err := h.unmarshalOption(d); err != nil {
			return err
		}
	}
	if h.Port == 0 {
		return d.Errf("proxmox_wake %s: port is required: the guest's service port, as the second argument or in the block", h.Guest)
	}
	return nil
}

// httpOnly are the HTTP proxmox_wake's options, refused here with the
// reason.
var httpOnly = map[string]string{
	"mode":              "a connection gets no loading page: it is held until the guest is ready (hold_timeout)",
	"page":              "a connection gets no page: a failed wake closes it and is logged",
	"events_path":       "there is no loading page, hence no progress stream",
	"show_details":      "there is no page to show details on: failures go to the log",
	"use_handle_errors": "layer4 has no handle_errors: a failed wake closes the connection",
	"ignore":            "a connection carries no request to match: route only what should wake the guest to this handler",
	"tag":               "a connection names no host to pick a guest by: a layer4 reference is literal",
}

func (h *Handler) unmarshalOption(d *caddyfile.Dispenser) error {
	opt := d.Val()
	if known, err := h.GuestOptions.UnmarshalOption(d, opt); known {
		if err == nil && opt == "probe" && h.Probe == lxc.ProbeHTTP {
			return d.Err(errProbeHTTP.Error())
		}
		return err
	}
	switch opt {
	case "max_datagrams":
		if !d.NextArg() {
			return d.ArgErr()
		}
		n, err := strconv.Atoi(d.Val())
		if err != nil || n < 0 {
			return d.Errf("max_datagrams: want a count, not '%s'", d.Val())
		}
		h.MaxDatagrams = n
		if d.NextArg() {
			return d.ArgErr()
		}
		return nil
	}
	if why, ok := httpOnly[opt]; ok {
		return d.Errf("'%s' is an option of the HTTP proxmox_wake: %s", opt, why)
	}
	return d.Errf("unknown layer4 proxmox_wake option '%s'", opt)
}

// Interface guard.
var _ caddyfile.Unmarshaler = (*Handler)(nil)
