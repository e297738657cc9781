package api_test

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/internal/wsstream"

	"github.com/gorilla/websocket"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
)

// consoleVM creates a VM, started or not, and returns its node and vmid.
func consoleVM(t *testing.T, a *testcaddy.PVE, name string, start bool) (string, string) {
	t.Helper()
	var nodes []map[string]any
	a.OK("GET", "/nodes", nil, &nodes)
	node := nodes[0]["node"].(string)
	var id string
	a.OK("GET", "/cluster/nextid", nil, &id)
	form := url.Values{"vmid": {id}, "name": {name}, "memory": {"512"}}
	if start {
		form.Set("start", "1")
	}
	var upid string
	a.OK("POST", "/nodes/"+node+"/qemu", form, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create: %s", exit)
	}
	if start {
		deadline := time.Now().Add(30 * time.Second)
		for a.Status(node, id)["status"] != "running" {
			if time.Now().After(deadline) {
				t.Fatal("VM did not start")
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Cleanup(func() {
		a.Do("POST", "/nodes/"+node+"/qemu/"+id+"/status/stop", nil)
	})
	return node, id
}

type consoleAnswer struct {
	User     string  `json:"user"`
	Ticket   string  `json:"ticket"`
	Port     string  `json:"port"`
	UPID     string  `json:"upid"`
	Cert     *string `json:"cert"`
	Password *string `json:"password"`
}

// dialConsole opens vncwebsocket like noVNC and xterm.js do.
func dialConsole(t *testing.T, a *testcaddy.PVE, node, id, port, ticket string) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	u := strings.Replace(a.Base, "https://", "wss://", 1) + "/api2/json/nodes/" + node + "/qemu/" + id + "/vncwebsocket?" +
		url.Values{"port": {port}, "vncticket": {ticket}}.Encode()
	d := websocket.Dialer{
		TLSClientConfig:  &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // test CA
		Subprotocols:     []string{"binary"},
		HandshakeTimeout: 10 * time.Second,
	}
	hdr := http.Header{}
	req, _ := http.NewRequest("GET", u, nil)
	a.Auth(req)
	for k, v := range req.Header {
		hdr[k] = v
	}
	return d.Dial(u, hdr)
}

// wsBytes reads a websocket as a byte stream.
type wsBytes struct {
	*wsstream.Conn
	c *websocket.Conn
}

func newWSBytes(c *websocket.Conn) *wsBytes { return &wsBytes{Conn: wsstream.New(c), c: c} }

func (b *wsBytes) send(t *testing.T, p []byte) {
	t.Helper()
	if err := b.c.WriteMessage(websocket.BinaryMessage, p); err != nil {
		t.Fatal(err)
	}
}

func (b *wsBytes) read(t *testing.T, n int) []byte {
	t.Helper()
	_ = b.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, n)
	if _, err := io.ReadFull(b, buf); err != nil {
		t.Fatalf("reading %d bytes: %v", n, err)
	}
	return buf
}

func TestConsoleVNC(t *testing.T) {
	a := shared(t)
	node, id := consoleVM(t, a, "vnc-test", true)

	var res consoleAnswer
	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/vncproxy", url.Values{"websocket": {"1"}}, &res)
	port, err := strconv.Atoi(res.Port)
	if err != nil || port < 5900 || port > 5999 {
		t.Fatalf("port %q", res.Port)
	}
	if res.User != testToken || !strings.HasPrefix(res.Ticket, "PVEVNC:") || res.Cert == nil || res.Password != nil {
		t.Fatalf("vncproxy answer %+v", res)
	}
	if !strings.Contains(res.UPID, ":vncproxy:"+id+":"+testToken+":") {
		t.Fatalf("upid %q", res.UPID)
	}
	// The task runs while PVE's worker would wait for the client.
	wantTaskRunning(t, a, node, res.UPID)

	conn, resp, err := dialConsole(t, a, node, id, res.Port, res.Ticket)
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, resp)
	}
	defer conn.Close()
	if conn.Subprotocol() != "binary" {
		t.Fatalf("subprotocol %q", conn.Subprotocol())
	}
	b := newWSBytes(conn)
	if v := b.read(t, 12); string(v) != "RFB 003.008\n" {
		t.Fatalf("version %q", v)
	}
	b.send(t, []byte("RFB 003.008\n"))
	if sec := b.read(t, 2); !bytes.Equal(sec, []byte{1, 1}) {
		t.Fatalf("security types %v", sec)
	}
	b.send(t, []byte{1})
	if r := b.read(t, 4); !bytes.Equal(r, []byte{0, 0, 0, 0}) {
		t.Fatalf("security result %v", r)
	}
	b.send(t, []byte{1}) // ClientInit, shared
	init := b.read(t, 24)
	w, h := binary.BigEndian.Uint16(init[0:]), binary.BigEndian.Uint16(init[2:])
	bpp := int(init[4]) / 8
	name := b.read(t, int(binary.BigEndian.Uint32(init[20:])))
	if w == 0 || h == 0 || bpp != 4 || len(name) == 0 {
		t.Fatalf("ServerInit %v name %q", init, name)
	}
	// SetEncodings [Raw], then a full update request split over two frames,
	// as a byte stream may be.
	b.send(t, []byte{2, 0, 0, 1, 0, 0, 0, 0})
	req := []byte{3, 0, 0, 0, 0, 0}
	req = binary.BigEndian.AppendUint16(req, w)
	req = binary.BigEndian.AppendUint16(req, h)
	b.send(t, req[:4])
	b.send(t, req[4:])
	hdr := b.read(t, 4)
	if hdr[0] != 0 || binary.BigEndian.Uint16(hdr[2:]) != 1 {
		t.Fatalf("FramebufferUpdate header %v", hdr)
	}
	rect := b.read(t, 12)
	rw, rh := binary.BigEndian.Uint16(rect[4:]), binary.BigEndian.Uint16(rect[6:])
	if rw != w || rh != h || binary.BigEndian.Uint32(rect[8:]) != 0 {
		t.Fatalf("rectangle %v", rect)
	}
	b.read(t, int(rw)*int(rh)*bpp)
	// ... and while the session is open; it ends OK with the session.
	wantTaskRunning(t, a, node, res.UPID)
	conn.Close()
	if exit := a.WaitTask(res.UPID); exit != "OK" {
		t.Fatalf("task after the session: %s", exit)
	}

	// Single use: the same ticket is refused now.
	_, resp, err = dialConsole(t, a, node, id, res.Port, res.Ticket)
	wantRefused(t, "reused", resp, err)

	// generate-password: the password is prefixed to the ticket, which
	// still opens the display.
	var pw consoleAnswer
	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/vncproxy", url.Values{"websocket": {"1"}, "generate-password": {"1"}}, &pw)
	if pw.Password == nil || len(*pw.Password) != 8 || !strings.HasPrefix(pw.Ticket, *pw.Password+":PVEVNC:") {
		t.Fatalf("generate-password answer %+v", pw)
	}
	conn, resp, err = dialConsole(t, a, node, id, pw.Port, pw.Ticket)
	if err != nil {
		t.Fatalf("dial with password ticket: %v (%v)", err, resp)
	}
	if v := (newWSBytes(conn)).read(t, 12); string(v) != "RFB 003.008\n" {
		t.Fatalf("version %q", v)
	}
	conn.Close()
}

