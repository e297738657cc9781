package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
	"github.com/caddy-proxmox/caddy-proxmox/internal/wsstream"
	"github.com/caddy-proxmox/caddy-proxmox/kube"
)

// Consoles end to end through the built ./caddy: two processes (replicas)
// with one ticket key on the real apiserver; KubeVirt's vnc and console
// subresources are reached with AsyncSubresourceHelper through the front
// proxy's virt-api stand-in.

const consoleTicketKey = "console-it-shared-ticket-key"

// startReplicas runs n ./caddy processes sharing a ticket key and returns
// a token client for each.
func startReplicas(t *testing.T, n int) []*testcaddy.PVE {
	t.Helper()
	var out []*testcaddy.PVE
	for i := 0; i < n; i++ {
		auth := testcaddy.TokenAuth(tokenID, tokenSecret)
		_, base := apiProcess(t, auth, "token "+tokenID+" "+tokenSecret, "ticket_key "+consoleTicketKey)
		out = append(out, &testcaddy.PVE{T: t, Base: base, C: testcaddy.Client(), Auth: auth})
	}
	return out
}

// waitAPI polls until the process answers /nodes (caches synced).
func waitAPI(t *testing.T, a *testcaddy.PVE, p *testcaddy.Process) {
	t.Helper()
	testcaddy.WaitReady(t, a.Base)
	deadline := time.Now().Add(60 * time.Second)
	for {
		req, _ := http.NewRequest("GET", a.Base+"/api2/json/nodes", nil)
		a.Auth(req)
		if res, err := a.C.Do(req); err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return
			}
		}
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("%s did not serve the API; log:\n%s", a.Base, p.Output())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type consoleTicket struct {
	User     string  `json:"user"`
	Ticket   string  `json:"ticket"`
	Port     string  `json:"port"`
	UPID     string  `json:"upid"`
	Cert     *string `json:"cert"`
	Password *string `json:"password"`
}

// wsDial opens vncwebsocket as noVNC and xterm.js do (subprotocol binary,
// PVE credentials on the upgrade request).
func wsDial(a *testcaddy.PVE, node, id, port, ticket string) (*websocket.Conn, *http.Response, error) {
	u := strings.Replace(a.Base, "https://", "wss://", 1) + "/api2/json/nodes/" + node + "/qemu/" + id + "/vncwebsocket?" +
		url.Values{"port": {port}, "vncticket": {ticket}}.Encode()
	d := websocket.Dialer{
		TLSClientConfig:  &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // Caddy's internal CA
		Subprotocols:     []string{"binary"},
		HandshakeTimeout: 20 * time.Second,
	}
	req, _ := http.NewRequest("GET", u, nil)
	a.Auth(req)
	return d.Dial(u, req.Header)
}

// byteConn reads and writes a websocket as a byte stream, as noVNC does.
type byteConn struct {
	t *testing.T
	c *websocket.Conn
	r io.Reader
}

func newByteConn(t *testing.T, c *websocket.Conn) *byteConn {
	return &byteConn{t: t, c: c, r: wsstream.New(c)}
}

func (b *byteConn) send(p []byte) {
	b.t.Helper()
	if err := b.c.WriteMessage(websocket.BinaryMessage, p); err != nil {
		b.t.Fatal(err)
	}
}

func (b *byteConn) read(n int) []byte {
	b.t.Helper()
	_ = b.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	buf := make([]byte, n)
	if _, err := io.ReadFull(b.r, buf); err != nil {
		b.t.Fatalf("reading %d bytes: %v", n, err)
	}
	return buf
}

func wantTicketRefused(t *testing.T, what string, resp *http.Response, err error) {
	t.Helper()
	if err == nil || resp == nil || resp.StatusCode != 401 || resp.Status != "401 Permission denied - invalid vnc ticket" {
		st := ""
		if resp != nil {
			st = resp.Status
		}
		t.Fatalf("%s ticket: err %v, status %q", what, err, st)
	}
}

func taskStatus(t *testing.T, a *testcaddy.PVE, node, upid string) map[string]any {
	t.Helper()
	var st map[string]any
	a.OK("GET", "/nodes/"+node+"/tasks/"+upid+"/status", nil, &st)
	return st
}

