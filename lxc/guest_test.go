package lxc

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

// testGuest is a guest bound to a cluster that never polls: the test
// feeds observe itself, with its own clock.
func testGuest(t *testing.T, cfg GuestConfig) (*Guest, *Cluster) {
	t.Helper()
	// A stopped runtime: a wake started here fails at once.
	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	c := &Cluster{cfg: ClusterConfig{Name: "t"}, subs: map[*Guest]struct{}{}, ready: make(chan struct{}), ctx: cctx, cancel: ccancel}
	ctx, cancel := context.WithCancel(context.Background())
	g := &Guest{key: "t/web", clusterName: "t", ref: "web", logger: zaptest.NewLogger(t), ctx: ctx, cancel: cancel, state: StateUnknown}
	g.bindings = []*Binding{{g: g, c: c, cfg: cfg.WithDefaults(), explicit: true}}
	t.Cleanup(func() { _ = g.Destruct() })
	return g, c
}

func (g *Guest) snapshot() (State, time.Time, bool, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.state, g.failedUntil, g.external, g.idleArmed
}

// A failed wake's back-off lasts while the guest is as it was, and ends
// when a poll sees it change: a lock cleared, someone started it.
func TestBackoffEndsOnChange(t *testing.T) {
	now := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name      string
		failedAt  Resource
		next      Resource
		want      State
		ended     bool
		external  bool
		wakeAgain bool
	}{
		{"same row", Resource{Status: "stopped", Lock: "backup"}, Resource{Status: "stopped", Lock: "backup"}, StateFailed, false, false, false},
		{"lock cleared", Resource{Status: "stopped", Lock: "backup"}, Resource{Status: "stopped"}, StateStopped, true, false, true},
		{"started by someone", Resource{Status: "stopped"}, Resource{Status: "running"}, StateRunning, true, true, false},
		{"HA error cleared", Resource{Status: "running", HAState: "error"}, Resource{Status: "stopped", HAState: "stopped"}, StateStopped, true, false, true},
		{"no status is no change", Resource{Status: "stopped"}, Resource{Status: "unknown"}, StateFailed, false, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, cl := testGuest(t, GuestConfig{IdleTimeout: time.Hour})
			c.failedAt.Kind, c.next.Kind = "lxc", "lxc"
			g.mu.Lock()
			g.state, g.failedUntil, g.failedObs, g.lastErr = StateFailed, time.Now().Add(time.Hour), c.failedAt.obs(), "start task failed: CT is locked (backup)"
			g.mu.Unlock()
			g.observe(cl, c.next, nil, now)
			state, until, external, _ := g.snapshot()
			if state != c.want || until.IsZero() != c.ended || external != c.external {
				t.Fatalf("state %s back-off ended %v external %v", state, until.IsZero(), external)
			}
			op := g.Wake("test")
			refused := false
			select {
			case <-op.Done():
				var we *WakeError
				refused = errors.As(op.Err(), &we)
			default:
			}
			if c.want != StateRunning && refused == c.wakeAgain {
				t.Fatalf("wake refused=%v after %s", refused, c.name)
			}
			// A wake that went ahead fails at once on the stopped runtime;
			// it must be over before the test ends (it logs).
			select {
			case <-op.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the wake did not end")
			}
		})
	}
}

// A ready guest is never demoted by a row without status, and keeps its
// address.
func TestUnknownRowKeepsReady(t *testing.T) {
	g, cl := testGuest(t, GuestConfig{IdleTimeout: time.Hour})
	g.mu.Lock()
	g.state, g.host = StateReady, "10.0.0.5"
	g.mu.Unlock()
	g.observe(cl, Resource{VMID: 100, Kind: "lxc", Node: "pve1", Name: "web", Status: "unknown"}, nil, time.Now())
	if up, ok := g.Upstream(80); !ok || up != "10.0.0.5:80" {
		t.Fatalf("upstream %q %v, state %s", up, ok, g.State())
	}
	// Gone from the poll altogether is another matter.
	g.observe(cl, Resource{}, errNotFound, time.Now())
	if g.State() != StateMissing {
		t.Fatal(g.State())
	}
}