// wantTaskRunning checks that a console task is running now.
func wantTaskRunning(t *testing.T, a *testcaddy.PVE, node, upid string) {
	t.Helper()
	var st map[string]any
	a.OK("GET", "/nodes/"+node+"/tasks/"+upid+"/status", nil, &st)
	if st["status"] != "running" {
		t.Fatalf("console task %s: %v, want running", upid, st)
	}
}

func wantRefused(t *testing.T, what string, resp *http.Response, err error) {
	t.Helper()
	if err == nil || resp == nil || resp.StatusCode != 401 || !strings.Contains(resp.Status, "invalid vnc ticket") {
		status := ""
		if resp != nil {
			status = resp.Status
		}
		t.Fatalf("%s ticket: err %v, status %q", what, err, status)
	}
}

func TestConsoleTicketRefusals(t *testing.T) {
	a := shared(t)
	node, id := consoleVM(t, a, "vnc-refusals", true)
	var res consoleAnswer
	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/vncproxy", url.Values{"websocket": {"1"}}, &res)

	// Forged signature.
	forged := res.Ticket[:len(res.Ticket)-2] + "A="
	if forged == res.Ticket {
		forged = res.Ticket[:len(res.Ticket)-2] + "B="
	}
	_, resp, err := dialConsole(t, a, node, id, res.Port, forged)
	wantRefused(t, "forged", resp, err)
	// Wrong port.
	other := "5900"
	if res.Port == "5900" {
		other = "5901"
	}
	_, resp, err = dialConsole(t, a, node, id, other, res.Ticket)
	wantRefused(t, "wrong-port", resp, err)
	// Another user's ticket.
	alice := *a
	alice.Auth = nil
	var login map[string]any
	alice.OK("POST", "/access/ticket", url.Values{"username": {"alice@pve"}, "password": {"s3cret"}}, &login)
	alice.Auth = func(r *http.Request) {
		r.AddCookie(&http.Cookie{Name: "PVEAuthCookie", Value: login["ticket"].(string)})
		r.Header.Set("CSRFPreventionToken", login["CSRFPreventionToken"].(string))
	}
	var ares consoleAnswer
	alice.OK("POST", "/nodes/"+node+"/qemu/"+id+"/vncproxy", url.Values{"websocket": {"1"}}, &ares)
	if ares.User != "alice@pve" {
		t.Fatalf("alice's user %q", ares.User)
	}
	_, resp, err = dialConsole(t, a, node, id, ares.Port, ares.Ticket)
	wantRefused(t, "other user's", resp, err)
	// Cookie-authenticated owner may use it.
	conn, resp, err := dialConsole(t, &alice, node, id, ares.Port, ares.Ticket)
	if err != nil {
		t.Fatalf("alice dial: %v (%v)", err, resp)
	}
	conn.Close()
	// No credentials at all: the API's own 401.
	anon := *a
	anon.Auth = func(*http.Request) {}
	_, resp, err = dialConsole(t, &anon, node, id, res.Port, res.Ticket)
	if err == nil || resp == nil || resp.StatusCode != 401 {
		t.Fatalf("anonymous dial: %v %v", err, resp)
	}

	// A stopped VM has no console.
	snode, sid := consoleVM(t, a, "vnc-stopped", false)
	ans := a.Do("POST", "/nodes/"+snode+"/qemu/"+sid+"/vncproxy", url.Values{"websocket": {"1"}})
	if ans.Code != 500 || ans.Message != "VM "+sid+" not running\n" {
		t.Fatalf("vncproxy on a stopped VM: %s %s", ans.Status, ans.Raw)
	}
	ans = a.Do("POST", "/nodes/"+snode+"/qemu/"+sid+"/termproxy", nil)
	if ans.Code != 500 || ans.Message != "VM "+sid+" not running\n" {
		t.Fatalf("termproxy on a stopped VM: %s %s", ans.Status, ans.Raw)
	}
}

