package wakel4

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	// caddy-l4's proxy, which the handler hands connections to.
	_ "github.com/mholt/caddy-l4/modules/l4proxy"

	// The proxmox app, and the options shared with its HTTP handler.
	"github.com/caddy-proxmox/caddy-proxmox/caddymodule/wake"
	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
	"github.com/caddy-proxmox/caddy-proxmox/lxc"
	"github.com/caddy-proxmox/caddy-proxmox/pvesim"
)

var (
	ipSeq      atomic.Int32
	clusterSeq atomic.Int32
)

// l4env is a simulated cluster with guest 100 serving a TCP and a UDP
// echo, and a Caddy whose layer4 app wakes it.
type l4env struct {
	t        *testing.T
	sim      *pvesim.Sim
	cluster  string
	apiURL   string
	tcpPort  int // the guest's echo ports
	udpPort  int
	listenTC int // Caddy's layer4 listeners
	listenUD int
}

func newL4Env(t *testing.T, spec pvesim.GuestSpec) *l4env {
	t.Helper()
	e := &l4env{t: t, tcpPort: testcaddy.FreePort(t), udpPort: testcaddy.FreePort(t),
		listenTC: testcaddy.FreePort(t), listenUD: testcaddy.FreePort(t)}
	e.cluster = fmt.Sprintf("l4lab%d", clusterSeq.Add(1))
	e.sim = pvesim.New(pvesim.Options{Nodes: []string{"pve1"}, TaskDelay: 30 * time.Millisecond})
	spec.VMID = 100
	spec.IP = fmt.Sprintf("127.78.0.%d", 2+ipSeq.Add(1))
	spec.Port = testcaddy.FreePort(t)
	spec.EchoTCP = []int{e.tcpPort}
	spec.EchoUDP = []int{e.udpPort}
	if err := e.sim.AddGuest(spec); err != nil {
		t.Fatal(err)
	}
	url, err := e.sim.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.apiURL = url
	t.Cleanup(func() { _ = e.sim.Close() })
	return e
}

// start runs Caddy with a TCP route and a UDP route to guest 100; opts
// go into both proxmox_wake blocks.
func (e *l4env) start(opts string) {
	e.t.Helper()
	route := func(port int) string {
		return fmt.Sprintf(`route {
				proxmox_wake %s/100 %d {
					idle_timeout 400ms
					wake_timeout 5s
					task_poll_interval 20ms
					probe_interval 20ms
					retry_backoff 10s
					%s
				}
				proxy {l4.proxmox.upstream}
			}`, e.cluster, port, opts)
	}
	testcaddy.Start(e.t, fmt.Sprintf(`{
	admin off
	storage file_system %s
	proxmox {
		cluster %s {
			url %s
			token_id %s
			token_secret %s
			poll_interval 100ms
			request_timeout 2s
		}
	}
	layer4 {
		tcp/127.0.0.1:%d {
			%s
		}
		udp/127.0.0.1:%d {
			%s
		}
	}
}
`, e.t.TempDir(), e.cluster, e.apiURL, e.sim.TokenID(), e.sim.TokenSecret(),
		e.listenTC, route(e.tcpPort), e.listenUD, strings.ReplaceAll(route(e.udpPort), "probe_interval 20ms", "probe none")))
}

func (e *l4env) guest() *lxc.Guest { return lxc.FindGuest(e.cluster, "100") }

