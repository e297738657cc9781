package wake

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
	"github.com/caddy-proxmox/caddy-proxmox/pvesim"
)

// Wake on request against what a real Proxmox VE cluster does, as pvesim
// models it from qemu-server, pve-container, pve-ha-manager, pve-manager
// and pve-access-control: HA, config locks, backups, migrations, stale
// rows, templates, stop methods, addresses and permissions.

// startLogged loads the config with Caddy's log (JSON, debug) in a file,
// for tests that check what the log says.
func (e *env) startLogged(sites ...string) {
	e.t.Helper()
	logBlock := fmt.Sprintf("log {\n\t\toutput file %s\n\t\tformat json\n\t\tlevel DEBUG\n\t}", e.logPath())
	testcaddy.Start(e.t, e.globals(logBlock)+strings.Join(sites, "\n"))
}

func (e *env) logPath() string { return filepath.Join(e.dir, "caddy.log") }

// logHas reports whether one line of Caddy's log has every sub.
func (e *env) logHas(subs ...string) bool {
	b, _ := os.ReadFile(e.logPath())
	for _, line := range strings.Split(string(b), "\n") {
		all := true
		for _, s := range subs {
			all = all && strings.Contains(line, s)
		}
		if all {
			return true
		}
	}
	return false
}

// waitEvent reads the progress stream of the site for host until an event
// contains want, and returns the stream so far.
func (e *env) waitEvent(host, want string) string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.base+"/.well-known/proxmox-wake/events", nil)
	if host != "" {
		req.Host = host
	}
	res, err := client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	var seen strings.Builder
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		seen.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), want) {
			return seen.String()
		}
	}
	e.t.Fatalf("progress stream ended without %q:\n%s", want, seen.String())
	return ""
}

// goGet sends a request in the background; wait returns its answer.
func (e *env) goGet(path string, headers ...string) (wait func() (answer, error)) {
	var a answer
	var err error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		a, err = e.do("GET", path, headers...)
	}()
	return func() (answer, error) { wg.Wait(); return a, err }
}

const longHold = "wake_timeout 10s\n\t\thold_timeout 10s"

// HA's stop task only asks HA, which takes the guest down a round later.
// Until status/current says stopped the guest stays "stopping": a request
// in that window waits and wakes it again, and is never proxied to a
// guest HA is about to take down.
func TestHAStopKeepsGuestStoppingUntilDown(t *testing.T) {
	e := newEnvWith(t, pvesim.Options{HADelay: 400 * time.Millisecond}, pvesim.GuestSpec{VMID: 100, HA: true})
	e.start(e.wakeSite("100", longHold))
	if a := e.get("/"); a.code != 200 {
		t.Fatalf("HA wake: %d %s", a.code, a.body)
	}
	waitFor(t, 5*time.Second, "HA stop request", func() bool { return e.sim.ActionCalls(100, "stop")+e.sim.ActionCalls(100, "shutdown") == 1 })
	bad := map[string]int{}
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		a, err := e.do("GET", "/during")
		switch {
		case err != nil:
			bad[err.Error()]++
		case a.code != 200:
			bad[fmt.Sprint(a.code, " ", a.body)]++
		}
	}
	if len(bad) > 0 {
		t.Fatalf("requests after the HA stop failed: %v", bad)
	}
	if n := e.sim.ActionCalls(100, "start"); n != 2 {
		t.Fatalf("start requests %d, want 2 (the stop finished, then a wake)", n)
	}
}

// HA shuts containers down without forceStop: one that outlives the
// timeout would go to HA's error state, stuck until an administrator
// steps in. The idle stop of an HA container therefore asks HA for a
// hard stop, and the container wakes again afterwards.
func TestHAContainerNeverLeftInError(t *testing.T) {
	e := newEnvWith(t, pvesim.Options{HADelay: 100 * time.Millisecond}, pvesim.GuestSpec{VMID: 100, HA: true, ShutdownDelay: 3 * time.Second})
	e.start(e.wakeSite("100", "stop_timeout 1s"))
	if a := e.get("/"); a.code != 200 {
		t.Fatalf("wake: %d %s", a.code, a.body)
	}
	waitFor(t, 8*time.Second, "HA stopped the container", func() bool { return e.sim.Status(100) == "stopped" })
	if s := e.sim.HAState(100); s != "stopped" {
		t.Fatalf("HA state %q", s)
	}
	if a := e.get("/again"); a.code != 200 {
		t.Fatalf("wake after the stop: %d %s", a.code, a.body)
	}
}

