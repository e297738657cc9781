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

func TestConfigMACs(t *testing.T) {
	macs, static := configMACs(map[string]any{
		"net1": "name=eth1,bridge=vmbr1,hwaddr=BC:24:11:00:00:02,ip=10.0.0.5/24,type=veth",
		"net0": "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01,ip=dhcp,type=veth",
		"nets": "x",
	})
	if fmt.Sprint(macs) != "[bc:24:11:00:00:01 bc:24:11:00:00:02]" || fmt.Sprint(static) != "[10.0.0.5]" {
		t.Fatalf("%v %v", macs, static)
	}
	macs, _ = configMACs(map[string]any{"net0": "virtio=BC:24:11:AA:BB:CC,bridge=vmbr0,firewall=1"})
	if fmt.Sprint(macs) != "[bc:24:11:aa:bb:cc]" {
		t.Fatalf("qemu mac %v", macs)
	}
	got := pick([]string{"bc:24:11:00:00:01"}, []candidate{{"aa", "10.1.1.1"}, {"bc:24:11:00:00:01", "fe80::1"}, {"bc:24:11:00:00:01", "10.2.2.2"}})
	if got != "10.2.2.2" {
		t.Fatalf("pick %s", got)
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
	time.Sleep(150 * time.Millisecond)
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
	end := g.Begin(false)
	time.Sleep(400 * time.Millisecond)
	if sim.Status(150) != "running" {
		t.Fatal("stopped while a request was in flight")
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