// waitFor polls cond for up to d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A TCP client of a stopped guest is held (its first bytes already
// sent), gets through once the guest runs, keeps the guest up while the
// connection stays open however quiet, and the guest is stopped after it
// closes and idle_timeout passes.
func TestTCPHeldUntilReadyAndCountedWhileOpen(t *testing.T) {
	e := newL4Env(t, pvesim.GuestSpec{StartDelay: 300 * time.Millisecond})
	e.start("")
	conn, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(e.listenTC))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(15 * time.Second))
	r := bufio.NewReader(conn)
	began := time.Now()
	if _, err := conn.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != "hello\n" {
		t.Fatalf("echo through the held connection: %q %v", line, err)
	}
	if took := time.Since(began); took < 300*time.Millisecond {
		t.Fatalf("answered in %v, before the guest's 300ms start could finish", took)
	}
	if n := e.sim.ActionCalls(100, "start"); n != 1 {
		t.Fatalf("start posted %d times", n)
	}
	if in := e.guest().Info(); in.Inflight != 1 || in.Streams != 1 {
		t.Fatalf("open connection not counted: inflight %d streams %d", in.Inflight, in.Streams)
	}

	// Quiet but open: 15 polls (1.5s, several idle_timeouts) go by, each
	// a chance to stop it.
	polls := e.sim.Calls("GET /cluster/resources")
	waitFor(t, 10*time.Second, "15 polls", func() bool { return e.sim.Calls("GET /cluster/resources") >= polls+15 })
	if st := e.sim.Status(100); st != "running" || e.sim.ActionCalls(100, "shutdown")+e.sim.ActionCalls(100, "stop") != 0 {
		t.Fatalf("guest %s (shutdowns %d) under an open connection", st, e.sim.ActionCalls(100, "shutdown"))
	}
	if _, err := conn.Write([]byte("still\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != "still\n" {
		t.Fatalf("echo after the quiet spell: %q %v", line, err)
	}

	conn.Close()
	waitFor(t, 10*time.Second, "the idle stop", func() bool { return e.sim.Status(100) == "stopped" })
	if n := e.sim.ActionCalls(100, "shutdown"); n != 1 {
		t.Fatalf("shutdown posted %d times", n)
	}
}

// stream_idle_timeout, shared with the HTTP handler: a TCP connection
// that carries bytes keeps the guest up; once every open connection has
// been silent for that long, the guest idles out idle_timeout after the
// last byte, with the connections still open (a database pool, a
// forgotten SSH session).
func TestTCPStreamIdleTimeout(t *testing.T) {
	e := newL4Env(t, pvesim.GuestSpec{})
	e.start("stream_idle_timeout 300ms")
	dial := func() (net.Conn, *bufio.Reader) {
		conn, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(e.listenTC))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
		return conn, bufio.NewReader(conn)
	}
	ping := func(conn net.Conn, r *bufio.Reader, msg string) {
		t.Helper()
		fmt.Fprint(conn, msg)
		if line, err := r.ReadString('\n'); err != nil || line != msg {
			t.Fatalf("echo %q: %q %v (guest %s)", msg, line, err, e.sim.Status(100))
		}
	}
	silent, sr := dial()
	ping(silent, sr, "wake\n")
	active, ar := dial()
	// 16 round trips over 1.6s: five stream_idle_timeouts, four
	// idle_timeouts.
	var last time.Time
	for i := 0; i < 16; i++ {
		if i > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		ping(active, ar, fmt.Sprintf("ping %d\n", i))
		last = time.Now()
	}
	if n := e.sim.ActionCalls(100, "shutdown"); n != 0 {
		t.Fatalf("guest stopped (%d) while a connection carried traffic", n)
	}
	if in := e.guest().Info(); in.Inflight != 2 || in.Streams != 2 {
		t.Fatalf("open connections not counted: inflight %d streams %d", in.Inflight, in.Streams)
	}
	waitFor(t, 10*time.Second, "the stop with two silent connections open", func() bool { return e.sim.Status(100) == "stopped" })
	if took := time.Since(last); took < 400*time.Millisecond {
		t.Fatalf("stopped %s after the last byte, before idle_timeout", took)
	}
}