// With rebalance-on-start HA starts the guest on another node: the wake
// follows it there instead of failing on "does not exist".
func TestHAStartOnAnotherNode(t *testing.T) {
	e := newEnvWith(t, pvesim.Options{HADelay: 200 * time.Millisecond}, pvesim.GuestSpec{VMID: 100, HA: true})
	e.sim.SetHAStartNode(100, "pve2")
	e.start(e.wakeSite("100", longHold))
	if a := e.get("/"); a.code != 200 {
		t.Fatalf("wake: %d %s", a.code, a.body)
	}
	if e.sim.Node(100) != "pve2" || e.sim.Calls("GET /nodes/pve2/lxc/100/status/current") == 0 {
		t.Fatalf("not followed to pve2: %v", e.sim.CallCounts())
	}
}

// In HA's error state every request is a no-op that still ends OK: a wake
// fails at once with a precise message and posts nothing, and an idle
// guest in error is not stopped.
func TestHAErrorStateNoFutileTasks(t *testing.T) {
	e := newEnvWith(t, pvesim.Options{}, pvesim.GuestSpec{VMID: 100, HA: true}, pvesim.GuestSpec{VMID: 101, HA: true, Running: true})
	e.sim.SetHAState(100, "error")
	e.sim.SetHAState(101, "error")
	e.startLogged(e.wakeSite("100", longHold), e.site("g101.test", "101", "", ""))
	began := time.Now()
	a := e.get("/")
	if a.code != 503 || !strings.Contains(a.body, "error state") || time.Since(began) > 2*time.Second {
		t.Fatalf("wake in HA error: %d after %s: %s", a.code, time.Since(began), a.body)
	}
	waitFor(t, 5*time.Second, "the idle check of the guest in error", func() bool {
		return e.logHas("idle stop deferred", "HA state error") || e.sim.ActionCalls(101, "stop")+e.sim.ActionCalls(101, "shutdown") > 0
	})
	for _, id := range []int{100, 101} {
		if n := e.sim.ActionCalls(id, "start") + e.sim.ActionCalls(id, "stop") + e.sim.ActionCalls(id, "shutdown"); n != 0 {
			t.Fatalf("guest %d: %d futile requests: %v", id, n, e.sim.CallCounts())
		}
	}
}

// While HA fences, recovers, freezes or moves a guest it ignores
// requests: the wake says what happens, posts nothing, and goes on once
// HA is done.
func TestHATransientStatesAreWaitedOut(t *testing.T) {
	states := []struct{ state, words string }{
		{"fence", "fencing"}, {"recovery", "recovering"}, {"freeze", "paused on the guest"},
		{"migrate", "moved to another node"}, {"relocate", "moved to another node"},
	}
	var specs []pvesim.GuestSpec
	for i := range states {
		specs = append(specs, pvesim.GuestSpec{VMID: 100 + i, HA: true})
	}
	e := newEnvWith(t, pvesim.Options{HADelay: 50 * time.Millisecond}, specs...)
	var sites []string
	for i, s := range states {
		e.sim.SetHAState(100+i, s.state)
		sites = append(sites, e.site(s.state+".test", fmt.Sprint(100+i), longHold, ""))
	}
	e.start(sites...)
	for i, s := range states {
		host := "Host: " + s.state + ".test"
		wait := e.goGet("/", host)
		e.waitEvent(s.state+".test", s.words)
		if n := e.sim.ActionCalls(100+i, "start"); n != 0 {
			t.Fatalf("%s: start posted while HA ignores requests", s.state)
		}
		e.sim.SetHAState(100+i, "stopped")
		if a, err := wait(); err != nil || a.code != 200 {
			t.Fatalf("%s: %v %d %s", s.state, err, a.code, a.body)
		}
	}
}

// A wake during a backup waits for the lock to clear: no failure, no
// back-off, and the page says why.
func TestLockIsWaitedOut(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100})
	e.sim.SetLock(100, "backup")
	e.adminPort = testcaddy.FreePort(t)
	e.start(e.wakeSite("100", longHold))
	wait := e.goGet("/")
	e.waitEvent("", "Backup in progress")
	if n := e.sim.ActionCalls(100, "start"); n != 0 {
		t.Fatalf("start posted during the backup (%d)", n)
	}
	e.sim.SetLock(100, "")
	if a, err := wait(); err != nil || a.code != 200 {
		t.Fatalf("after the backup: %v %d %s", err, a.code, a.body)
	}
	if in := e.info("100"); in.LastError != "" || e.sim.ActionCalls(100, "start") != 1 {
		t.Fatalf("the lock counted as a failure: %+v", in)
	}
}