// An idle check during a lock or while HA is busy does not stop: it
// waits for the next poll, which checks again.
func TestIdleStopDeferred(t *testing.T) {
	for _, res := range []Resource{
		{Status: "running", Kind: "lxc", Lock: "backup"},
		{Status: "running", Kind: "lxc", HAState: "migrate"},
		{Status: "unknown", Kind: "lxc"},
	} {
		g, cl := testGuest(t, GuestConfig{IdleTimeout: time.Minute})
		g.mu.Lock()
		g.state, g.res, g.lastActivity = StateReady, res, time.Now().Add(-time.Hour)
		g.mu.Unlock()
		g.idleCheck()
		state, _, _, armed := g.snapshot()
		if state != StateReady || armed {
			t.Fatalf("%+v: state %s armed %v", res, state, armed)
		}
		g.mu.Lock()
		deferred := g.idleDeferred
		g.mu.Unlock()
		if !deferred {
			t.Fatalf("%+v: not deferred", res)
		}
		// The next poll (lock cleared) arms the check again. Activity
		// just now puts that check a minute off: one due at once would
		// stop the guest through a cluster this test does not have.
		g.mu.Lock()
		g.state, g.lastActivity = StateReady, time.Now()
		g.mu.Unlock()
		next := res
		next.Lock, next.HAState, next.Status = "", "", "running"
		g.observe(cl, next, nil, time.Now())
		if _, _, _, armed := g.snapshot(); !armed {
			t.Fatalf("%+v: not re-armed by the next poll", res)
		}
		g.mu.Lock()
		g.idleTimer.Stop()
		g.mu.Unlock()
	}
}

// A template (from the poll) is refused with PVE's reason.
func TestLookupTemplate(t *testing.T) {
	c := &Cluster{byVMID: map[int]Resource{9000: {VMID: 9000, Kind: "qemu", Name: "base", Template: true}},
		byName: map[string][]Resource{"base": {{VMID: 9000, Kind: "qemu", Name: "base", Template: true}}}, polled: true}
	for _, ref := range []string{"9000", "base"} {
		_, err := c.Lookup(ref)
		var te *templateError
		if !errors.As(err, &te) || err.Error() != "VM 9000 is a template: you can't start a vm if it's a template" {
			t.Fatalf("%s: %v", ref, err)
		}
	}
	if err := c.checkTarget("base", GuestConfig{StopMethod: StopShutdown}); err == nil {
		t.Fatal("template accepted at provision")
	}
	c.byVMID[101] = Resource{VMID: 101, Kind: "lxc", Name: "ct"}
	if err := c.checkTarget("101", GuestConfig{StopMethod: StopSuspend}); err == nil {
		t.Fatal("LXC suspend accepted at provision")
	}
	if err := c.checkTarget("101", GuestConfig{StopMethod: StopShutdown}); err != nil {
		t.Fatal(err)
	}
	c.polled = false
	if err := c.checkTarget("base", GuestConfig{StopMethod: StopShutdown}); err != nil {
		t.Fatalf("refused before any poll: %v", err)
	}
}

// BeginUpstream counts a request as activity whether or not the guest is
// ready, gives the address of the guest as it is now (a new address or
// port, not the one joined for an earlier request), and End sets the
// last activity when the last request ends, however they overlapped.
func TestBeginUpstream(t *testing.T) {
	g, _ := testGuest(t, GuestConfig{IdleTimeout: time.Hour, Port: 8080})
	if up, ok := g.BeginUpstream(0, false); ok || up != "" {
		t.Fatalf("not ready: upstream %q %v", up, ok)
	}
	g.End(false)
	if in := g.Info(); in.Inflight != 0 || in.LastActivity == nil {
		t.Fatalf("after a request to a sleeping guest: %+v", in)
	}
	g.mu.Lock()
	g.state, g.host = StateReady, "10.0.0.5"
	g.mu.Unlock()
	for _, c := range []struct {
		host string
		port int
		want string
	}{
		{"10.0.0.5", 0, "10.0.0.5:8080"},
		{"10.0.0.5", 0, "10.0.0.5:8080"},
		{"10.0.0.5", 9000, "10.0.0.5:9000"},
		{"10.0.0.6", 9000, "10.0.0.6:9000"},
		{"fd00::6", 0, "[fd00::6]:8080"},
	} {
		g.mu.Lock()
		g.host = c.host
		g.mu.Unlock()
		up, ok := g.BeginUpstream(c.port, false)
		g.End(false)
		if !ok || up != c.want {
			t.Fatalf("host %s port %d: upstream %q %v, want %q", c.host, c.port, up, ok, c.want)
		}
		if up2, _ := g.Upstream(c.port); up2 != c.want {
			t.Fatalf("Upstream(%d) %q, want %q", c.port, up2, c.want)
		}
	}
	// Overlapping requests: the one that ends last dates the activity.
	_, _ = g.BeginUpstream(0, false)
	_, _ = g.BeginUpstream(0, true)
	g.End(false)
	if in := g.Info(); in.Inflight != 1 || in.Streams != 1 {
		t.Fatalf("one of two ended: %+v", in)
	}
	before := time.Now()
	g.End(true)
	in := g.Info()
	if in.Inflight != 0 || in.Streams != 0 || in.LastActivity == nil || in.LastActivity.Before(before) {
		t.Fatalf("both ended at %v: %+v", before, in)
	}
}
