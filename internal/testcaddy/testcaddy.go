// Package testcaddy runs a real Caddy instance in the test process from a
// Caddyfile, on free loopback ports, without the admin endpoint (so test
// packages running in parallel never collide on :2019).
package testcaddy

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"

	// The Caddyfile adapter and the standard modules tests configure.
	_ "github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
)

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := Port()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Port returns a loopback TCP port that was free a moment ago.
func Port() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Load (re)loads Caddy with a Caddyfile. The global options block gets
// "admin off" and no storage outside a temp dir.
func Load(t testing.TB, caddyfile string) {
	t.Helper()
	cfgJSON, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), map[string]any{"filename": "Caddyfile"})
	if err != nil {
		t.Fatalf("adapting Caddyfile: %v\n%s", err, caddyfile)
	}
	for _, w := range warnings {
		t.Logf("caddyfile warning: %s", w.String())
	}
	if err := caddy.Load(cfgJSON, true); err != nil {
		t.Fatalf("loading Caddy config: %v", err)
	}
}

// Start loads caddyfile and stops Caddy when the test ends.
func Start(t testing.TB, caddyfile string) {
	t.Helper()
	Load(t, caddyfile)
	t.Cleanup(func() { _ = caddy.Stop() })
}

// Globals is a global options block for tests: no admin endpoint,
// certificates and state under dir, HTTP/1.1 only (like pveproxy).
func Globals(dir string) string {
	return fmt.Sprintf(`{
	admin off
	storage file_system %s
	skip_install_trust
	default_sni localhost
	servers {
		protocols h1
	}
}
`, dir)
}

// Client is an HTTP client that trusts any certificate (Caddy's internal
// CA is not installed in tests) and does not share connections.
func Client() *http.Client {
	return &http.Client{
		Timeout: 60 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // test CA
			ForceAttemptHTTP2: false,
		},
	}
}

// WaitReady polls url until it answers anything, so tests start once the
// listener is up.
func WaitReady(t testing.TB, url string) {
	t.Helper()
	c := Client()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		res, err := c.Get(url)
		if err == nil {
			res.Body.Close()
			return
		}
		if !strings.Contains(err.Error(), "refused") && !strings.Contains(err.Error(), "EOF") {
			t.Logf("waiting for %s: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s did not come up", url)
}