// runningVM creates a VM through a and starts it.
func runningVM(t *testing.T, a *testcaddy.PVE, name string, start bool) (node, id string) {
	t.Helper()
	node, id = firstNode(a), nextID(a)
	f := form("vmid", id, "name", name, "memory", "512")
	if start {
		f.Set("start", "1")
	}
	var upid string
	a.OK("POST", "/nodes/"+node+"/qemu", f, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create %s: %s", name, exit)
	}
	t.Cleanup(func() {
		var upid string
		a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/status/stop", nil, &upid)
		a.WaitTask(upid)
		a.OK("DELETE", "/nodes/"+node+"/qemu/"+id, nil, &upid)
		a.WaitTask(upid)
	})
	if start {
		deadline := time.Now().Add(60 * time.Second)
		for a.Status(node, id)["status"] != "running" {
			if time.Now().After(deadline) {
				t.Fatalf("VM %s did not start", id)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return node, id
}

func TestConsoleThroughBinary(t *testing.T) {
	reps := startReplicas(t, 2)
	a, b := reps[0], reps[1]
	node, id := runningVM(t, a, "console-e2e", true)

	t.Run("noVNC", func(t *testing.T) {
		var res consoleTicket
		a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/vncproxy", form("websocket", "1"), &res)
		if p, err := strconv.Atoi(res.Port); err != nil || p < 5900 || p > 5999 || res.User != tokenID ||
			!strings.HasPrefix(res.Ticket, "PVEVNC:") || res.Cert == nil || !strings.Contains(res.UPID, ":vncproxy:"+id+":") {
			t.Fatalf("vncproxy answer %+v", res)
		}
		// Before the client connects the task runs (PVE's worker waits).
		if st := taskStatus(t, b, node, res.UPID); st["status"] != "running" {
			t.Fatalf("task before connecting: %v", st)
		}
		// noVNC connects to the other replica: the Service may route it anywhere.
		conn, resp, err := wsDial(b, node, id, res.Port, res.Ticket)
		if err != nil {
			t.Fatalf("vncwebsocket: %v (%v)", err, resp)
		}
		defer conn.Close()
		if conn.Subprotocol() != "binary" {
			t.Fatalf("subprotocol %q", conn.Subprotocol())
		}
		rfb := newByteConn(t, conn)
		if v := rfb.read(12); string(v) != "RFB 003.008\n" {
			t.Fatalf("ProtocolVersion %q", v)
		}
		rfb.send([]byte("RFB 003.008\n"))
		n := rfb.read(1)[0]
		types := rfb.read(int(n))
		if !bytes.Contains(types, []byte{1}) {
			t.Fatalf("security types %v: None (1) missing", types)
		}
		rfb.send([]byte{1})
		if r := rfb.read(4); !bytes.Equal(r, []byte{0, 0, 0, 0}) {
			t.Fatalf("SecurityResult %v", r)
		}
		rfb.send([]byte{1}) // ClientInit: shared
		init := rfb.read(24)
		w, h := binary.BigEndian.Uint16(init[0:]), binary.BigEndian.Uint16(init[2:])
		bpp := int(init[4]) / 8
		name := rfb.read(int(binary.BigEndian.Uint32(init[20:])))
		if w == 0 || h == 0 || bpp == 0 || len(name) == 0 {
			t.Fatalf("ServerInit %v, name %q", init, name)
		}
		// SetEncodings [Raw], then a full FramebufferUpdateRequest.
		rfb.send([]byte{2, 0, 0, 1, 0, 0, 0, 0})
		req := []byte{3, 0, 0, 0, 0, 0}
		req = binary.BigEndian.AppendUint16(req, w)
		req = binary.BigEndian.AppendUint16(req, h)
		rfb.send(req)
		upd := rfb.read(4)
		if upd[0] != 0 || binary.BigEndian.Uint16(upd[2:]) == 0 {
			t.Fatalf("FramebufferUpdate header %v", upd)
		}
		rect := rfb.read(12)
		rw, rh := binary.BigEndian.Uint16(rect[4:]), binary.BigEndian.Uint16(rect[6:])
		if binary.BigEndian.Uint32(rect[8:]) != 0 || rw == 0 || rh == 0 {
			t.Fatalf("rectangle %v", rect)
		}
		rfb.read(int(rw) * int(rh) * bpp)
		// The task runs during the session, seen from both replicas.
		for _, r := range reps {
			if st := taskStatus(t, r, node, res.UPID); st["status"] != "running" {
				t.Fatalf("task during the session (%s): %v", r.Base, st)
			}
		}
		conn.Close()
		for _, r := range reps {
			if exit := r.WaitTask(res.UPID); exit != "OK" {
				t.Fatalf("task after the session (%s): %s", r.Base, exit)
			}
		}
		// Used on b: refused on a and on b.
		_, resp, err = wsDial(a, node, id, res.Port, res.Ticket)
		wantTicketRefused(t, "reused (other replica)", resp, err)
		_, resp, err = wsDial(b, node, id, res.Port, res.Ticket)
		wantTicketRefused(t, "reused (same replica)", resp, err)
	})

	t.Run("xterm.js", func(t *testing.T) {
		var res consoleTicket
		b.OK("POST", "/nodes/"+node+"/qemu/"+id+"/termproxy", nil, &res)
		if res.User != tokenID || !strings.HasPrefix(res.Ticket, "PVEVNC:") || res.UPID == "" {
			t.Fatalf("termproxy answer %+v", res)
		}
		conn, resp, err := wsDial(a, node, id, res.Port, res.Ticket)
		if err != nil {
			t.Fatalf("vncwebsocket: %v (%v)", err, resp)
		}
		defer conn.Close()
		term := newByteConn(t, conn)
		term.send([]byte(res.User + ":" + res.Ticket + "\n"))
		if ok := term.read(2); string(ok) != "OK" {
			t.Fatalf("login answer %q", ok)
		}
		term.send([]byte("1:120:40:")) // resize
		term.send([]byte("2"))         // ping
		term.send([]byte("0:6:uname\r"))
		if echo := term.read(len("uname\r\n")); string(echo) != "uname\r\n" {
			t.Fatalf("echo %q", echo)
		}
		if st := taskStatus(t, b, node, res.UPID); st["status"] != "running" {
			t.Fatalf("termproxy task during the session: %v", st)
		}
		conn.Close()
		if exit := b.WaitTask(res.UPID); exit != "OK" {
			t.Fatalf("termproxy task after the session: %s", exit)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		var res consoleTicket
		a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/vncproxy", form("websocket", "1"), &res)
		// Tampered signature.
		tampered := res.Ticket[:len(res.Ticket)-3] + "AAA"
		if tampered == res.Ticket {
			tampered = res.Ticket[:len(res.Ticket)-3] + "BBB"
		}
		_, resp, err := wsDial(a, node, id, res.Port, tampered)
		wantTicketRefused(t, "tampered", resp, err)
		// Forged: PVE's shape with a made-up timestamp and signature.
		forged := fmt.Sprintf("PVEVNC:%08X::%s", time.Now().Unix(), strings.Repeat("Zm9yZ2Vk", 43))
		_, resp, err = wsDial(b, node, id, res.Port, forged)
		wantTicketRefused(t, "forged", resp, err)
		// Re-dated: a valid signature with the timestamp a second earlier.
		i := strings.Index(res.Ticket, "::")
		ts, err := strconv.ParseInt(res.Ticket[i-8:i], 16, 64)
		if err != nil {
			t.Fatalf("ticket %q: %v", res.Ticket, err)
		}
		redated := res.Ticket[:i-8] + fmt.Sprintf("%08X", ts-1) + res.Ticket[i:]
		_, resp, err = wsDial(a, node, id, res.Port, redated)
		wantTicketRefused(t, "re-dated", resp, err)
		// Wrong port.
		other := "5900"
		if res.Port == other {
			other = "5901"
		}
		_, resp, err = wsDial(b, node, id, other, res.Ticket)
		wantTicketRefused(t, "wrong-port", resp, err)
		// Another VM's path.
		snode, sid := runningVM(t, a, "console-stopped", false)
		_, resp, err = wsDial(a, snode, sid, res.Port, res.Ticket)
		wantTicketRefused(t, "other VM's", resp, err)
		// None of the refusals used the ticket up.
		conn, resp, err := wsDial(b, node, id, res.Port, res.Ticket)
		if err != nil {
			t.Fatalf("genuine ticket after the refusals: %v (%v)", err, resp)
		}
		conn.Close()
		// A VM that does not run has no console: PVE's text.
		for _, ep := range []string{"vncproxy", "termproxy"} {
			ans := a.Do("POST", "/nodes/"+snode+"/qemu/"+sid+"/"+ep, nil)
			if ans.Code != 500 || ans.Status != "500 VM "+sid+" not running" || ans.Message != "VM "+sid+" not running\n" {
				t.Fatalf("%s on a stopped VM: %s %s", ep, ans.Status, ans.Raw)
			}
		}
	})

	t.Run("without virt-api", func(t *testing.T) {
		// The same cluster through a front proxy without virt-api (the
		// in-process instance of TestMain): the ticket is issued, the
		// connection fails with a message saying why, and the task says so.
		f := fallbackPVE(t)
		var res consoleTicket
		f.OK("POST", "/nodes/"+node+"/qemu/"+id+"/vncproxy", form("websocket", "1"), &res)
		_, resp, err := wsDial(f, node, id, res.Port, res.Ticket)
		if err == nil || resp == nil || resp.StatusCode != 502 || !strings.Contains(resp.Status, "virt-api answered 404") {
			t.Fatalf("console without virt-api: %v %v", err, resp)
		}
		if exit := f.WaitTask(res.UPID); !strings.Contains(exit, "virt-api answered 404") {
			t.Fatalf("task: %s", exit)
		}
	})

	t.Run("one ticket, two replicas", func(t *testing.T) {
		var res consoleTicket
		b.OK("POST", "/nodes/"+node+"/qemu/"+id+"/termproxy", nil, &res)
		conn, resp, err := wsDial(a, node, id, res.Port, res.Ticket)
		if err != nil {
			t.Fatalf("first use: %v (%v)", err, resp)
		}
		defer conn.Close()
		_, resp, err = wsDial(b, node, id, res.Port, res.Ticket)
		wantTicketRefused(t, "second use on the other replica", resp, err)
	})
}

// The claims behind single-use tickets, on the real apiserver: creating the
// record is the claim, a second create is AlreadyExists, and only expired
// records are swept.
func TestConsoleClaimsRealAPIServer(t *testing.T) {
	ctx := context.Background()
	ns := "default"
	a := kube.NewConsoleClaims(env.Kube, ns, nil)
	b := kube.NewConsoleClaims(env.Kube, ns, nil)
	ticket := fmt.Sprintf("PVEVNC:%08X::claims-it-%d", time.Now().Unix(), os.Getpid())
	if first, err := a.Claim(ctx, ticket, time.Now().Add(time.Hour)); err != nil || !first {
		t.Fatalf("first claim: %v %v", first, err)
	}
	if first, err := b.Claim(ctx, ticket, time.Now().Add(time.Hour)); err != nil || first {
		t.Fatalf("second claim: %v %v", first, err)
	}
	expired := ticket + "-expired"
	if first, err := b.Claim(ctx, expired, time.Now().Add(-time.Second)); err != nil || !first {
		t.Fatalf("claim of an expired ticket: %v %v", first, err)
	}
	if _, err := a.Collect(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Kube.CoreV1().ConfigMaps(ns).Get(ctx, "pve-console-claim-"+kube.TicketKey(expired), metav1.GetOptions{}); err == nil {
		t.Fatal("expired claim survived the sweep")
	}
	if _, err := env.Kube.CoreV1().ConfigMaps(ns).Get(ctx, "pve-console-claim-"+kube.TicketKey(ticket), metav1.GetOptions{}); err != nil {
		t.Fatalf("live claim swept: %v", err)
	}
	if first, err := a.Claim(ctx, ticket, time.Now().Add(time.Hour)); err != nil || first {
		t.Fatalf("claim after the sweep: %v %v", first, err)
	}
}
