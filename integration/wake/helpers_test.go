// Package wake tests the proxmox app and the proxmox_wake handler through
// a real Caddy instance against the pvesim Proxmox VE simulator. Caddy is
// a process singleton: tests run one after the other.
package wake

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	// The modules under test.
	_ "github.com/caddy-proxmox/caddy-proxmox/caddymodule"
	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
	"github.com/caddy-proxmox/caddy-proxmox/internal/testutil"
	"github.com/caddy-proxmox/caddy-proxmox/pvesim"
)

// ipSeq hands out distinct guest addresses (127.77.x.y) so that no test
// meets a guest listener left by another.
var ipSeq atomic.Int32

func nextIP() string {
	n := ipSeq.Add(1)
	return fmt.Sprintf("127.77.%d.%d", 1+n/200, 2+n%200)
}

// env is one simulated cluster and one Caddy config around it.
type env struct {
	t         testing.TB
	sim       *pvesim.Sim
	apiURL    string
	cluster   string
	port      int // Caddy's HTTP port
	guestPort int
	adminPort int
	base      string
	dir       string
	poll      string // poll_interval (100ms)
	// clusterOpts are extra lines in the cluster block.
	clusterOpts string
}

var clusterSeq atomic.Int32

// newEnv starts a simulator with the given guests (IP and Port are
// filled in when empty).
func newEnv(t testing.TB, specs ...pvesim.GuestSpec) *env {
	t.Helper()
	return newEnvWith(t, pvesim.Options{}, specs...)
}

// newEnvWith is newEnv with simulator options (30ms tasks and nodes pve1,
// pve2 unless set).
func newEnvWith(t testing.TB, opts pvesim.Options, specs ...pvesim.GuestSpec) *env {
	t.Helper()
	e := &env{t: t, guestPort: testcaddy.FreePort(t), port: testcaddy.FreePort(t), dir: t.TempDir(), poll: "100ms"}
	e.cluster = fmt.Sprintf("lab%d", clusterSeq.Add(1))
	if opts.TaskDelay == 0 {
		opts.TaskDelay = 30 * time.Millisecond
	}
	if opts.Nodes == nil {
		opts.Nodes = []string{"pve1", "pve2"}
	}
	e.sim = pvesim.New(opts)
	for _, s := range specs {
		if s.IP == "" {
			s.IP = nextIP()
		}
		if s.Port == 0 {
			s.Port = e.guestPort
		}
		if err := e.sim.AddGuest(s); err != nil {
			t.Fatal(err)
		}
	}
	url, err := e.sim.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.apiURL = url
	e.base = fmt.Sprintf("http://127.0.0.1:%d", e.port)
	t.Cleanup(func() { _ = e.sim.Close() })
	return e
}

// globals is the global options block with the proxmox app.
func (e *env) globals(extra string) string {
	admin := "admin off"
	if e.adminPort != 0 {
		admin = fmt.Sprintf("admin 127.0.0.1:%d", e.adminPort)
	}
	return fmt.Sprintf(`{
	%s
	storage file_system %s
	skip_install_trust
	servers {
		protocols h1
	}
	proxmox {
		cluster %s {
			url %s
			token_id %s
			token_secret %s
			poll_interval %s
			request_timeout 2s
			%s
		}
	}
	%s
}
`, admin, e.dir, e.cluster, e.apiURL, e.sim.TokenID(), e.sim.TokenSecret(), e.poll, e.clusterOpts, extra)
}

// wakeSite is a site on 127.0.0.1 with proxmox_wake on guest ref and
// the given proxmox_wake options.
func (e *env) wakeSite(ref, opts string) string {
	return e.site("127.0.0.1", ref, opts, "")
}