// The activity options the proxy cannot see work for layer4 too: an idle
// stop waits while pre_stop_check says the guest is busy (a game with
// players on another port), and goes ahead once it answers 2xx.
func TestPreStopCheckThroughLayer4(t *testing.T) {
	var idle atomic.Bool
	var asked atomic.Int32
	check := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		if !idle.Load() {
			w.WriteHeader(http.StatusConflict)
		}
	}))
	defer check.Close()
	e := newL4Env(t, pvesim.GuestSpec{})
	e.start("pre_stop_check " + check.URL + "/idle?vmid={guest.vmid}")
	conn, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(e.listenTC))
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprint(conn, "x\n")
	if _, err := bufio.NewReader(conn).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	waitFor(t, 10*time.Second, "three busy answers", func() bool { return asked.Load() >= 3 })
	if st := e.sim.Status(100); st != "running" || e.sim.ActionCalls(100, "shutdown") != 0 {
		t.Fatalf("guest %s after the check said busy", st)
	}
	idle.Store(true)
	waitFor(t, 10*time.Second, "the stop once the check says idle", func() bool { return e.sim.Status(100) == "stopped" })
}

// A ready guest's connections pass at once, without a wake.
func TestTCPReadyGuestPassesAtOnce(t *testing.T) {
	e := newL4Env(t, pvesim.GuestSpec{Running: true})
	e.start("")
	waitFor(t, 10*time.Second, "the first poll", func() bool { return e.guest() != nil && e.guest().State() != lxc.StateUnknown })
	// The first connection makes it ready (a running guest is probed).
	for i := 0; i < 2; i++ {
		conn, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(e.listenTC))
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(conn, "n%d\n", i)
		if line, err := bufio.NewReader(conn).ReadString('\n'); err != nil || line != fmt.Sprintf("n%d\n", i) {
			t.Fatalf("connection %d: %q %v", i, line, err)
		}
		conn.Close()
	}
	if n := e.sim.ActionCalls(100, "start"); n != 0 {
		t.Fatalf("a running guest was started %d times", n)
	}
}

// A wake that fails closes the held connection; nothing is proxied.
func TestTCPFailedWakeClosesConnection(t *testing.T) {
	e := newL4Env(t, pvesim.GuestSpec{})
	e.sim.FailStarts(100, "start failed: no space left on device")
	e.start("")
	conn, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(e.listenTC))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = conn.Write([]byte("hello\n"))
	n, err := conn.Read(make([]byte, 16))
	if n != 0 || err == nil || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("read %d bytes, %v: want the connection closed", n, err)
	}
}

// The first datagram of a UDP flow wakes the guest; the datagrams sent
// while it starts are held, in order, up to max_datagrams, and answered
// once it runs; the rest are dropped.
func TestUDPFlowWakesAndDeliversHeldDatagrams(t *testing.T) {
	e := newL4Env(t, pvesim.GuestSpec{StartDelay: 400 * time.Millisecond})
	e.start("max_datagrams 3")
	conn, err := net.Dial("udp", "127.0.0.1:"+strconv.Itoa(e.listenUD))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for i := 0; i < 5; i++ {
		fmt.Fprintf(conn, "d%d", i)
	}
	_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
	buf := make([]byte, 64)
	var got []string
	for len(got) < 3 {
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		got = append(got, string(buf[:n]))
	}
	if strings.Join(got, ",") != "d0,d1,d2" {
		t.Fatalf("echoed %v, want the first three datagrams in order", got)
	}
	// The flow is proxied now: a new datagram comes back, and the two
	// dropped ones never do.
	fmt.Fprint(conn, "after")
	n, err := conn.Read(buf)
	if err != nil || string(buf[:n]) != "after" {
		t.Fatalf("after the wake: %q %v", buf[:n], err)
	}
	if in := e.guest().Info(); in.Inflight != 1 {
		t.Fatalf("open flow not counted: inflight %d", in.Inflight)
	}
}

