package wake

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
	"github.com/caddy-proxmox/caddy-proxmox/pvesim"
)

// A websocket over HTTP/2 (RFC 8441: an extended CONNECT with :protocol
// websocket, here over h2c) through ./caddy is a stream like an HTTP/1.1
// upgrade: in mode page it is held while the guest wakes, not shown the
// loading page; it counts as a stream in flight; with
// stream_idle_timeout it keeps the guest up while it carries bytes and
// stops counting once silent. Go's HTTP/2 server offers extended CONNECT
// only with GODEBUG=http2xconnect=1, which the README tells users to set.
func TestHTTP2WebsocketIsAStream(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100, StartDelay: 200 * time.Millisecond})
	e.adminPort = testcaddy.FreePort(t)
	cfg := strings.Replace(e.globals(""), "protocols h1\n", "protocols h1 h2c\n", 1) +
		e.wakeSite("100", "mode page\n\t\tstream_idle_timeout 500ms")
	t.Setenv("GODEBUG", "http2xconnect=1")
	p := testcaddy.StartProcess(t, t.TempDir(), cfg)
	p.WaitReady(fmt.Sprintf("http://127.0.0.1:%d/config/", e.adminPort))

	// net/http's client refuses the :protocol pseudo-header; x/net's
	// HTTP/2 transport sends it, over h2c here.
	h2c := &http2.Transport{AllowHTTP: true, DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
		return new(net.Dialer).DialContext(ctx, network, addr)
	}}
	defer h2c.CloseIdleConnections()
	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequest(http.MethodConnect, e.base+"/chat", pr)
	req.Header.Set(":protocol", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	res, err := (&http.Client{Transport: h2c, Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("extended CONNECT: %v\n./caddy:\n%s", err, p.Output())
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK || res.ProtoMajor != 2 || res.Header.Get("X-Proxmox-Wake") != "cold" {
		b, _ := io.ReadAll(io.LimitReader(res.Body, 512))
		t.Fatalf("websocket to the sleeping guest: %s %s, X-Proxmox-Wake %q: %.200s", res.Proto, res.Status, res.Header.Get("X-Proxmox-Wake"), b)
	}
	br := bufio.NewReader(res.Body)
	ping := func(msg string) {
		t.Helper()
		if _, err := pw.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		if line, err := br.ReadString('\n'); err != nil || line != msg {
			t.Fatalf("echo %q: %q %v (guest %s)", msg, line, err, e.sim.Status(100))
		}
	}
	ping("hello\n")
	if in := e.info("100"); in.Inflight != 1 || in.Streams != 1 {
		t.Fatalf("the HTTP/2 websocket in flight: inflight %d, streams %d", in.Inflight, in.Streams)
	}
	// 16 round trips over 1.6s: three stream_idle_timeouts, five
	// idle_timeouts.
	var last time.Time
	for i := 0; i < 16; i++ {
		time.Sleep(100 * time.Millisecond)
		ping(fmt.Sprintf("ping %d\n", i))
		last = time.Now()
	}
	if n := e.sim.ActionCalls(100, "shutdown"); n != 0 {
		t.Fatalf("guest stopped (%d) while the websocket carried traffic", n)
	}
	waitFor(t, 5*time.Second, "the stop with the silent websocket open", func() bool { return e.sim.Status(100) == "stopped" })
	if took := time.Since(last); took < 500*time.Millisecond {
		t.Fatalf("stopped %s after the last byte", took)
	}
}
