package wake

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"encoding/json"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
	"github.com/caddy-proxmox/caddy-proxmox/internal/testutil"
	"github.com/caddy-proxmox/caddy-proxmox/pvesim"
)

// A held API request wakes a stopped LXC guest, is proxied once it is
// ready and carries the cold-start header; the next one is warm.
func TestColdStartHeldRequest(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100, Name: "web", BootDelay: 100 * time.Millisecond})
	e.start(e.wakeSite("100", "idle_timeout 10s"))
	e.waitPolled()
	if n := e.sim.CallsMatching("/status/"); n != 0 {
		t.Fatalf("power calls before any request: %v", e.sim.CallCounts())
	}
	a := e.get("/hello")
	if a.code != 200 || !strings.Contains(a.body, "hello from web (vmid 100) /hello") {
		t.Fatalf("cold request: %d %q", a.code, a.body)
	}
	if a.header.Get("X-Proxmox-Wake") != "cold" {
		t.Fatalf("cold-start header: %q", a.header.Get("X-Proxmox-Wake"))
	}
	a = e.get("/again")
	if a.code != 200 || a.header.Get("X-Proxmox-Wake") != "" {
		t.Fatalf("warm request: %d %v", a.code, a.header)
	}
	if n := e.sim.ActionCalls(100, "start"); n != 1 {
		t.Fatalf("start calls %d", n)
	}
	// Address discovery used the config's MAC and /interfaces (DHCP).
	if e.sim.Calls("GET /nodes/pve1/lxc/100/interfaces") == 0 || e.sim.Calls("GET /nodes/pve1/lxc/100/config") == 0 {
		t.Fatalf("no address discovery: %v", e.sim.CallCounts())
	}
}

// After idle_timeout without activity the guest is shut down (and the
// config is never written); a request during the stop waits for it and
// wakes the guest again.
func TestIdleStopAndRewakeDuringStop(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100, ShutdownDelay: 400 * time.Millisecond})
	e.start(e.wakeSite("100", ""))
	if a := e.get("/"); a.code != 200 {
		t.Fatalf("wake: %d %s", a.code, a.body)
	}
	// shutdown begins ~300ms after the last request and takes 400ms.
	waitFor(t, 3*time.Second, "shutdown call", func() bool { return e.sim.ActionCalls(100, "shutdown") == 1 })
	if e.sim.Status(100) != "running" {
		t.Fatal("expected the shutdown to be in progress")
	}
	a := e.get("/during-stop")
	if a.code != 200 || a.header.Get("X-Proxmox-Wake") != "cold" {
		t.Fatalf("request during stop: %d %s", a.code, a.body)
	}
	if n := e.sim.ActionCalls(100, "start"); n != 2 {
		t.Fatalf("start calls %d, want 2", n)
	}
	waitFor(t, 3*time.Second, "idle stop", func() bool { return e.sim.Status(100) == "stopped" && e.sim.ActionCalls(100, "shutdown") == 2 })
	if n := e.sim.CallsMatching("PUT ") + e.sim.CallsMatching("POST /nodes/pve1/lxc/100/config"); n != 0 {
		t.Fatalf("guest config written: %v", e.sim.CallCounts())
	}
}