// The udp probe: a game server that takes a while to load its world
// after the guest runs is ready once it answers a query, so the first
// datagram of a flow reaches it and is answered. (With probe none, the
// guest would count as ready on running, and that datagram would meet a
// closed port.)
func TestUDPProbeWaitsForTheService(t *testing.T) {
	e := newL4Env(t, pvesim.GuestSpec{BootDelay: 600 * time.Millisecond})
	testcaddy.Start(t, fmt.Sprintf(`{
	admin off
	storage file_system %s
	proxmox {
		cluster %s {
			url %s
			token_id %s
			token_secret %s
			poll_interval 100ms
		}
	}
	layer4 {
		udp/127.0.0.1:%d {
			route {
				proxmox_wake %s/100 %d {
					probe udp %x
					probe_interval 50ms
					task_poll_interval 20ms
					wake_timeout 10s
				}
				proxy {l4.proxmox.upstream}
			}
		}
	}
}
`, t.TempDir(), e.cluster, e.apiURL, e.sim.TokenID(), e.sim.TokenSecret(), e.listenUD, e.cluster, e.udpPort, "status?"))
	conn, err := net.Dial("udp", "127.0.0.1:"+strconv.Itoa(e.listenUD))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	began := time.Now()
	fmt.Fprint(conn, "first")
	_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
	buf := make([]byte, 64)
	n, err := conn.Read(buf)
	if err != nil || string(buf[:n]) != "first" {
		t.Fatalf("the first datagram: %q %v (guest %s)", buf[:n], err, e.sim.Status(100))
	}
	if took := time.Since(began); took < 600*time.Millisecond {
		t.Fatalf("answered after %v, before the service could listen", took)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		h    Handler
		want string
	}{
		{Handler{Guest: "lab/100"}, "port 0"},
		{Handler{Guest: "lab/100", GuestOptions: wake.GuestOptions{Port: 70000}}, "port 70000"},
		{Handler{Guest: "100", GuestOptions: wake.GuestOptions{Port: 22}}, "must be <cluster>/<vmid>"},
		{Handler{Guest: "lab/{l4.tls.server_name}", GuestOptions: wake.GuestOptions{Port: 22}}, "placeholders are for the HTTP proxmox_wake only"},
		{Handler{Guest: "lab/100", GuestOptions: wake.GuestOptions{Port: 22, StopMethod: "pause"}}, "stop_method"},
		{Handler{Guest: "lab/100", GuestOptions: wake.GuestOptions{Port: 22}, MaxDatagrams: -1}, "must not be negative"},
		{Handler{Guest: "lab/100", GuestOptions: wake.GuestOptions{Port: 22, MaxPending: -1}}, "must not be negative"},
		{Handler{Guest: "lab/100", GuestOptions: wake.GuestOptions{Port: 22, KeepWarm: []string{"25:00-26:00"}}}, "keep_warm"},
		{Handler{Guest: "lab/100", GuestOptions: wake.GuestOptions{Port: 22, TimeZone: "Mars/Olympus"}}, "time_zone"},
		{Handler{Guest: "lab/100", GuestOptions: wake.GuestOptions{Port: 22, Probe: "http"}}, "probe http is for the HTTP proxmox_wake"},
		{Handler{Guest: "lab/100", GuestOptions: wake.GuestOptions{Port: 22, PreStopCheck: "ftp://x/"}}, "pre_stop_check"},
		{Handler{Guest: "lab/100", GuestOptions: wake.GuestOptions{Port: 22, BusyIf: []*wake.BusyIf{{}}}}, "busy_if"},
		{Handler{Guest: "lab/100", GuestOptions: wake.GuestOptions{Port: 22, StreamIdleTimeout: -1}}, "stream_idle_timeout"},
		{Handler{Guest: "lab/100", GuestOptions: wake.GuestOptions{Port: 27015, Probe: "udp"}}, "probe udp needs the datagram"},
		{Handler{Guest: "lab/100", GuestOptions: wake.GuestOptions{Port: 27015, Probe: "udp", ProbeSend: "xyz"}}, "probe_send: want the datagram in hex"},
		{Handler{Guest: "lab/100", GuestOptions: wake.GuestOptions{Port: 27015, Probe: "tcp", ProbeSend: "00"}}, "probe_send is the udp probe's datagram"},
		{Handler{Guest: "lab/web", GuestOptions: wake.GuestOptions{Port: 22, Probe: "none"}}, ""},
		{Handler{Guest: "lab/web", GuestOptions: wake.GuestOptions{Port: 27015, Probe: "udp", ProbeSend: "ff00"}}, ""},
	} {
		err := tc.h.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", tc.h, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.h, err, tc.want)
		}
	}
}
