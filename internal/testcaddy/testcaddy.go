// Package testcaddy runs a real Caddy instance in the test process from a
// Caddyfile, on free loopback ports, without the admin endpoint (so test
// packages running in parallel never collide on :2019).
package testcaddy

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testutil"

	// The Caddyfile adapter and the standard modules tests configure.
	_ "github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
)

// FreePort is testutil.FreePort, for the tests that use testcaddy.
func FreePort(t testing.TB) int {
	t.Helper()
	return testutil.FreePort(t)
}

// Port is testutil.Port, for the tests that use testcaddy.
func Port() (int, error) { return testutil.Port() }

// Load (re)loads Caddy with a Caddyfile. The global options block gets
// "admin off" and no storage outside a temp dir.
func Load(t testing.TB, caddyfile string) {
	t.Helper()
	warnings, err := LoadCaddyfile(caddyfile)
	if err != nil {
		t.Fatalf("%v\n%s", err, caddyfile)
	}
	for _, w := range warnings {
		t.Logf("caddyfile warning: %s", w.String())
	}
}

// LoadCaddyfile is Load for callers without a testing.TB (TestMain): it
// returns the adapter's warnings and any error.
func LoadCaddyfile(caddyfile string) ([]caddyconfig.Warning, error) {
	cfgJSON, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), map[string]any{"filename": "Caddyfile"})
	if err != nil {
		return nil, fmt.Errorf("adapting Caddyfile: %w", err)
	}
	if err := caddy.Load(cfgJSON, true); err != nil {
		return warnings, fmt.Errorf("loading Caddy config: %w", err)
	}
	return warnings, nil
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
	if err := Ready(url, 20*time.Second); err != nil {
		t.Fatal(err)
	}
}

// Ready is WaitReady for callers without a testing.TB: it polls url until
// it answers anything, and returns an error when timeout passes first.
func Ready(url string, timeout time.Duration) error {
	c := Client()
	deadline := time.Now().Add(timeout)
	for {
		res, err := c.Get(url)
		if err == nil {
			res.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not come up within %s: %w", url, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
