package wake

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-proxmox/caddy-proxmox/lxc"
)

func init() {
	caddy.RegisterModule(WakeAdmin{})
}

// WakeAdmin (admin.api.proxmox) adds the guests of proxmox_wake to
// Caddy's admin API:
//
//	GET  /proxmox/guests                          every guest: state, sleep_in...
//	GET  /proxmox/guests/<cluster>/<guest>        one guest
//	POST /proxmox/guests/<cluster>/<guest>/wake   start a wake (?wait=1: until ready)
//	POST /proxmox/guests/<cluster>/<guest>/sleep  stop it now
//
// <guest> is the configured vmid or name (or the vmid or name of a
// guest configured by the other). It reads the guests of the proxmox app
// of the running config, as Caddy's admin.api.pki reads its pki app.
type WakeAdmin struct {
	app *ProxmoxApp // nil without the proxmox global option
}

// CaddyModule returns the Caddy module information.
func (WakeAdmin) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "admin.api.proxmox",
		New: func() caddy.Module { return new(WakeAdmin) },
	}
}

// Provision finds the proxmox app; without one there are no guests.
func (a *WakeAdmin) Provision(ctx caddy.Context) error {
	app, err := ctx.AppIfConfigured("proxmox")
	switch {
	case err == nil:
		a.app = app.(*ProxmoxApp)
	case !errors.Is(err, caddy.ErrNotConfigured):
		return fmt.Errorf("admin.api.proxmox: %w", err)
	}
	return nil
}

// Routes returns the admin routes.
func (a *WakeAdmin) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{{Pattern: "/proxmox/", Handler: caddy.AdminHandlerFunc(a.serve)}}
}

func (a *WakeAdmin) serve(w http.ResponseWriter, r *http.Request) error {
	parts := strings.Split(strings.Trim(strings.TrimPrefix(r.URL.Path, "/proxmox/"), "/"), "/")
	if parts[0] != "guests" {
		return caddy.APIError{HTTPStatus: http.StatusNotFound, Err: fmt.Errorf("unknown path %s", r.URL.Path)}
	}
	switch {
	case len(parts) == 1:
		if r.Method != http.MethodGet {
			return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fmt.Errorf("method %s not allowed", r.Method)}
		}
		infos := []lxc.Info{}
		for _, g := range a.app.Guests() {
			infos = append(infos, g.Info())
		}
		sort.Slice(infos, func(i, j int) bool {
			if infos[i].Cluster != infos[j].Cluster {
				return infos[i].Cluster < infos[j].Cluster
			}
			return infos[i].Guest < infos[j].Guest
		})
		return wakeAdminJSON(w, http.StatusOK, infos)
	case len(parts) == 3 || len(parts) == 4:
		g := a.app.FindGuest(parts[1], parts[2])
		if g == nil {
			return caddy.APIError{HTTPStatus: http.StatusNotFound, Err: fmt.Errorf("no proxmox_wake guest %s/%s", parts[1], parts[2])}
		}
		if len(parts) == 3 {
			if r.Method != http.MethodGet {
				return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fmt.Errorf("method %s not allowed", r.Method)}
			}
			return wakeAdminJSON(w, http.StatusOK, g.Info())
		}
		if r.Method != http.MethodPost {
			return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fmt.Errorf("method %s not allowed", r.Method)}
		}
		switch parts[3] {
		case "wake":
			op := g.WakeNow("admin")
			if r.URL.Query().Get("wait") != "" {
				t := time.NewTimer(g.WakeTimeout() + 5*time.Second)
				defer t.Stop()
				select {
				case <-op.Done():
					if err := op.Err(); err != nil {
						return caddy.APIError{HTTPStatus: http.StatusServiceUnavailable, Err: err}
					}
					return wakeAdminJSON(w, http.StatusOK, g.Info())
				case <-t.C:
				case <-r.Context().Done():
					return nil
				}
			}
			return wakeAdminJSON(w, http.StatusAccepted, g.Info())
		case "sleep":
			if err := g.Sleep("admin"); err != nil {
				return caddy.APIError{HTTPStatus: http.StatusConflict, Err: err}
			}
			return wakeAdminJSON(w, http.StatusAccepted, g.Info())
		}
	}
	return caddy.APIError{HTTPStatus: http.StatusNotFound, Err: fmt.Errorf("unknown path %s", r.URL.Path)}
}

func wakeAdminJSON(w http.ResponseWriter, code int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	return json.NewEncoder(w).Encode(v)
}

// Interface guards.
var (
	_ caddy.AdminRouter = (*WakeAdmin)(nil)
	_ caddy.Provisioner = (*WakeAdmin)(nil)
)
