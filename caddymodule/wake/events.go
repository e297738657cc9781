package wake

import (
	"fmt"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"

	"github.com/caddy-proxmox/caddy-proxmox/lxc"
)

// appEvents emits the guests' lifecycle as Caddy events, from the
// proxmox app (the events' origin module is "proxmox"):
//
//   - guest_waking: a wake began; data reason (the request that woke
//     it, "admin" or "dependency").
//   - guest_ready: the guest is ready; data duration.
//   - guest_wake_failed: the wake failed; data duration, error (the
//     cluster's own text), message (what visitors read), retry_after,
//     timeout.
//   - guest_asleep: the guest was stopped or suspended; data reason
//     (idle, admin), stop_method, suspended.
//
// Every event's data also has cluster, guest (as configured), vmid,
// node, type (lxc or qemu) and name. Handlers (events { on guest_ready
// exec … } with the exec handler module, or any events.handlers module)
// run in the wake's or stop's goroutine, never in a request's; their
// aborts change nothing.
type appEvents struct {
	ctx     caddy.Context
	app     *caddyevents.App
	removes []func()
}

// provision finds (or sets up) the events app.
func (e *appEvents) provision(ctx caddy.Context) error {
	iface, err := ctx.App("events")
	if err != nil {
		return fmt.Errorf("proxmox: events app: %w", err)
	}
	e.ctx, e.app = ctx, iface.(*caddyevents.App)
	return nil
}

// start makes the clusters send their guests' events here; those of the
// previous config go on until it stops, and this config's take over.
func (e *appEvents) start(clusters map[string]*lxc.Cluster) {
	if e.app == nil {
		return
	}
	for _, c := range clusters {
		e.removes = append(e.removes, c.AddNotifier(e.emit))
	}
}

func (e *appEvents) emit(name string, data map[string]any) {
	e.app.Emit(e.ctx, name, data)
}

// stop ends this config's events.
func (e *appEvents) stop() {
	for _, remove := range e.removes {
		remove()
	}
	e.removes = nil
}
