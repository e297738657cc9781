package lxc

import (
	"context"
	"sync"
	"time"
)

// Names of the guests' lifecycle events (the proxmox app emits them as
// Caddy events).
const (
	// EventWaking: a wake began (data: reason).
	EventWaking = "guest_waking"
	// EventReady: a wake ended with the guest ready (data: duration).
	EventReady = "guest_ready"
	// EventWakeFailed: a wake failed (data: duration, error, message,
	// retry_after, timeout).
	EventWakeFailed = "guest_wake_failed"
	// EventAsleep: the guest was stopped or suspended (data: reason:
	// idle, or admin for the admin API; stop_method; suspended).
	EventAsleep = "guest_asleep"
)

// Notifier receives a guest's lifecycle events: name and data, which
// always has cluster, guest (as configured), vmid, node, type (lxc or
// qemu) and name (the guest's PVE name, or the reference). It runs in
// the goroutine of the wake or stop, outside every lock.
type Notifier func(name string, data map[string]any)

// notifiers are a cluster runtime's notifiers, newest last: a reload
// adds the new config's before the old config removes its own, and only
// the newest is called.
type notifiers struct {
	mu   sync.Mutex
	list []*Notifier
}

// AddNotifier makes n receive the lifecycle events of this cluster's
// guests, in place of any added before, until remove is called.
func (c *Cluster) AddNotifier(n Notifier) (remove func()) {
	p := &n
	c.notify.mu.Lock()
	c.notify.list = append(c.notify.list, p)
	c.notify.mu.Unlock()
	return func() {
		c.notify.mu.Lock()
		defer c.notify.mu.Unlock()
		for i, x := range c.notify.list {
			if x == p {
				c.notify.list = append(c.notify.list[:i:i], c.notify.list[i+1:]...)
				return
			}
		}
	}
}

func (c *Cluster) notifier() Notifier {
	c.notify.mu.Lock()
	defer c.notify.mu.Unlock()
	if n := len(c.notify.list); n > 0 {
		return *c.notify.list[n-1]
	}
	return nil
}

// notify sends a lifecycle event with the guest's identity and extra.
// Call it without g.mu held.
func (g *Guest) notify(name string, extra map[string]any) {
	g.mu.Lock()
	c := g.currentLocked().c
	t, pveName := g.target, g.name
	g.mu.Unlock()
	if c == nil {
		return
	}
	n := c.notifier()
	if n == nil {
		return
	}
	if t.vmid == 0 {
		// Not woken or seen yet: the last poll knows where it is.
		if res, err := c.Lookup(g.ref); err == nil {
			t, pveName = target{node: res.Node, kind: res.Kind, vmid: res.VMID}, res.Name
		}
	}
	if pveName == "" {
		pveName = g.ref
	}
	data := map[string]any{
		"cluster": g.clusterName, "guest": g.ref, "vmid": t.vmid, "node": t.node,
		"type": t.kind, "name": pveName,
	}
	for k, v := range extra {
		data[k] = v
	}
	n(name, data)
}

// notifyWaking sends guest_waking. A wake that begins before the
// cluster's first poll (a request right after Caddy started) waits a
// moment for it, so that the event can say which guest it is.
func (g *Guest) notifyWaking(op *WakeOp, c *Cluster) {
	if c != nil && c.notifier() != nil {
		ctx, cancel := context.WithTimeout(g.ctx, firstPollWait)
		_ = c.WaitReady(ctx)
		cancel()
	}
	g.notify(EventWaking, map[string]any{"reason": op.reason})
}

// firstPollWait bounds notifyWaking's wait for the first poll.
const firstPollWait = time.Second

// notifyWakeEnd sends guest_ready or guest_wake_failed.
func (g *Guest) notifyWakeEnd(err error, elapsed time.Duration) {
	if err == nil {
		g.notify(EventReady, map[string]any{"duration": elapsed})
		return
	}
	data := map[string]any{"duration": elapsed, "error": err.Error()}
	if we, ok := err.(*WakeError); ok {
		data["message"], data["retry_after"], data["timeout"] = we.PublicMessage(), we.RetryAfter, we.Timeout
	}
	g.notify(EventWakeFailed, data)
}

// notifyAsleep sends guest_asleep.
func (g *Guest) notifyAsleep(reason string, cfg GuestConfig, suspended bool) {
	g.notify(EventAsleep, map[string]any{"reason": reason, "stop_method": cfg.StopMethod, "suspended": suspended})
}