// An idle stop during a snapshot is deferred, never turned into a hard
// stop; once the lock clears the guest is shut down.
func TestIdleStopDeferredDuringLock(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100})
	e.startLogged(e.wakeSite("100", ""))
	if a := e.get("/"); a.code != 200 {
		t.Fatalf("wake: %d", a.code)
	}
	e.sim.SetLock(100, "snapshot")
	waitFor(t, 5*time.Second, "the idle check during the snapshot", func() bool {
		return e.logHas("deferred", "Snapshot in progress") || e.sim.ActionCalls(100, "shutdown")+e.sim.ActionCalls(100, "stop") > 0
	})
	if n := e.sim.ActionCalls(100, "shutdown") + e.sim.ActionCalls(100, "stop"); n != 0 {
		t.Fatalf("stop tried during the snapshot: %v", e.sim.CallCounts())
	}
	e.sim.SetLock(100, "")
	waitFor(t, 5*time.Second, "idle stop after the snapshot", func() bool { return e.sim.Status(100) == "stopped" })
	if e.sim.ActionCalls(100, "shutdown") != 1 || e.sim.ActionCalls(100, "stop") != 0 {
		t.Fatalf("calls %v", e.sim.CallCounts())
	}
}

// A backup of a stopped VM runs it paused (prelaunch): that is no start
// by someone else and no reason to proxy; a request starts the VM inside
// the backup's QEMU, and it keeps running after the backup.
func TestBackupPrelaunchIsNoStart(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 200, Kind: "qemu"})
	e.adminPort = testcaddy.FreePort(t)
	e.start(e.wakeSite("200", longHold+"\n\t\tidle_timeout 1m"))
	waitFor(t, 3*time.Second, "first poll", func() bool { return e.info("200").State == "stopped" })
	e.sim.BeginBackup(200)
	waitFor(t, 3*time.Second, "a poll during the backup", func() bool { return e.info("200").Lock == "backup" })
	if in := e.info("200"); in.State != "stopped" || in.External {
		t.Fatalf("prelaunch taken for a start: %+v", in)
	}
	if a := e.get("/"); a.code != 200 || !strings.Contains(a.body, "hello from") {
		t.Fatalf("wake during the backup: %d %s", a.code, a.body)
	}
	e.sim.EndBackup(200)
	if e.sim.Status(200) != "running" || e.sim.ActionCalls(200, "start")+e.sim.ActionCalls(200, "resume") != 1 {
		t.Fatalf("after the backup: %s %v", e.sim.Status(200), e.sim.CallCounts())
	}
}

// A failed wake's back-off ends when the guest changes: here someone
// starts it.
func TestBackoffEndsWhenSomeoneStartsIt(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100})
	e.sim.FailStarts(100, "startup for container '100' failed")
	e.adminPort = testcaddy.FreePort(t)
	e.start(e.wakeSite("100", "retry_backoff 1m\n\t\tidle_timeout 1m"))
	if a := e.get("/"); a.code != 503 {
		t.Fatalf("failed start: %d", a.code)
	}
	if err := e.sim.StartGuest(100); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, "the outside start seen", func() bool { return e.info("100").State != "failed" })
	if a := e.get("/"); a.code != 200 || e.sim.ActionCalls(100, "start") != 1 {
		t.Fatalf("after someone started it: %d %s", a.code, a.body)
	}
}

// A wake that ran out of time on a backup says so, and its back-off ends
// when the lock clears.
func TestBackoffEndsWhenLockClears(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 101})
	e.sim.SetLock(101, "backup")
	e.adminPort = testcaddy.FreePort(t)
	e.start(e.wakeSite("101", "retry_backoff 1m\n\t\tidle_timeout 1m\n\t\twake_timeout 600ms\n\t\thold_timeout 5s"))
	a := e.get("/")
	if a.code != 504 || !strings.Contains(a.body, "Backup in progress") {
		t.Fatalf("wake timing out on a backup: %d %s", a.code, a.body)
	}
	e.sim.SetLock(101, "")
	waitFor(t, 3*time.Second, "the cleared lock seen", func() bool { return e.info("101").State != "failed" })
	if a := e.get("/"); a.code != 200 {
		t.Fatalf("after the backup: %d %s", a.code, a.body)
	}
}

