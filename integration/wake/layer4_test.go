package wake

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
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
	httpPort, l4TCP, l4UDP := testcaddy.FreePort(t), testcaddy.FreePort(t), testcaddy.FreePort(t)
	cfg := fmt.Sprintf(`{
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
		}
	}
}
http://127.0.0.1:%d {
	bind 127.0.0.1
	respond /ready "up"
}
`, e.dir, e.cluster, e.apiURL, e.sim.TokenID(), e.sim.TokenSecret(),
		l4TCP, e.cluster, tcpPort, l4UDP, e.cluster, udpPort, httpPort)
	p := testcaddy.StartProcess(t, t.TempDir(), cfg)
	testcaddy.WaitReady(t, fmt.Sprintf("http://127.0.0.1:%d/ready", httpPort))
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\n./caddy:\n%s", append(args, p.Output())...)
	}

	// A client of the stopped guest connects and sends at once: it is
	// held until the guest runs, then answered by the guest.
	conn, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(l4TCP))
	if err != nil {
		t.Fatal(err)
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
		t.Fatal(err)
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
