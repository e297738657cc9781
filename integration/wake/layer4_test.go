package wake

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
	"github.com/caddy-proxmox/caddy-proxmox/pvesim"
)

// TCP and UDP wake through ./caddy as xcaddy.sh builds it (with
// caddy-l4): the layer4 app's proxmox_wake holds connections to a stopped
// guest's echo services and hands them to caddy-l4's proxy.
func TestLayer4WakeThroughCaddy(t *testing.T) {
	tcpPort, udpPort := testcaddy.FreePort(t), testcaddy.FreePort(t)
	e := newEnv(t, pvesim.GuestSpec{VMID: 100, StartDelay: 300 * time.Millisecond, EchoTCP: []int{tcpPort}, EchoUDP: []int{udpPort}})
	l4TCP, l4UDP := testcaddy.FreePort(t), testcaddy.FreePort(t)
	fail := e.layer4Caddy(fmt.Sprintf(`tcp/127.0.0.1:%d {
			route {
				proxmox_wake %s/100 %d {
					idle_timeout 1s
					wake_timeout 10s
					task_poll_interval 20ms
					probe_interval 20ms
				}
				proxy {l4.proxmox.upstream}
			}
		}
		udp/127.0.0.1:%d {
			route {
				proxmox_wake %s/100 %d {
					idle_timeout 1s
					wake_timeout 10s
					task_poll_interval 20ms
					probe none
				}
				proxy {l4.proxmox.upstream}
			}
		}`, l4TCP, e.cluster, tcpPort, l4UDP, e.cluster, udpPort))

	// A client of the stopped guest connects and sends at once: it is
	// held until the guest runs, then answered by the guest.
	conn, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(l4TCP))
	if err != nil {
		fail("dialing the layer4 TCP server: %v", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(conn)
	began := time.Now()
	fmt.Fprint(conn, "SSH-2.0-client\n")
	if line, err := r.ReadString('\n'); err != nil || line != "SSH-2.0-client\n" {
		fail("echo through the held connection: %q %v", line, err)
	}
	if took := time.Since(began); took < 300*time.Millisecond || e.sim.ActionCalls(100, "start") != 1 {
		fail("answered after %v with %d starts: want one start of 300ms first", took, e.sim.ActionCalls(100, "start"))
	}

	// The open connection is activity however quiet it is: 20 polls
	// (2s, twice idle_timeout) go by without a stop.
	polls := e.sim.Calls("GET /cluster/resources")
	waitFor(t, 20*time.Second, "20 polls", func() bool { return e.sim.Calls("GET /cluster/resources") >= polls+20 })
	if st := e.sim.Status(100); st != "running" || e.sim.ActionCalls(100, "shutdown") != 0 {
		fail("guest %s, %d shutdowns, under an open connection", st, e.sim.ActionCalls(100, "shutdown"))
	}
	fmt.Fprint(conn, "still here\n")
	if line, err := r.ReadString('\n'); err != nil || line != "still here\n" {
		fail("after the quiet spell: %q %v", line, err)
	}

	// Closed, the guest idles out.
	closed := time.Now()
	conn.Close()
	waitFor(t, 20*time.Second, "the idle stop", func() bool { return e.sim.Status(100) == "stopped" })
	if took := time.Since(closed); took < time.Second {
		fail("stopped %v after the connection closed, before idle_timeout (1s)", took)
	}

	// A UDP flow's first datagram wakes it again; the datagram is held
	// and answered once the guest runs.
	u, err := net.Dial("udp", "127.0.0.1:"+strconv.Itoa(l4UDP))
	if err != nil {
		fail("dialing the layer4 UDP server: %v", err)
	}
	defer u.Close()
	_ = u.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprint(u, "ping")
	buf := make([]byte, 64)
	if n, err := u.Read(buf); err != nil || string(buf[:n]) != "ping" {
		fail("UDP echo after the wake: %q %v", buf[:n], err)
	}
	if n := e.sim.ActionCalls(100, "start"); n != 2 {
		fail("%d starts after the UDP wake, want 2", n)
	}
}

// layer4Caddy runs ./caddy with the proxmox app on e's cluster and the
// given servers in its layer4 global option, and waits until it serves.
// fail is t.Fatalf with ./caddy's log appended.
func (e *env) layer4Caddy(servers string) (fail func(format string, args ...any)) {
	e.t.Helper()
	httpPort := testcaddy.FreePort(e.t)
	p := testcaddy.StartProcess(e.t, e.t.TempDir(), e.globals("layer4 {\n\t\t"+servers+"\n\t}")+fmt.Sprintf(`
http://127.0.0.1:%d {
	bind 127.0.0.1
	respond /ready "up"
}
`, httpPort))
	p.WaitReady(fmt.Sprintf("http://127.0.0.1:%d/ready", httpPort))
	return func(format string, args ...any) {
		e.t.Helper()
		e.t.Fatalf(format+"\n./caddy:\n%s", append(args, p.Output())...)
	}
}

// a2sInfo is a Source engine server's status query (A2S_INFO), what a
// game server browser sends to see whether a server is up.
const a2sInfo = "\xff\xff\xff\xffTSource Engine Query\x00"

// probe udp through ./caddy: the first datagram of a flow to a stopped
// game server is held until the server answers the status query the
// Caddyfile gives in hex, then delivered. The guest runs before the
// server listens (it boots), and the server listens before it answers
// (it loads its map), so neither "running" nor an open port means ready.
func TestLayer4UDPProbeThroughCaddy(t *testing.T) {
	ip, gamePort := nextIP(), testcaddy.FreePort(t)
	e := newEnv(t, pvesim.GuestSpec{VMID: 100, IP: ip, StartDelay: 100 * time.Millisecond, BootDelay: 500 * time.Millisecond})
	game := runGameServer(t, e.sim, 100, net.JoinHostPort(ip, strconv.Itoa(gamePort)))
	l4UDP := testcaddy.FreePort(t)
	fail := e.layer4Caddy(fmt.Sprintf(`udp/127.0.0.1:%d {
			route {
				proxmox_wake %s/100 %d {
					probe udp %x
					probe_interval 50ms
					task_poll_interval 20ms
					wake_timeout 15s
				}
				proxy {l4.proxmox.upstream}
			}
		}`, l4UDP, e.cluster, gamePort, a2sInfo))

	// A player joins: one datagram, sent once, into the stopped guest.
	u, err := net.Dial("udp", "127.0.0.1:"+strconv.Itoa(l4UDP))
	if err != nil {
		fail("dialing the layer4 UDP server: %v", err)
	}
	defer u.Close()
	_ = u.SetReadDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprint(u, "join")
	buf := make([]byte, 64)
	n, err := u.Read(buf)
	if err != nil || string(buf[:n]) != "join" {
		fail("the held datagram: %q %v; the game server received %q", buf[:n], err, game.received())
	}
	// The probe's query reached the server as the Caddyfile wrote it,
	// unanswered while it loaded, and the player's datagram came after
	// the first answer.
	got := game.received()
	if len(got) < 3 || got[0] != "query (loading)" || got[len(got)-2] != "query" || got[len(got)-1] != "join" {
		fail("the game server received %q: want the query while loading, the query answered, then join", got)
	}
	if n := e.sim.ActionCalls(100, "start"); n != 1 {
		fail("%d starts", n)
	}
}

// gameServer is a UDP game server inside a guest of pvesim. It listens
// while the guest serves (from the end of its BootDelay until it stops),
// drops everything while it loads, which takes until it has seen one
// status query, then answers status queries and echoes game datagrams.
type gameServer struct {
	mu  sync.Mutex
	got []string
}

func (s *gameServer) record(what string) {
	s.mu.Lock()
	s.got = append(s.got, what)
	s.mu.Unlock()
}

// received is what the server received, in order: "query" for an
// answered status query, "query (loading)" for one it dropped, and game
// datagrams as they are.
func (s *gameServer) received() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.got...)
}