// site is a site for host (requests set Host: host) with site-level
// lines before proxmox_wake.
func (e *env) site(host, ref, opts, siteLines string) string {
	return fmt.Sprintf(`http://%s:%d {
	bind 127.0.0.1
	%s
	proxmox_wake %s/%s {
		port %d
		idle_timeout 300ms
		wake_timeout 5s
		hold_timeout 4s
		retry_backoff 1s
		task_poll_interval 20ms
		probe_interval 20ms
		%s
	}
	reverse_proxy {
		dynamic proxmox
	}
}
`, host, e.port, siteLines, e.cluster, ref, e.guestPort, opts)
}

// start loads Caddy with the globals and sites.
func (e *env) start(sites ...string) {
	e.t.Helper()
	testcaddy.Start(e.t, e.globals("")+strings.Join(sites, "\n"))
}

// reload loads a new config into the running Caddy.
func (e *env) reload(sites ...string) {
	e.t.Helper()
	testcaddy.Load(e.t, e.globals("")+strings.Join(sites, "\n"))
}

var client = &http.Client{
	Timeout: 30 * time.Second,
	Transport: &http.Transport{
		MaxIdleConnsPerHost: 2000,
		MaxConnsPerHost:     0,
		DisableCompression:  true,
	},
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

type answer struct {
	code   int
	header http.Header
	body   string
}

// get sends a request with headers "K: V" and reads the whole answer.
func (e *env) get(path string, headers ...string) answer {
	e.t.Helper()
	a, err := e.do("GET", path, headers...)
	if err != nil {
		e.t.Fatalf("GET %s: %v", path, err)
	}
	return a
}

func (e *env) do(method, path string, headers ...string) (answer, error) {
	req, err := http.NewRequest(method, e.base+path, nil)
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Accept", "application/json")
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	res, err := client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return answer{res.StatusCode, res.Header, string(b)}, err
}

// waitFor is testutil.WaitFor.
var waitFor = testutil.WaitFor

// polls is how many times the app has polled the simulated cluster.
func (e *env) polls() int { return e.sim.Calls("GET /cluster/resources") }

// waitPolled waits until the app has fully handled a poll of the cluster
// that began after the call: it has seen the guests as the simulator shows
// them now and acted on that. (A poll is counted when it reaches the
// simulator, and the next one begins only after it was handled.)
func (e *env) waitPolled() {
	e.t.Helper()
	want := e.polls() + 2
	waitFor(e.t, 5*time.Second, "a poll of the cluster", func() bool { return e.polls() >= want })
}

// info reads the admin API's view of a guest (adminPort must be set).
func (e *env) info(ref string) guestInfo {
	e.t.Helper()
	var in guestInfo
	if code := e.adminJSON("GET", fmt.Sprintf("/proxmox/guests/%s/%s", e.cluster, ref), &in); code != 200 {
		e.t.Fatalf("admin API on %s: %d", ref, code)
	}
	return in
}

// openUpgrade opens an upgraded (websocket-style) connection through
// Caddy and checks the 101.
func (e *env) openUpgrade(path string) (net.Conn, *bufio.Reader) {
	e.t.Helper()
	conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", e.port), 5*time.Second)
	if err != nil {
		e.t.Fatal(err)
	}
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", path, e.port)
	br := bufio.NewReader(conn)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if res.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(res.Body)
		e.t.Fatalf("upgrade answered %d %s", res.StatusCode, b)
	}
	_ = conn.SetReadDeadline(time.Time{})
	return conn, br
}

// adminJSON calls the admin API.
func (e *env) adminJSON(method, path string, into any) int {
	e.t.Helper()
	req, _ := http.NewRequest(method, fmt.Sprintf("http://127.0.0.1:%d%s", e.adminPort, path), nil)
	res, err := client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if into != nil && res.StatusCode < 300 {
		if err := json.Unmarshal(b, into); err != nil {
			e.t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	return res.StatusCode
}

func TestMain(m *testing.M) {
	code := m.Run()
	_ = caddy.Stop()
	os.Exit(code)
}

// validateJSON is caddy validate: provision without starting.
func validateJSON(js []byte) error {
	var cfg caddy.Config
	if err := json.Unmarshal(js, &cfg); err != nil {
		return err
	}
	return caddy.Validate(&cfg)
}