// A guest migrated since the last poll is looked up again instead of
// failing with "does not exist"; its idle stop finds it too.
func TestMigratedSinceLastPoll(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100})
	e.poll = "1h" // one poll, at the start
	e.adminPort = testcaddy.FreePort(t)
	e.start(e.wakeSite("100", ""))
	waitFor(t, 3*time.Second, "first poll", func() bool { return e.info("100").Node == "pve1" })
	if err := e.sim.MigrateGuest(100, "pve2"); err != nil {
		t.Fatal(err)
	}
	if a := e.get("/"); a.code != 200 {
		t.Fatalf("wake after a migration: %d %s", a.code, a.body)
	}
	if e.sim.Calls("POST /nodes/pve2/lxc/100/status/start") != 1 {
		t.Fatalf("calls %v", e.sim.CallCounts())
	}
	waitFor(t, 3*time.Second, "idle stop on the new node", func() bool { return e.sim.Status(100) == "stopped" })
}

// When a node's pvestatd stalls, its rows say "unknown" without a name: a
// guest referenced by name stays found and ready, and is not stopped
// while its status is unknown.
func TestUnknownRowsKeepGuestReady(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100, Name: "web"})
	e.startLogged(e.wakeSite("web", ""))
	waitFor(t, 3*time.Second, "first poll", func() bool { return e.sim.Calls("GET /cluster/resources") > 0 })
	if a := e.get("/"); a.code != 200 {
		t.Fatalf("wake: %d", a.code)
	}
	e.sim.SetNodeStale("pve1", true)
	n := e.sim.Calls("GET /cluster/resources")
	waitFor(t, 3*time.Second, "polls with unknown rows", func() bool { return e.sim.Calls("GET /cluster/resources") >= n+2 })
	for i := 0; i < 5; i++ {
		if a := e.get("/stale"); a.code != 200 || a.header.Get("X-Proxmox-Wake") != "" {
			t.Fatalf("ready guest demoted on an unknown row: %d %v %s", a.code, a.header, a.body)
		}
	}
	waitFor(t, 5*time.Second, "the idle check without status", func() bool {
		return e.logHas("idle stop deferred", "no status") || e.sim.ActionCalls(100, "shutdown") > 0
	})
	if e.sim.ActionCalls(100, "shutdown") != 0 || e.sim.ActionCalls(100, "start") != 1 {
		t.Fatalf("stopped or woken again without a status: %v", e.sim.CallCounts())
	}
	e.sim.SetNodeStale("pve1", false)
	waitFor(t, 5*time.Second, "idle stop once the status is back", func() bool { return e.sim.Status(100) == "stopped" })
}

// A template is refused with PVE's reason: by the wake when the config
// came before the first poll, at provision (a reload) once the poll knows.
// So is stop_method suspend for a container.
func TestTemplateAndLXCSuspendRefused(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 9000, Kind: "qemu", Name: "base", Template: true}, pvesim.GuestSpec{VMID: 100})
	first := e.site("tmpl.test", "base", "", "")
	e.start(first, e.wakeSite("100", "idle_timeout 1m"))
	a := e.get("/", "Host: tmpl.test", "Accept: application/json")
	if a.code != 503 || !strings.Contains(a.body, "template") || e.sim.ActionCalls(9000, "start") != 0 {
		t.Fatalf("wake of a template: %d %s", a.code, a.body)
	}
	waitFor(t, 3*time.Second, "a poll", func() bool { return e.sim.Calls("GET /cluster/resources") > 1 })
	for _, c := range []struct{ site, want string }{
		{first, "you can't start a vm if it's a template"},
		{e.wakeSite("100", "stop_method suspend"), "stop_method suspend"},
	} {
		js, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(e.globals("")+c.site), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := caddy.Load(js, true); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("reload accepted or wrong reason: %v, want %q", err, c.want)
		}
	}
	if a := e.get("/"); a.code != 200 {
		t.Fatalf("the running config broke: %d", a.code)
	}
}

// LXC suspend is PVE's CRIU checkpoint (criu is not installed by
// default): a config that names it before the first poll shuts the
// container down instead, with a warning.
func TestLXCSuspendShutsDown(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100})
	e.startLogged(e.wakeSite("100", "stop_method suspend"))
	if a := e.get("/"); a.code != 200 {
		t.Fatalf("wake: %d", a.code)
	}
	waitFor(t, 5*time.Second, "idle stop", func() bool { return e.sim.Status(100) == "stopped" })
	if e.sim.ActionCalls(100, "suspend") != 0 || e.sim.ActionCalls(100, "shutdown") != 1 || !e.logHas(`"level":"warn"`, "stop_method suspend") {
		t.Fatalf("calls %v", e.sim.CallCounts())
	}
	if a := e.get("/"); a.code != 200 || e.sim.ActionCalls(100, "start") != 2 {
		t.Fatalf("wake again: %d", a.code)
	}
}