// An open websocket keeps the guest awake well past idle_timeout; once it
// closes, the guest idles out. A streaming response does the same.
func TestWebsocketAndStreamKeepAwake(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100})
	e.adminPort = testcaddy.FreePort(t)
	e.start(e.wakeSite("100", ""))
	if a := e.get("/"); a.code != 200 {
		t.Fatalf("wake: %d", a.code)
	}
	conn, br := e.openUpgrade("/ws")
	for i := 0; i < 6; i++ { // 1.2s = 4x idle_timeout
		msg := fmt.Sprintf("ping %d\n", i)
		if _, err := conn.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, err := br.ReadString('\n')
		if err != nil || line != msg {
			t.Fatalf("echo %q %v", line, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Idle on the websocket itself (no frames for more than twice
	// idle_timeout) must not count as idle: the guest still counts the
	// connection in flight, which keeps its idle check from stopping it.
	time.Sleep(700 * time.Millisecond)
	if info := e.info("100"); info.Inflight == 0 || info.SleepIn == nil || *info.SleepIn != 0.3 {
		t.Fatalf("the open websocket is not counted in flight: %+v", info)
	}
	if e.sim.Status(100) != "running" || e.sim.ActionCalls(100, "shutdown") != 0 {
		t.Fatal("guest stopped while a websocket was open")
	}
	conn.Close()
	waitFor(t, 3*time.Second, "stop after the websocket closed", func() bool { return e.sim.Status(100) == "stopped" })

	// Streaming response (SSE from the guest) for 1s = 3x idle_timeout.
	res, err := client.Get(e.base + "/stream?n=20")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(res.Body)
	ticks := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: tick") {
			ticks++
			if e.sim.Status(100) != "running" {
				t.Fatal("guest stopped during a streaming response")
			}
		}
	}
	res.Body.Close()
	if ticks != 20 {
		t.Fatalf("ticks %d", ticks)
	}
	waitFor(t, 3*time.Second, "stop after the stream", func() bool { return e.sim.Status(100) == "stopped" })
}

// 1000 concurrent requests on a stopped guest: exactly one start call,
// every request answered 200.
func TestThousandConcurrentRequests(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100, StartDelay: 300 * time.Millisecond})
	e.start(e.wakeSite("100", "idle_timeout 30s\n\t\thold_timeout 20s\n\t\twake_timeout 20s"))
	const n = 1000
	var wg sync.WaitGroup
	codes := make([]int, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			a, err := e.do("GET", fmt.Sprintf("/r%d", i))
			codes[i], errs[i] = a.code, err
		}()
	}
	close(start)
	wg.Wait()
	bad := map[string]int{}
	for i := range codes {
		if errs[i] != nil {
			bad[errs[i].Error()]++
		} else if codes[i] != 200 {
			bad[fmt.Sprint(codes[i])]++
		}
	}
	if len(bad) > 0 {
		t.Fatalf("not all answered 200: %v", bad)
	}
	if s := e.sim.ActionCalls(100, "start"); s != 1 {
		t.Fatalf("start calls %d, want exactly 1", s)
	}
}

// Browsers get the loading page at once (503, no-store, SSE script and a
// no-JS meta refresh), the SSE stream reports the steps up to ready, and
// the reload gets the guest.
func TestBrowserLoadingPageAndSSE(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100, Name: "web", StartDelay: 300 * time.Millisecond})
	e.start(e.wakeSite("100", "idle_timeout 10s"))
	e.waitPolled() // the guest's name is known
	began := time.Now()
	a := e.get("/page", "Accept: text/html,application/xhtml+xml", "Sec-Fetch-Mode: navigate")
	if time.Since(began) > time.Second {
		t.Fatalf("loading page took %s", time.Since(began))
	}
	if a.code != 503 || !strings.HasPrefix(a.header.Get("Content-Type"), "text/html") {
		t.Fatalf("page: %d %v", a.code, a.header)
	}
	if a.header.Get("Cache-Control") != "no-store" || a.header.Get("Retry-After") == "" || a.header.Get("X-Proxmox-Wake") != "loading" {
		t.Fatalf("page headers: %v", a.header)
	}
	for _, want := range []string{"EventSource", "/.well-known/proxmox-wake/events", `<noscript><meta http-equiv="refresh" content="2"></noscript>`, "Starting web"} {
		if !strings.Contains(a.body, want) {
			t.Fatalf("page lacks %q:\n%s", want, a.body)
		}
	}
	res, err := client.Get(e.base + "/.well-known/proxmox-wake/events")
	if err != nil {
		t.Fatal(err)
	}
	if res.Header.Get("Content-Type") != "text/event-stream" || res.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("sse headers %v", res.Header)
	}
	body, _ := io.ReadAll(res.Body) // ends after the final event
	res.Body.Close()
	for _, phase := range []string{`"phase":"starting"`, `"phase":"start_task"`, `"phase":"task_ok"`, `"phase":"address"`, `"phase":"ready"`} {
		if !strings.Contains(string(body), phase) {
			t.Fatalf("SSE lacks %s:\n%s", phase, body)
		}
	}
	// Without show_details, visitors learn no node, vmid or address.
	for _, internal := range []string{"pve1", "CT 100", "Address 127.", "on port", "(100)"} {
		if strings.Contains(string(body), internal) || strings.Contains(a.body, internal) {
			t.Fatalf("page or SSE shows %q:\n%s\n%s", internal, a.body, body)
		}
	}
	a = e.get("/page", "Accept: text/html")
	if a.code != 200 || !strings.Contains(a.body, "hello from web") {
		t.Fatalf("after ready: %d %s", a.code, a.body)
	}
	// HTML accepted without Sec-Fetch-Mode is a navigation too; a fetch()
	// (Sec-Fetch-Mode: cors) is held instead.
	if !strings.Contains(e.get("/x", "Accept: text/html").body, "hello") {
		t.Fatal("ready guest not proxied for HTML")
	}
}

