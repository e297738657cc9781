package wake

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
	"github.com/caddy-proxmox/caddy-proxmox/pvesim"
)

// caddy reload while a wake is running: the held request completes, the
// guest is started once, and the idle timer carries on across the reload.
func TestReloadDuringWake(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100, StartDelay: 600 * time.Millisecond})
	e.start(e.wakeSite("100", "idle_timeout 800ms"))
	var wg sync.WaitGroup
	var held answer
	var heldErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		held, heldErr = e.do("GET", "/held")
	}()
	waitFor(t, 2*time.Second, "start call", func() bool { return e.sim.ActionCalls(100, "start") == 1 })
	// New config (another hold_timeout) while the start task runs; Load
	// returns once the old server has drained, i.e. after the held
	// request, so run it alongside.
	reloaded := make(chan struct{})
	go func() {
		defer close(reloaded)
		e.reload(e.wakeSite("100", "idle_timeout 800ms\n\t\thold_timeout 9s"))
	}()
	// A request to the new config joins the same wake. A connection the
	// old server accepted while handing over may be closed by Caddy
	// (EOF, nothing sent): that is Caddy's reload, so try again.
	time.Sleep(100 * time.Millisecond)
	a, err := e.do("GET", "/new-config")
	for i := 0; err != nil && i < 5; i++ {
		time.Sleep(50 * time.Millisecond)
		a, err = e.do("GET", "/new-config")
	}
	if err != nil || a.code != 200 {
		t.Fatalf("request on the new config: %v %d %s", err, a.code, a.body)
	}
	wg.Wait()
	<-reloaded
	if heldErr != nil || held.code != 200 || held.header.Get("X-Proxmox-Wake") != "cold" {
		t.Fatalf("held request: %v %d %s", heldErr, held.code, held.body)
	}
	if n := e.sim.ActionCalls(100, "start"); n != 1 {
		t.Fatalf("start calls %d, want 1", n)
	}
	// Timers kept: the last activity was before this reload; another
	// reload must not restart the countdown.
	last := time.Now()
	e.reload(e.wakeSite("100", "idle_timeout 800ms\n\t\thold_timeout 8s"))
	waitFor(t, 3*time.Second, "idle stop after reloads", func() bool { return e.sim.Status(100) == "stopped" })
	if took := time.Since(last); took > 1700*time.Millisecond {
		t.Fatalf("idle countdown restarted by the reload: stopped %s after the last request", took)
	}
	if n := e.sim.ActionCalls(100, "shutdown"); n != 1 {
		t.Fatalf("shutdown calls %d", n)
	}
}

// A QEMU VM: address from the guest agent; stop_method suspend, resume
// on the next request.
func TestQEMUAgentSuspendResume(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 200, Kind: "qemu", Name: "app", Node: "pve2"})
	e.start(e.wakeSite("app", "stop_method suspend"))
	e.waitPolled() // a poll resolves the name
	a := e.get("/")
	if a.code != 200 || !strings.Contains(a.body, "hello from app") {
		t.Fatalf("wake by name: %d %s", a.code, a.body)
	}
	if e.sim.Calls("GET /nodes/pve2/qemu/200/agent/network-get-interfaces") == 0 {
		t.Fatalf("guest agent not used: %v", e.sim.CallCounts())
	}
	waitFor(t, 3*time.Second, "suspend", func() bool { return e.sim.Paused(200) })
	if e.sim.Status(200) != "running" || e.sim.Serving(200) {
		t.Fatal("suspended VM should be running+paused and not serving")
	}
	a = e.get("/after")
	if a.code != 200 || a.header.Get("X-Proxmox-Wake") != "cold" {
		t.Fatalf("resume: %d %s", a.code, a.body)
	}
	if e.sim.ActionCalls(200, "resume") != 1 || e.sim.ActionCalls(200, "start") != 1 {
		t.Fatalf("calls %v", e.sim.CallCounts())
	}
}

// A guest started by someone else counts as activity: it is adopted
// (proxied without a start call) and idles out like any other.
func TestExternalStartCountsAsActivity(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100}, pvesim.GuestSpec{VMID: 101})
	e.start(e.wakeSite("100", ""), e.site("g101.test", "101", "", ""))
	e.waitPolled() // both known stopped
	if err := e.sim.StartGuest(100); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	waitFor(t, 3*time.Second, "idle stop of the externally started guest", func() bool { return e.sim.Status(100) == "stopped" })
	if took := time.Since(started); took < 300*time.Millisecond {
		t.Fatalf("stopped after %s, before idle_timeout", took)
	}
	// Started outside and then requested: no start call, just readiness.
	_ = e.sim.StartGuest(101)
	e.waitPolled() // the app has seen it running
	if a := e.get("/", "Host: g101.test"); a.code != 200 {
		t.Fatalf("adopted guest: %d %s", a.code, a.body)
	}
	if n := e.sim.ActionCalls(101, "start"); n != 0 {
		t.Fatalf("running guest started again (%d)", n)
	}
}