// A cloud-init VM's static address (ipconfig0) serves without a guest
// agent, with one Caddy may not ask (a token without the agent
// privilege), and with one enabled in the config but never installed in
// the guest (once the service answers there).
func TestCloudInitAddress(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 200, Kind: "qemu", NoAgent: true, CloudInit: true},
		pvesim.GuestSpec{VMID: 201, Kind: "qemu", CloudInit: true},
		pvesim.GuestSpec{VMID: 202, Kind: "qemu", CloudInit: true, AgentNotRunning: true, BootDelay: 300 * time.Millisecond})
	e.sim.SetPrivileges("/vms", "VM.Audit", "VM.PowerMgmt")
	e.sim.SetPrivileges("/vms/202", "VM.Monitor") // PVE 8's agent privilege
	e.start(e.wakeSite("200", ""), e.site("agent.test", "201", "", ""), e.site("no-agent.test", "202", "", ""))
	for _, host := range []string{"127.0.0.1", "agent.test", "no-agent.test"} {
		if a := e.get("/", "Host: "+host); a.code != 200 || !strings.Contains(a.body, "hello from") {
			t.Fatalf("cloud-init VM %s: %d %s", host, a.code, a.body)
		}
	}
	if n := e.sim.CallsMatching("/qemu/200/agent/"); n != 0 {
		t.Fatalf("agent of a VM without one asked %d times", n)
	}
	if n := e.sim.CallsMatching("/qemu/202/agent/"); n == 0 {
		t.Fatal("the agent of VM 202 was never asked")
	}
}

// Behind NAT (KubeVirt's masquerade pod network through proxmox_api, a
// PVE NAT bridge), ipconfig0 is the address inside the guest: the guest
// agent's address for the NIC's MAC is the one proxied to, even while
// the agent starts after the VM. The inside address is one of this host's
// loopback addresses where nothing listens, as unreachable as NAT makes
// it: a private address such as 10.0.2.2 answers on machines whose
// egress goes through a transparent proxy (this sandbox's, for ports
// outside the ephemeral range).
func TestCloudInitBehindNAT(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 200, Kind: "qemu", CloudInit: true, CloudInitIP: nextIP(), BootDelay: 300 * time.Millisecond})
	e.start(e.wakeSite("200", ""))
	if a := e.get("/"); a.code != 200 || !strings.Contains(a.body, "hello from") {
		t.Fatalf("cloud-init VM behind NAT: %d %s", a.code, a.body)
	}
}

// A guest with only IPv6 addresses is reached over IPv6.
func TestIPv6OnlyGuest(t *testing.T) {
	if l, err := net.Listen("tcp", "[::1]:0"); err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	} else {
		l.Close()
	}
	vmPort := testcaddy.FreePort(t)
	e := newEnv(t, pvesim.GuestSpec{VMID: 100, IP: "::1"}, pvesim.GuestSpec{VMID: 200, Kind: "qemu", IP: "::1", Port: vmPort})
	e.start(e.wakeSite("100", ""), e.site("vm.test", "200", fmt.Sprintf("port %d", vmPort), ""))
	if a := e.get("/"); a.code != 200 || !strings.Contains(a.body, "hello from") {
		t.Fatalf("IPv6 container: %d %s", a.code, a.body)
	}
	if a := e.get("/", "Host: vm.test"); a.code != 200 || !strings.Contains(a.body, "hello from") {
		t.Fatalf("IPv6 VM (guest agent): %d %s", a.code, a.body)
	}
}

// An address is taken only from the interfaces of the guest's config:
// while eth0 waits for its lease, a Docker bridge inside the guest (which
// may be an address of Caddy's own host) is never proxied to.
func TestOnlyConfiguredInterfaces(t *testing.T) {
	decoyIP := nextIP()
	e := newEnv(t)
	decoy := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "decoy: not the guest") })}
	l, err := net.Listen("tcp", net.JoinHostPort(decoyIP, fmt.Sprint(e.guestPort)))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = decoy.Serve(l) }()
	t.Cleanup(func() { _ = decoy.Close() })
	if err := e.sim.AddGuest(pvesim.GuestSpec{VMID: 100, IP: nextIP(), Port: e.guestPort, LeaseDelay: 600 * time.Millisecond,
		ExtraIfaces: []pvesim.Iface{{Name: "docker0", MAC: "02:42:ac:11:00:01", IP: decoyIP}}}); err != nil {
		t.Fatal(err)
	}
	e.start(e.wakeSite("100", ""))
	if a := e.get("/"); a.code != 200 || !strings.Contains(a.body, "hello from") {
		t.Fatalf("answer from elsewhere: %d %s", a.code, a.body)
	}
}