// runGameServer follows vmid's service in sim: listening on addr while
// it serves, closed while it does not, until the test ends.
func runGameServer(t *testing.T, sim *pvesim.Sim, vmid int, addr string) *gameServer {
	s := &gameServer{}
	done := make(chan struct{})
	stopped := make(chan struct{})
	t.Cleanup(func() { close(done); <-stopped })
	go func() {
		defer close(stopped)
		var pc net.PacketConn
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				if pc != nil {
					pc.Close()
				}
				return
			case <-tick.C:
			}
			switch serving := sim.Serving(vmid); {
			case serving && pc == nil:
				var err error
				if pc, err = net.ListenPacket("udp", addr); err != nil {
					t.Errorf("game server: %v", err)
					return
				}
				go s.serve(pc)
			case !serving && pc != nil:
				pc.Close()
				pc = nil
			}
		}
	}()
	return s
}

func (s *gameServer) serve(pc net.PacketConn) {
	loading := true
	buf := make([]byte, 2048)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		d := string(buf[:n])
		switch {
		case d == a2sInfo && loading:
			s.record("query (loading)")
			loading = false
		case d == a2sInfo:
			s.record("query")
			_, _ = pc.WriteTo([]byte("\xff\xff\xff\xffI\x11pvesim game\x00"), from)
		case loading:
			s.record(d + " (loading)")
		default:
			s.record(d)
			_, _ = pc.WriteTo(buf[:n], from)
		}
	}
}