// shutdown is graceful first, forced after stop_timeout.
func TestShutdownForcedAfterStopTimeout(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100, ShutdownDelay: 10 * time.Second})
	e.start(e.wakeSite("100", "stop_timeout 1s"))
	if a := e.get("/"); a.code != 200 {
		t.Fatalf("wake %d", a.code)
	}
	waitFor(t, 4*time.Second, "forced stop", func() bool { return e.sim.Status(100) == "stopped" })
	if e.sim.ActionCalls(100, "shutdown") != 1 {
		t.Fatalf("calls %v", e.sim.CallCounts())
	}
}

// stop_method stop is a hard stop.
func TestStopMethodStop(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100})
	e.start(e.wakeSite("100", "stop_method stop"))
	if a := e.get("/"); a.code != 200 {
		t.Fatalf("wake %d", a.code)
	}
	waitFor(t, 3*time.Second, "stop", func() bool { return e.sim.Status(100) == "stopped" })
	if e.sim.ActionCalls(100, "stop") != 1 || e.sim.ActionCalls(100, "shutdown") != 0 {
		t.Fatalf("calls %v", e.sim.CallCounts())
	}
}

// depends_on: the dependency starts first and stays up while the guest
// is; both idle out.
func TestDependsOn(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100}, pvesim.GuestSpec{VMID: 110, Name: "db"})
	e.start(e.wakeSite("100", "depends_on db"))
	e.waitPolled() // the dependency's name is resolved
	if a := e.get("/"); a.code != 200 {
		t.Fatalf("wake %d %s", a.code, a.body)
	}
	if e.sim.Status(110) != "running" || e.sim.ActionCalls(110, "start") != 1 {
		t.Fatalf("dependency not started: %v", e.sim.CallCounts())
	}
	waitFor(t, 4*time.Second, "both idle out", func() bool { return e.sim.Status(100) == "stopped" && e.sim.Status(110) == "stopped" })
}

// max_pending: beyond the cap, held requests are refused at once.
func TestMaxPending(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100, StartDelay: 700 * time.Millisecond})
	e.start(e.wakeSite("100", "max_pending 2"))
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := e.do("GET", "/")
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				codes[-1]++
				return
			}
			codes[a.code]++
		}()
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	if codes[200] != 2 || codes[503] != 4 {
		t.Fatalf("codes %v, want 2x200 4x503", codes)
	}
}

// One /cluster/resources poll per interval feeds every guest; idle
// guests cost no other call.
func TestOnePollPerIntervalFor100Guests(t *testing.T) {
	var specs []pvesim.GuestSpec
	for i := 0; i < 100; i++ {
		specs = append(specs, pvesim.GuestSpec{VMID: 1000 + i})
	}
	e := newEnv(t, specs...)
	var sites []string
	for i := 0; i < 100; i++ {
		sites = append(sites, e.site(fmt.Sprintf("g%d.test", i), fmt.Sprint(1000+i), "", ""))
	}
	e.start(sites...)
	e.waitPolled() // start-up (node discovery) is over
	e.sim.ResetCalls()
	// Twenty polls at 100 ms: they take at least ~1.9 s (a load can only
	// stretch that) whatever the number of guests, and nothing else is
	// asked of the cluster meanwhile.
	began := time.Now()
	waitFor(t, 30*time.Second, "20 polls", func() bool { return e.polls() >= 20 })
	took := time.Since(began)
	counts := e.sim.CallCounts()
	if polls := counts["GET /cluster/resources"]; took < 1800*time.Millisecond || polls > 21 || len(counts) != 1 {
		t.Fatalf("%d polls in %v at 100ms for 100 guests: %v", polls, took, counts)
	}
}

// The embedded demo cluster (simulate) wakes its LXC "web" end to end.
func TestSimulateDemo(t *testing.T) {
	port := testcaddy.FreePort(t)
	cfg := fmt.Sprintf(`{
	admin off
	storage file_system %s
	skip_install_trust
	proxmox {
		cluster demo {
			simulate
			poll_interval 200ms
		}
	}
}
http://127.0.0.1:%d {
	bind 127.0.0.1
	proxmox_wake demo/web {
		port 8080
		idle_timeout 1m
	}
	reverse_proxy {
		dynamic proxmox
	}
}
`, t.TempDir(), port)
	testcaddy.Start(t, cfg)
	time.Sleep(400 * time.Millisecond)
	res, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(b), "hello from web (vmid 100)") {
		t.Fatalf("demo: %d %s", res.StatusCode, b)
	}
}
