package wake

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
	"github.com/caddy-proxmox/caddy-proxmox/pvesim"
)

// A guest on a powered-off node: without wake_nodes the wake says so at
// once and posts nothing; with it, a node that is up sends the magic
// packet through PVE's POST /nodes/{node}/wakeonlan, the wake waits for
// the node to join, then starts the guest.
func TestWakeNodeThroughPVE(t *testing.T) {
	e := newEnvWith(t, pvesim.Options{NodeBootDelay: 600 * time.Millisecond}, pvesim.GuestSpec{VMID: 100, Name: "web", Node: "pve2"})
	e.sim.SetNodeWakeOnLAN("pve2", e.sim.NodeMAC("pve2"))
	if err := e.sim.PowerOffNode("pve2"); err != nil {
		t.Fatal(err)
	}
	site := e.wakeSite("100", longHold+"\n\t\tretry_backoff 10ms")
	e.start(site)
	waitFor(t, 2*time.Second, "first poll", func() bool { return e.sim.Calls("GET /cluster/resources") > 0 })
	a := e.get("/")
	if a.code != 503 || !strings.Contains(a.body, "powered off") {
		t.Fatalf("without wake_nodes: %d %s", a.code, a.body)
	}
	if e.sim.WakePackets("pve2") != 0 || e.sim.ActionCalls(100, "start") != 0 {
		t.Fatal("woke something without wake_nodes")
	}

	e.clusterOpts = "wake_nodes {\n\t\t\t\tjoin_timeout 10s\n\t\t\t}"
	e.reload(site)
	time.Sleep(50 * time.Millisecond) // past the back-off of the failed wake
	wait := e.goGet("/")
	waitFor(t, 5*time.Second, "wakeonlan call", func() bool { return e.sim.Calls("POST /nodes/pve2/wakeonlan") > 0 })
	if ev := e.waitEvent("", `"phase":"node_online"`); !strings.Contains(ev, `"phase":"waking_node"`) {
		t.Fatalf("progress stream: %s", ev)
	}
	a, err := wait()
	if err != nil || a.code != 200 || !strings.Contains(a.body, "hello from web") || a.header.Get("X-Proxmox-Wake") != "cold" {
		t.Fatalf("with wake_nodes: %v %d %s", err, a.code, a.body)
	}
	if !e.sim.NodeOnline("pve2") || e.sim.Calls("POST /nodes/pve2/wakeonlan") != 1 || e.sim.ActionCalls(100, "start") != 1 {
		t.Fatalf("calls %v", e.sim.CallCounts())
	}
}

// A node configured with its MAC gets the magic packet from Caddy itself,
// on the given broadcast address: PVE's wakeonlan (which would fail here,
// the node has no wakeonlan config) is not called.
func TestWakeNodeMagicPacketFromCaddy(t *testing.T) {
	e := newEnvWith(t, pvesim.Options{NodeBootDelay: 300 * time.Millisecond}, pvesim.GuestSpec{VMID: 100, Node: "pve2"})
	lan, err := e.sim.ListenWOL("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.sim.PowerOffNode("pve2"); err != nil {
		t.Fatal(err)
	}
	e.clusterOpts = fmt.Sprintf("wake_nodes {\n\t\t\t\tnode pve2 %s %s\n\t\t\t}", strings.ToLower(e.sim.NodeMAC("pve2")), lan)
	e.start(e.wakeSite("100", longHold))
	a := e.get("/")
	if a.code != 200 || a.header.Get("X-Proxmox-Wake") != "cold" {
		t.Fatalf("wake: %d %s", a.code, a.body)
	}
	if e.sim.WakePackets("pve2") == 0 || e.sim.Calls("POST /nodes/pve2/wakeonlan") != 0 || e.sim.ActionCalls(100, "start") != 1 {
		t.Fatalf("packets %d, calls %v", e.sim.WakePackets("pve2"), e.sim.CallCounts())
	}
}

// keep_warm starts the guest when its window is open, without a request:
// here Caddy starts inside the window, which is in the time zone the
// config names. The same window in local time (hours away) starts
// nothing.
func TestKeepWarmStartsGuestInItsTimeZone(t *testing.T) {
	now := time.Now()
	_, localOff := now.Zone()
	var zone *time.Location
	for _, name := range []string{"Asia/Tokyo", "America/New_York", "Pacific/Kiritimati"} {
		loc, err := time.LoadLocation(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, off := now.In(loc).Zone(); abs(off-localOff) >= 2*3600 {
			zone = loc
			break
		}
	}
	from, to := now.In(zone).Add(-time.Minute), now.In(zone).Add(30*time.Minute)
	window := fmt.Sprintf("%02d:%02d-%02d:%02d", from.Hour(), from.Minute(), to.Hour(), to.Minute())
	e := newEnv(t, pvesim.GuestSpec{VMID: 100}, pvesim.GuestSpec{VMID: 101})
	e.adminPort = testcaddy.FreePort(t)
	e.start(
		e.wakeSite("100", "keep_warm "+window+"\n\t\ttime_zone "+zone.String()),
		e.site("local.test", "101", "keep_warm "+window, ""),
	)
	waitFor(t, 5*time.Second, "keep_warm start", func() bool { return e.info("100").State == "ready" })
	if n := e.sim.ActionCalls(100, "start"); n != 1 {
		t.Fatalf("start calls %d", n)
	}
	// Both guests were scheduled at the same moment, when the app started.
	if n := e.sim.ActionCalls(101, "start"); n != 0 {
		t.Fatalf("the window read in local time started guest 101 (%d)", n)
	}
	// Inside the window, a request is served at once.
	if a := e.get("/"); a.code != 200 || a.header.Get("X-Proxmox-Wake") == "cold" {
		t.Fatalf("request inside the window: %d %v", a.code, a.header)
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// A node whose pvestatd stalled has no status ("unknown") but answers:
// its guests wake as usual with wake_nodes set, and no packet is sent.
func TestStaleNodeIsNoOfflineNode(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100})
	e.clusterOpts = "wake_nodes"
	e.start(e.wakeSite("100", longHold))
	e.sim.SetNodeStale("pve1", true)
	n := e.sim.Calls("GET /cluster/resources")
	waitFor(t, 3*time.Second, "polls with unknown rows", func() bool { return e.sim.Calls("GET /cluster/resources") >= n+2 })
	if a := e.get("/"); a.code != 200 || a.header.Get("X-Proxmox-Wake") != "cold" {
		t.Fatalf("wake on a stale node: %d %s", a.code, a.body)
	}
	if e.sim.WakePackets("pve1") != 0 || e.sim.Calls("POST /nodes/pve1/wakeonlan") != 0 {
		t.Fatal("woke a node that is up")
	}
}
