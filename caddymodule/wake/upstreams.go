package wake

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"
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

	app *ProxmoxApp // set when Guest is; nil without the proxmox app
}

// CaddyModule returns the Caddy module information.
func (WakeUpstreams) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.reverse_proxy.upstreams.proxmox",
		New: func() caddy.Module { return new(WakeUpstreams) },
	}
}

// Provision finds the proxmox app that holds Guest. Without the app the
// guest is never ready, and every request gets errNoGuest.
func (u *WakeUpstreams) Provision(ctx caddy.Context) error {
	if u.Guest == "" {
		return nil
	}
	app, err := ctx.AppIfConfigured("proxmox")
	switch {
	case err == nil:
		u.app = app.(*ProxmoxApp)
	case !errors.Is(err, caddy.ErrNotConfigured):
		return fmt.Errorf("dynamic proxmox: %w", err)
	}
	return nil
}

// errNoGuest tells the user how to fix the config.
var errNoGuest = errors.New("dynamic proxmox: no ready guest for this request (put proxmox_wake before reverse_proxy, or name a guest)")

// GetUpstreams returns the ready guest's address.
func (u *WakeUpstreams) GetUpstreams(r *http.Request) ([]*reverseproxy.Upstream, error) {
	var addr string
	vars, _ := r.Context().Value(caddyhttp.VarsCtxKey).(map[string]any)
	if g, ok := vars[wakeVarGuest].(*lxc.Guest); ok {
		if u.Port == 0 {
			addr, _ = vars[wakeVarUpstream].(string)
		} else {
			addr, _ = g.Upstream(u.Port)
		}
	} else if u.Guest != "" {
		cluster, ref, _ := strings.Cut(u.Guest, "/")
		if g := u.app.FindGuest(cluster, ref); g != nil {
			addr, _ = g.Upstream(u.Port)
		}
	}
	if addr == "" {
		return nil, errNoGuest
	}
	// A fresh value each time: reverse_proxy fills in the host state of
	// dynamic upstreams per request, so a shared one would be a data race.
	// The upstream and the list holding it are one allocation.
	one := &oneUpstream{up: reverseproxy.Upstream{Dial: addr}}
	one.list[0] = &one.up
	return one.list[:], nil
}

// oneUpstream is a list of one upstream, allocated together.
type oneUpstream struct {
	up   reverseproxy.Upstream
	list [1]*reverseproxy.Upstream
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
	_ caddy.Provisioner           = (*WakeUpstreams)(nil)
	_ caddy.Validator             = (*WakeUpstreams)(nil)
)
