package lxc

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testutil"
	"github.com/caddy-proxmox/caddy-proxmox/pvesim"
)

func TestParseWindow(t *testing.T) {
	w, err := ParseWindow("Mon-Fri 09:00-18:00")
	if err != nil {
		t.Fatal(err)
	}
	at := func(day time.Weekday, hh, mm int) time.Time {
		// 2024-01-07 is a Sunday.
		return time.Date(2024, 1, 7+int(day), hh, mm, 0, 0, time.Local)
	}
	for _, c := range []struct {
		t    time.Time
		want bool
	}{
		{at(time.Monday, 9, 0), true}, {at(time.Friday, 17, 59), true}, {at(time.Friday, 18, 0), false},
		{at(time.Saturday, 12, 0), false}, {at(time.Wednesday, 8, 59), false},
	} {
		if got := w.Contains(c.t); got != c.want {
			t.Errorf("%v: got %v", c.t, got)
		}
	}
	night, err := ParseWindow("22:00-06:00 Fri")
	if err != nil {
		t.Fatal(err)
	}
	if !night.Contains(at(time.Friday, 23, 0)) || !night.Contains(at(time.Saturday, 5, 0)) || night.Contains(at(time.Saturday, 23, 0)) {
		t.Error("overnight window wrong")
	}
	for _, bad := range []string{"", "Mon", "09:00", "xx 09:00-10:00", "10:00-10:00", "25:00-26:00"} {
		if _, err := ParseWindow(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestWakeIdleCycle drives a guest through wake, idle stop and a second
// wake directly, without Caddy.
func TestWakeIdleCycle(t *testing.T) {
	sim := pvesim.New(pvesim.Options{TaskDelay: 20 * time.Millisecond})
	port := testutil.FreePort(t)
	if err := sim.AddGuest(pvesim.GuestSpec{VMID: 150, Name: "unit", IP: "127.0.0.150", Port: port}); err != nil {
		t.Fatal(err)
	}
	url, err := sim.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	logger := zaptest.NewLogger(t)
	// Acquiring a cluster and a guest must not start anything: no
	// goroutine exists afterwards that could call the API before Start.
	before := testutil.GoroutineBaseline()
	c, err := AcquireCluster(ClusterConfig{Name: "unit", URLs: []string{url}, TokenID: sim.TokenID(), TokenSecret: sim.TokenSecret(), PollInterval: 50 * time.Millisecond}, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	cfg := GuestConfig{IdleTimeout: 200 * time.Millisecond, WakeTimeout: 5 * time.Second, Port: port, ProbeInterval: 10 * time.Millisecond, TaskPollInterval: 10 * time.Millisecond}.WithDefaults()
	b, err := AcquireGuest(c, "unit", cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	g := b.Guest()
	before.Check(t, 0)
	if sim.TotalCalls() != 0 {
		t.Fatalf("API called before Start: %v", sim.CallCounts())
	}
	c.Start()

	// Many concurrent waiters share one wake.
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := g.WaitReady(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := sim.ActionCalls(150, "start"); n != 1 {
		t.Fatalf("start calls %d", n)
	}
	if up, ok := g.Upstream(0); !ok || up != net.JoinHostPort("127.0.0.150", fmt.Sprint(port)) {
		t.Fatalf("upstream %q %v", up, ok)
	}
	// A request in flight past the idle timeout (time is the input here):
	// the idle check, run now, must leave the guest up.
	end := g.Begin(false)
	time.Sleep(cfg.IdleTimeout + 50*time.Millisecond)
	g.idleCheck()
	if st := g.State(); st == StateStopping || st == StateStopped || sim.Status(150) != "running" || sim.ActionCalls(150, "shutdown") != 0 {
		t.Fatalf("stopped while a request was in flight: state %s, status %s, calls %v", st, sim.Status(150), sim.CallCounts())
	}
	end()
	testutil.WaitFor(t, 3*time.Second, "the idle stop", func() bool { return sim.Status(150) == "stopped" && g.State() == StateStopped })
	if sim.ActionCalls(150, "shutdown") != 1 {
		t.Fatalf("calls %v", sim.CallCounts())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if sim.ActionCalls(150, "start") != 2 {
		t.Fatalf("second wake: %v", sim.CallCounts())
	}
}

// TestHAStopStaysStopping: an HA-managed container's stop task only asks
// HA; the guest stays "stopping" (not proxied, requests held) for as long
// as PVE still runs it, and gets HA's hard stop, never a shutdown HA
// could leave in its error state.
func TestHAStopStaysStopping(t *testing.T) {
	sim := pvesim.New(pvesim.Options{TaskDelay: 10 * time.Millisecond, HADelay: 300 * time.Millisecond})
	if err := sim.AddGuest(pvesim.GuestSpec{VMID: 150, IP: "127.0.0.151", Port: testutil.FreePort(t), HA: true, Running: true}); err != nil {
		t.Fatal(err)
	}
	url, err := sim.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	logger := zaptest.NewLogger(t)
	c, err := AcquireCluster(ClusterConfig{Name: "unit-ha", URLs: []string{url}, TokenID: sim.TokenID(), TokenSecret: sim.TokenSecret(), PollInterval: 50 * time.Millisecond}, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	b, err := AcquireGuest(c, "150", GuestConfig{IdleTimeout: time.Hour, TaskPollInterval: 10 * time.Millisecond}.WithDefaults(), logger)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	g := b.Guest()
	c.Start()
	testutil.WaitFor(t, 3*time.Second, "the guest running", func() bool { return g.State() == StateRunning })
	if err := g.Sleep("admin"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 3*time.Second, "HA's stop call", func() bool { return sim.ActionCalls(150, "stop") == 1 })
	// The guest's state is read first: once PVE stopped the guest, nothing
	// starts it again, so "running" after it means running during it.
	for {
		s := g.State()
		if sim.Status(150) != "running" {
			break
		}
		if s != StateStopping {
			t.Fatalf("state %s while PVE still runs the guest", s)
		}
		time.Sleep(5 * time.Millisecond)
	}
	testutil.WaitFor(t, 3*time.Second, "the guest stopped", func() bool { return g.State() == StateStopped })
	if sim.ActionCalls(150, "shutdown") != 0 || sim.HAState(150) != "stopped" {
		t.Fatalf("calls %v, HA state %s", sim.CallCounts(), sim.HAState(150))
	}
}