// An expired ticket (PVE: 40 s) is refused; this test waits it out.
func TestConsoleTicketExpires(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 41 s")
	}
	t.Parallel()
	a := shared(t)
	node, id := consoleVM(t, a, "vnc-expiry", true)
	var res consoleAnswer
	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/vncproxy", url.Values{"websocket": {"1"}}, &res)
	time.Sleep(42 * time.Second)
	_, resp, err := dialConsole(t, a, node, id, res.Port, res.Ticket)
	wantRefused(t, "expired", resp, err)
}

func TestConsoleTerm(t *testing.T) {
	a := shared(t)
	node, id := consoleVM(t, a, "term-test", true)
	var res consoleAnswer
	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/termproxy", nil, &res)
	if res.User != testToken || !strings.HasPrefix(res.Ticket, "PVEVNC:") || res.UPID == "" || res.Cert != nil || res.Password != nil {
		t.Fatalf("termproxy answer %+v", res)
	}
	if port, err := strconv.Atoi(res.Port); err != nil || port < 5900 || port > 5999 {
		t.Fatalf("port %q", res.Port)
	}
	conn, resp, err := dialConsole(t, a, node, id, res.Port, res.Ticket)
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, resp)
	}
	defer conn.Close()
	if conn.Subprotocol() != "binary" {
		t.Fatalf("subprotocol %q", conn.Subprotocol())
	}
	b := newWSBytes(conn)
	b.send(t, []byte(res.User+":"+res.Ticket+"\n"))
	if ok := b.read(t, 2); string(ok) != "OK" {
		t.Fatalf("login answer %q", ok)
	}
	b.send(t, []byte("1:80:24:"))
	b.send(t, []byte("2"))
	b.send(t, []byte("0:5:hel"))
	b.send(t, []byte("lo0:1:\r2"))
	if echo := b.read(t, len("hello\r\n")); string(echo) != "hello\r\n" {
		t.Fatalf("echo %q", echo)
	}
	b.send(t, []byte("0:3:äb"))
	if echo := b.read(t, 3); string(echo) != "äb" {
		t.Fatalf("echo %q", echo)
	}
	wantTaskRunning(t, a, node, res.UPID)
	conn.Close()
	if exit := a.WaitTask(res.UPID); exit != "OK" {
		t.Fatalf("termproxy task after the session: %s", exit)
	}

	// A termproxy ticket is single-use too, and a bad login line ends the
	// session without "OK".
	var again consoleAnswer
	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/termproxy", nil, &again)
	conn, resp, err = dialConsole(t, a, node, id, again.Port, again.Ticket)
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, resp)
	}
	b = newWSBytes(conn)
	b.send(t, []byte("someone@pve:"+again.Ticket+"\n"))
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, _, err := conn.ReadMessage(); err == nil {
		t.Fatal("wrong login user got an answer")
	}
	conn.Close()
	if exit := a.WaitTask(again.UPID); !strings.Contains(exit, "authentication failed") {
		t.Fatalf("task of a bad login: %s", exit)
	}
	_, resp, err = dialConsole(t, a, node, id, again.Port, again.Ticket)
	wantRefused(t, "reused termproxy", resp, err)
}

// Like PVE's worker, which stops listening after 10 s, a console task no
// client connects to ends with "connection timed out", and a later
// connection (with a still valid ticket) is refused.
func TestConsoleConnectTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 10 s")
	}
	a := shared(t)
	node, id := consoleVM(t, a, "term-timeout", true)
	var res consoleAnswer
	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/termproxy", nil, &res)
	if exit := a.WaitTask(res.UPID); exit != "connection timed out" {
		t.Fatalf("task without a client: %s", exit)
	}
	_, resp, err := dialConsole(t, a, node, id, res.Port, res.Ticket)
	if err == nil || resp == nil || resp.StatusCode != 500 || !strings.Contains(resp.Status, "connection timed out") {
		t.Fatalf("late connection: %v %v", err, resp)
	}
}
