package wake

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/caddy-proxmox/caddy-proxmox/lxc"
)

func init() {
	caddy.RegisterModule(WakeUpstreams{})
}

// WakeUpstreams (reverse_proxy dynamic proxmox) proxies to the address of
// the guest that proxmox_wake made ready for this request. It is
// instantaneous: the address is already known, nothing is looked up.
//
//	reverse_proxy {
//		dynamic proxmox [<cluster>/<guest>] [<port>]
//	}
type WakeUpstreams struct {
	// Port overrides proxmox_wake's port.
	Port int `json:"port,omitempty"`
	// Guest ("<cluster>/<vmid|name>") is used when no proxmox_wake ran
	// before: the guest is proxied to only while ready, never woken.
	Guest string `json:"guest,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (WakeUpstreams) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.reverse_proxy.upstreams.proxmox",
		New: func() caddy.Module { return new(WakeUpstreams) },
	}
}

// errNoGuest tells the user how to fix the config.
var errNoGuest = errors.New("dynamic proxmox: no ready guest for this request (put proxmox_wake before reverse_proxy, or name a guest)")

// GetUpstreams returns the ready guest's address.
func (u *WakeUpstreams) GetUpstreams(r *http.Request) ([]*reverseproxy.Upstream, error) {
	var addr string
	if g, ok := caddyhttp.GetVar(r.Context(), wakeVarGuest).(*lxc.Guest); ok {
		if u.Port == 0 {
			addr, _ = caddyhttp.GetVar(r.Context(), wakeVarUpstream).(string)
		} else {
			addr, _ = g.Upstream(u.Port)
		}
	} else if u.Guest != "" {
		cluster, ref, _ := strings.Cut(u.Guest, "/")
		if g := lxc.FindGuest(cluster, ref); g != nil {
			addr, _ = g.Upstream(u.Port)
		}
	}
	if addr == "" {
		return nil, errNoGuest
	}
	// A fresh value each time: reverse_proxy fills in the host state of
	// dynamic upstreams per request, so a shared one would be a data race.
	return []*reverseproxy.Upstream{{Dial: addr}}, nil
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

// Validate checks the guest reference.
func (u *WakeUpstreams) Validate() error {
	if u.Guest != "" {
		cluster, ref, ok := strings.Cut(u.Guest, "/")
		if !ok || cluster == "" {
			return fmt.Errorf("dynamic proxmox: guest %q must be <cluster>/<vmid|name>", u.Guest)
		}
		return lxc.ValidateRef(ref)
	}
	return nil
}

// Interface guards.
var (
	_ reverseproxy.UpstreamSource = (*WakeUpstreams)(nil)
	_ caddy.Validator             = (*WakeUpstreams)(nil)
	_ caddyfile.Unmarshaler       = (*WakeUpstreams)(nil)
)
