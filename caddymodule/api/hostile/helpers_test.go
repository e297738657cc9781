package hostile_test

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"

	_ "github.com/caddy-proxmox/caddy-proxmox/caddymodule"
)

const (
	tokenID     = "root@pam!ci"
	tokenSecret = "0d7c3c1e-8c1b-4c33-9d2a-3f1f5e6a7b8c"
	user        = "alice@pve"
	password    = "s3cret"
	keyA        = "ticket-key-A-0123456789"
	keyB        = "ticket-key-B-9876543210"
	// failDelay is the configured auth_failure_delay every 401 must wait.
	failDelay = 300 * time.Millisecond
	// vmPath is a VM config both reads and writes are sent to; node 2
	// holds VM 101 in the simulated cluster.
	vmPath = "/api2/json/nodes/kv-node-2-lab-internal/qemu/101/config"
)

// server is the address of the in-process Caddy serving the API over
// plain HTTP (raw requests need no TLS to exercise the HTTP parser).
type server struct {
	t    *testing.T
	addr string
	port int
}

// config is the Caddyfile of the test server: ticketKey signs tickets,
// timeouts is the body of servers { timeouts { ... } } (empty: Caddy's
// defaults).
func config(port int, ticketKey, timeouts string) string {
	if timeouts != "" {
		timeouts = "\n\t\ttimeouts {\n" + timeouts + "\n\t\t}"
	}
	return fmt.Sprintf(`{
	admin off
	storage file_system %s
	skip_install_trust
	servers {
		protocols h1%s
	}
}
http://127.0.0.1:%d {
	bind 127.0.0.1
	proxmox_api {
		simulate
		token %s %s
		user %s %s
		ticket_key %s
		auth_failure_delay %s
	}
}
`, os.TempDir()+"/caddy-proxmox-hostile", timeouts, port, tokenID, tokenSecret, user, password, ticketKey, failDelay)
}

// start loads a fresh Caddy (stopped when the test ends).
func start(t *testing.T, ticketKey, timeouts string) *server {
	t.Helper()
	port := testcaddy.FreePort(t)
	testcaddy.Start(t, config(port, ticketKey, timeouts))
	s := &server{t: t, addr: fmt.Sprintf("127.0.0.1:%d", port), port: port}
	testcaddy.WaitReady(t, "http://"+s.addr+"/api2/json/version")
	return s
}

// reload replaces the running config (same port) with another ticket key.
func (s *server) reload(ticketKey, timeouts string) {
	s.t.Helper()
	testcaddy.Load(s.t, config(s.port, ticketKey, timeouts))
	testcaddy.WaitReady(s.t, "http://"+s.addr+"/api2/json/version")
}

// answer is one raw exchange.
type answer struct {
	code    int
	status  string
	body    []byte
	elapsed time.Duration
	err     error
}

// raw writes req as is and reads one response.
func (s *server) raw(req string) answer {
	start := time.Now()
	c, err := net.DialTimeout("tcp", s.addr, 10*time.Second)
	if err != nil {
		return answer{err: err}
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		return answer{err: err}
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return answer{err: err, elapsed: time.Since(start)}
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return answer{code: res.StatusCode, status: res.Status, body: body, elapsed: time.Since(start)}
}

// request builds a raw HTTP/1.1 request; headers are "Name: value" lines
// written exactly as given (CR/LF and all).
func request(method, path string, headers []string, body string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n", method, path)
	for _, h := range headers {
		b.WriteString(h + "\r\n")
	}
	if body != "" || method == "POST" || method == "PUT" {
		fmt.Fprintf(&b, "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n" + body)
	return b.String()
}

// pveShaped tells whether body is PVE's JSON envelope (a "data" key).
func pveShaped(body []byte) bool {
	var env map[string]json.RawMessage
	if json.Unmarshal(body, &env) != nil {
		return false
	}
	_, ok := env["data"]
	return ok
}

// subkey is the server's derivation of the ticket and CSRF keys from
// ticket_key; tests forge correctly signed tickets with it to reach the
// checks behind the signature (age, user).
func subkey(key, purpose string) []byte {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(purpose))
	return m.Sum(nil)
}

// basic is the value of a Basic Authorization header.
func basic(u, p string) string { return base64.StdEncoding.EncodeToString([]byte(u + ":" + p)) }