// A hold longer than hold_timeout ends in 503 + Retry-After, never a hang.
func TestHoldTimeout(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100, StartDelay: 2 * time.Second})
	e.start(e.wakeSite("100", "hold_timeout 300ms"))
	began := time.Now()
	a := e.get("/api/x")
	if took := time.Since(began); took > 1500*time.Millisecond {
		t.Fatalf("hold took %s", took)
	}
	if a.code != 503 || a.header.Get("Retry-After") == "" || a.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("hold timeout: %d %v %s", a.code, a.header, a.body)
	}
	if !strings.Contains(a.body, `"retry_after"`) {
		t.Fatalf("json body expected: %s", a.body)
	}
	// The wake went on without the client.
	waitFor(t, 5*time.Second, "guest serving", func() bool { return e.sim.Serving(100) })
}

// A failed start backs off, tells the user why, and is retried once the
// back-off has passed.
func TestFailedStartBackoff(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100})
	e.sim.FailStarts(100, "startup for container '100' failed")
	e.adminPort = testcaddy.FreePort(t)
	e.start(e.wakeSite("100", ""))
	a := e.get("/")
	if a.code != 503 || a.header.Get("Retry-After") == "" || !strings.Contains(a.body, `"error":"The guest could not be started."`) {
		t.Fatalf("failed start: %d %v %q", a.code, a.header, a.body)
	}
	// During the back-off: no new start, same explanation, also on the page.
	a = e.get("/", "Accept: text/plain")
	if a.code != 503 || !strings.Contains(a.body, "next try in") || e.sim.ActionCalls(100, "start") != 1 {
		t.Fatalf("backoff: %d %s %d", a.code, a.body, e.sim.ActionCalls(100, "start"))
	}
	page := e.get("/", "Accept: text/html", "Sec-Fetch-Mode: navigate")
	if page.code != 503 || !strings.Contains(page.body, "could not be started") || !strings.Contains(page.body, "The last start failed; next try in") {
		t.Fatalf("error page: %d %s", page.code, page.body)
	}
	// The cluster's error text is for the log and the admin API.
	if strings.Contains(page.body, "startup for container") || strings.Contains(a.body, "startup for container") {
		t.Fatalf("error text shown to visitors: %s %s", a.body, page.body)
	}
	var info struct {
		LastError string `json:"last_error"`
	}
	if code := e.adminJSON("GET", "/proxmox/guests/"+e.cluster+"/100", &info); code != 200 {
		t.Fatalf("admin API: %d", code)
	}
	if !strings.Contains(info.LastError, "startup for container '100' failed") {
		t.Fatalf("admin API last_error %q", info.LastError)
	}
	e.sim.ClearFaults()
	time.Sleep(1100 * time.Millisecond)
	if a := e.get("/"); a.code != 200 {
		t.Fatalf("after back-off: %d %s", a.code, a.body)
	}
	if n := e.sim.ActionCalls(100, "start"); n != 2 {
		t.Fatalf("start calls %d", n)
	}
}

// A guest whose service never listens fails at wake_timeout: 504 with
// Retry-After; an API error on the start call gives 503 with PVE's text.
func TestNeverReadyAndAPIFaults(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100}, pvesim.GuestSpec{VMID: 101})
	e.sim.SetNeverReady(100, true)
	e.sim.FailAPI("POST /nodes/pve1/lxc/101/status/start", 500, "cluster not ready - no quorum?", 1)
	e.start(e.wakeSite("100", "wake_timeout 700ms\n\t\thold_timeout 5s"), e.site("g101.test", "101", "", ""))
	a := e.get("/")
	if a.code != 504 || a.header.Get("Retry-After") == "" || !strings.Contains(a.body, `"error":"The service was not ready within 700ms."`) {
		t.Fatalf("never ready: %d %v %q", a.code, a.header, a.body)
	}
	a = e.get("/", "Host: g101.test", "Accept: application/json")
	if a.code != 503 || a.header.Get("Retry-After") == "" || strings.Contains(a.body, "no quorum") || strings.Contains(a.body, `"guest":`) ||
		!strings.Contains(a.body, `"error":"The guest could not be started."`) {
		t.Fatalf("API 500: %d %v %s", a.code, a.header, a.body)
	}
	// API timeouts: the poll and the status calls hang; the wake (and
	// the hold) stay bounded.
	e.sim.DelayAPI("GET /nodes/pve1/lxc/101/status/current", 10*time.Second)
	time.Sleep(1100 * time.Millisecond) // back-off
	began := time.Now()
	a = e.get("/", "Host: g101.test")
	if a.code < 500 || time.Since(began) > 6*time.Second {
		t.Fatalf("API timeout: %d after %s: %s", a.code, time.Since(began), a.body)
	}
}