// A 401/403 is a configuration error: the wake fails at once with a
// public "permission" message, and the log names the missing privilege,
// PVE 9's guest agent privilege or PVE 8's VM.Monitor.
func TestMissingPrivilegeFailsAtOnce(t *testing.T) {
	for _, c := range []struct {
		version int
		priv    string
	}{{9, "VM.GuestAgent.Audit|VM.GuestAgent.Unrestricted"}, {8, "VM.Monitor"}} {
		t.Run(fmt.Sprintf("PVE%d", c.version), func(t *testing.T) {
			e := newEnvWith(t, pvesim.Options{Version: c.version}, pvesim.GuestSpec{VMID: 200, Kind: "qemu"})
			e.sim.SetPrivileges("/vms", "VM.Audit", "VM.PowerMgmt")
			e.adminPort = testcaddy.FreePort(t)
			e.startLogged(e.wakeSite("200", ""))
			began := time.Now()
			a := e.get("/")
			if a.code != 503 || !strings.Contains(a.body, "permission") || time.Since(began) > 2*time.Second {
				t.Fatalf("answer %d after %s: %s", a.code, time.Since(began), a.body)
			}
			if !e.logHas(`"privilege":"`+c.priv+`"`, `"path":"/vms/200"`) || !strings.Contains(e.info("200").LastError, c.priv) {
				t.Fatalf("privilege %s not logged", c.priv)
			}
			if n := e.sim.Calls("GET /nodes/pve1/qemu/200/agent/network-get-interfaces"); n != 1 {
				t.Fatalf("agent asked %d times", n)
			}
		})
	}
}

// /cluster/status needs Sys.Audit on /, which a least-privilege token
// lacks: it is optional, asked at most once, and wakes work.
func TestClusterStatusOptional(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100})
	e.sim.SetPrivileges("/vms", "VM.Audit", "VM.PowerMgmt")
	e.start(e.wakeSite("100", ""))
	waitFor(t, 5*time.Second, "ten polls", func() bool { return e.sim.Calls("GET /cluster/resources") >= 10 })
	if n := e.sim.Calls("GET /cluster/status"); n > 1 {
		t.Fatalf("/cluster/status asked %d times", n)
	}
	if a := e.get("/"); a.code != 200 {
		t.Fatalf("wake: %d %s", a.code, a.body)
	}
}

// A token PVE refuses (401) fails the wake at once, not after
// wake_timeout of "cluster not reachable".
func TestRefusedTokenFailsAtOnce(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100})
	testcaddy.Start(t, strings.Replace(e.globals(""), e.sim.TokenSecret(), "not-the-secret", 1)+e.wakeSite("100", longHold))
	began := time.Now()
	a := e.get("/")
	if a.code != 503 || !strings.Contains(a.body, "permission") || time.Since(began) > 2*time.Second {
		t.Fatalf("answer %d after %s: %s", a.code, time.Since(began), a.body)
	}
}

// An HA resource in state "ignored" behaves as if not managed by HA
// (pve-ha-manager PVE/HA/Config.pm): it is started and stopped directly.
func TestHAIgnoredIsManagedDirectly(t *testing.T) {
	e := newEnvWith(t, pvesim.Options{HADelay: time.Hour}, pvesim.GuestSpec{VMID: 100, HA: true})
	e.sim.SetHAState(100, "ignored")
	e.start(e.wakeSite("100", ""))
	if a := e.get("/"); a.code != 200 {
		t.Fatalf("wake: %d %s", a.code, a.body)
	}
	waitFor(t, 5*time.Second, "idle stop", func() bool { return e.sim.Status(100) == "stopped" })
	if e.sim.CallsMatching(":vzstart:") == 0 || e.sim.CallsMatching(":vzshutdown:") == 0 || e.sim.CallsMatching(":ha") != 0 {
		t.Fatalf("calls %v", e.sim.CallCounts())
	}
}