// Activity the proxy cannot see, for layer4 through ./caddy. A TCP
// connection left open and silent (a forgotten SSH session) stops
// counting after stream_idle_timeout; busy_if keeps the guest up while
// it works (its CPU, from the cluster poll) all the same; once the work
// ends, pre_stop_check has the last word, and the stop closes the
// connection still open.
func TestLayer4ActivityThroughCaddy(t *testing.T) {
	ip, sshPort := nextIP(), testcaddy.FreePort(t)
	e := newEnvWith(t, pvesim.Options{StatInterval: 150 * time.Millisecond},
		pvesim.GuestSpec{VMID: 100, IP: ip, EchoTCP: []int{sshPort}})
	e.adminPort = testcaddy.FreePort(t)
	check := runPreStopCheck(t, ip)
	l4TCP := testcaddy.FreePort(t)
	fail := e.layer4Caddy(fmt.Sprintf(`tcp/127.0.0.1:%d {
			route {
				proxmox_wake %s/100 %d {
					idle_timeout 1s
					stream_idle_timeout 500ms
					busy_if cpu > 10%% for 600ms
					pre_stop_check http://{guest.address}:%d/idle 1s
					wake_timeout 10s
					task_poll_interval 20ms
					probe_interval 20ms
				}
				proxy {l4.proxmox.upstream}
			}
		}`, l4TCP, e.cluster, sshPort, check.port))

	// A transcode runs in the guest from its start; an SSH client wakes
	// it, says hello and goes quiet.
	e.sim.SetLoad(100, pvesim.Load{CPU: 0.6})
	conn, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(l4TCP))
	if err != nil {
		fail("dialing the layer4 TCP server: %v", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
	r := bufio.NewReader(conn)
	fmt.Fprint(conn, "SSH-2.0-client\n")
	if line, err := r.ReadString('\n'); err != nil || line != "SSH-2.0-client\n" {
		fail("echo through the held connection: %q %v", line, err)
	}
	lastByte := time.Now()

	// busy_if counts the guest active past the moment the quiet
	// connection alone would have let it sleep (stream_idle_timeout, then
	// idle_timeout): it is up, and pre_stop_check was never asked.
	var in guestInfo
	waitFor(t, 15*time.Second, "busy_if to keep the guest active past idle_timeout after the last byte", func() bool {
		in = e.info("100")
		return strings.HasPrefix(in.Busy, "cpu ") && in.LastActivity != nil && in.LastActivity.After(lastByte.Add(1500*time.Millisecond))
	})
	if in.Inflight != 1 || in.Streams != 1 {
		fail("the open connection is not counted: %+v", in)
	}
	if st := e.sim.Status(100); st != "running" || e.sim.ActionCalls(100, "shutdown") != 0 || check.asked() != 0 {
		fail("guest %s, %d shutdowns, %d pre-stop checks while busy", st, e.sim.ActionCalls(100, "shutdown"), check.asked())
	}

	// The transcode ends: idle_timeout later the guest is idle, its
	// connection still open but silent, and pre_stop_check is asked.
	workEnded := time.Now()
	e.sim.SetLoad(100, pvesim.Load{})
	waitFor(t, 15*time.Second, "the first pre-stop check", func() bool { return check.asked() >= 1 })
	if took := check.firstAsked().Sub(workEnded); took < time.Second {
		fail("pre_stop_check asked %v after the work ended, before idle_timeout", took)
	}
	// It says busy (players on another port): asked again, no stop.
	waitFor(t, 15*time.Second, "two more pre-stop checks", func() bool { return check.asked() >= 3 })
	if st := e.sim.Status(100); st != "running" || e.sim.ActionCalls(100, "shutdown") != 0 {
		fail("guest %s, %d shutdowns although pre_stop_check said busy", st, e.sim.ActionCalls(100, "shutdown"))
	}
	if in := e.info("100"); in.Busy != "pre_stop_check: HTTP 409" {
		fail("admin API busy %q, want the check's answer", in.Busy)
	}

	// It says idle: the guest stops, closing the connection.
	check.status.Store(http.StatusNoContent)
	waitFor(t, 15*time.Second, "the idle stop", func() bool { return e.sim.Status(100) == "stopped" })
	if n := e.sim.ActionCalls(100, "shutdown"); n != 1 {
		fail("%d shutdowns", n)
	}
	if line, err := r.ReadString('\n'); err != io.EOF {
		fail("the connection after the stop: %q %v, want EOF", line, err)
	}
}

// preStopCheck is a guest's pre_stop_check endpoint: it answers status
// (409 until changed) and records when it was asked.
type preStopCheck struct {
	port   int
	status atomic.Int32
	mu     sync.Mutex
	times  []time.Time
}

func (c *preStopCheck) asked() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.times)
}

func (c *preStopCheck) firstAsked() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.times[0]
}

// runPreStopCheck serves a pre_stop_check endpoint on the guest's
// address ip until the test ends.
func runPreStopCheck(t *testing.T, ip string) *preStopCheck {
	c := &preStopCheck{}
	c.status.Store(http.StatusConflict)
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.times = append(c.times, time.Now())
		c.mu.Unlock()
		w.WriteHeader(int(c.status.Load()))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	c.port = ln.Addr().(*net.TCPAddr).Port
	return c
}