// Requests matched by ignore neither wake nor extend: 503 while asleep,
// passed on while awake, and the guest still idles out under them.
func TestIgnoreMatcher(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100})
	e.adminPort = testcaddy.FreePort(t)
	e.start(e.site("127.0.0.1", "100", "ignore {\n\t\t\tpath /health\n\t\t}\n\t\tignore @bots", "@bots header User-Agent *bot*"))
	waitFor(t, 2*time.Second, "the guest known stopped", func() bool { return e.info("100").State == "stopped" })
	if a := e.get("/health"); a.code != 503 || a.header.Get("Retry-After") == "" {
		t.Fatalf("health while asleep: %d", a.code)
	}
	if a := e.get("/page", "User-Agent: Googlebot/2.1"); a.code != 503 {
		t.Fatalf("bot while asleep: %d", a.code)
	}
	// A request that wakes or extends does so before it is answered.
	if info := e.info("100"); info.State != "stopped" || info.LastActivity != nil || info.Inflight != 0 {
		t.Fatalf("ignored requests woke or touched the guest: %+v", info)
	}
	if n := e.sim.ActionCalls(100, "start"); n != 0 {
		t.Fatalf("ignored requests woke the guest (%d starts)", n)
	}
	if a := e.get("/"); a.code != 200 {
		t.Fatalf("wake: %d", a.code)
	}
	last := time.Now()
	sawHealthOK := false
	for time.Since(last) < 2*time.Second && e.sim.Status(100) == "running" {
		if a := e.get("/health"); a.code == 200 {
			sawHealthOK = true
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !sawHealthOK {
		t.Fatal("health checks never reached the awake guest")
	}
	waitFor(t, time.Second, "stop despite health checks", func() bool { return e.sim.Status(100) == "stopped" })
	if took := time.Since(last); took > 1500*time.Millisecond {
		t.Fatalf("health checks extended the idle time: stopped after %s", took)
	}
}

// Config validation (caddy validate) and loading never contact PVE
// beyond reading; no guest is started or stopped by a config.
func TestValidateAndLoadStartNothing(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100}, pvesim.GuestSpec{VMID: 101, Running: true})
	cfgJSON, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(e.globals("")+e.wakeSite("100", "")), nil)
	if err != nil {
		t.Fatal(err)
	}
	var cfg caddy.Config
	if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
		t.Fatal(err)
	}
	before := testutil.GoroutineBaseline()
	if err := caddy.Validate(&cfg); err != nil {
		t.Fatal(err)
	}
	// Nothing validate started still runs, so no call can come later.
	before.Check(t, 5*time.Second)
	if n := e.sim.TotalCalls(); n != 0 {
		t.Fatalf("validate made %d API calls: %v", n, e.sim.CallCounts())
	}
	e.start(e.wakeSite("100", "idle_timeout 10s"))
	e.waitPolled()
	e.waitPolled()
	if n := e.sim.CallsMatching("/status/"); n != 0 {
		t.Fatalf("loading a config called %v", e.sim.CallCounts())
	}
}

// show_details puts the node, vmid, address and the cluster's error text
// on the page, the event stream and held answers.
func TestShowDetails(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100, Name: "web", StartDelay: 200 * time.Millisecond})
	e.sim.FailStarts(100, "startup for container '100' failed")
	e.start(e.wakeSite("100", "show_details"))
	a := e.get("/", "Accept: application/json")
	if a.code != 503 || !strings.Contains(a.body, "startup for container '100' failed") || !strings.Contains(a.body, `"guest":"`+e.cluster+`/100"`) {
		t.Fatalf("held answer: %d %s", a.code, a.body)
	}
	page := e.get("/", "Accept: text/html", "Sec-Fetch-Mode: navigate")
	if page.code != 503 || !strings.Contains(page.body, "startup for container") {
		t.Fatalf("error page: %d %s", page.code, page.body)
	}
	e.sim.ClearFaults()
	time.Sleep(1100 * time.Millisecond) // back-off
	if page = e.get("/", "Accept: text/html", "Sec-Fetch-Mode: navigate"); page.code != 503 {
		t.Fatalf("page: %d", page.code)
	}
	res, err := client.Get(e.base + "/.well-known/proxmox-wake/events")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, want := range []string{"Waking up web (100)", "Starting CT 100 on pve1", `"message":"Address 127.`, `"phase":"ready"`} {
		if !strings.Contains(string(body), want) {
			t.Fatalf("SSE lacks %q:\n%s", want, body)
		}
	}
}
