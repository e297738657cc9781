// Package bench measures the proxmox_api handler against Caddy's own
// static_response (the `respond` directive) serving the very same bytes,
// so that the ratio says what the translation costs, whatever the machine.
// respond re-scans its body for placeholders on every request, which for
// a body of megabytes costs more than serving it; file_server sending
// the same bytes from a file is the stricter baseline, reported next to
// it.
// Both are loaded in alternating short rounds (internal/benchload), so
// that the noise of a shared machine falls on both alike. Run
// ./bench/run.sh for the table.
package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	_ "github.com/caddy-proxmox/caddy-proxmox/caddymodule"
	"github.com/caddy-proxmox/caddy-proxmox/internal/benchload"
	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
)

// Two callers: an Administrator (no filtering) and a PVEAuditor on /, who
// sees the same rows but has every one checked against the grants.
const (
	adminToken   = "root@pam!bench"
	auditorToken = "auditor@pve!bench"
	secret       = "5b1e0d3c-aaaa-4bbb-8ccc-0123456789ab"
)

var sizes = []int{10, 1000, 10000}

// endpoint is one API call measured next to respond serving its answer.
type endpoint struct {
	name, path, token string
	// latency also measures one request alone, in µs.
	latency bool
}

var endpoints = []endpoint{
	{"status-current", "/api2/json/nodes/kv-node-1-lab-internal/qemu/100/status/current", adminToken, true},
	{"cluster-resources", "/api2/json/cluster/resources?type=vm", adminToken, false},
	{"cluster-resources-all", "/api2/json/cluster/resources", adminToken, false},
	{"cluster-resources-auditor", "/api2/json/cluster/resources?type=vm", auditorToken, false},
	{"nodes-qemu", "/api2/json/nodes/kv-node-1-lab-internal/qemu", adminToken, false},
}

// server is one Caddy run with n simulated VMs.
type server struct {
	base   string
	client *http.Client
	// respond and file are the bases of respond's server of each
	// endpoint and of file_server's (see config).
	respond map[string]string
	file    string
}

// filesDir holds the answers file_server sends (under file/).
var filesDir string

// listener is a Caddy server on port of its own, serving one route,
// matched by nothing.
func listener(port int, handle ...any) map[string]any {
	return map[string]any{
		"listen": []string{"127.0.0.1:" + strconv.Itoa(port)}, "protocols": []string{"h1"},
		"automatic_https": map[string]any{"disable": true}, "routes": []any{map[string]any{"handle": handle}},
	}
}

// config is the API on ports["api"] and, for each answer in static,
// respond sending it on ports[name], and file_server on ports["file"].
// Each has a server of its own with one route and no matcher: every
// request runs through Caddy alike, and no side pays for matching the
// other's routes.
func config(ports map[string]int, n int, static map[string][]byte) []byte {
	servers := map[string]any{
		"api": listener(ports["api"], map[string]any{
			"handler": "proxmox_api", "simulate": true, "simulate_vms": n,
			"tokens": []any{
				map[string]string{"id": adminToken, "secret": secret},
				map[string]string{"id": auditorToken, "secret": secret},
			},
			"identities":         []any{map[string]any{"id": "auditor@pve", "roles": []any{map[string]string{"path": "/", "role": "PVEAuditor"}}}},
			"auth_failure_delay": 0,
		}),
	}
	for name, body := range static {
		servers["respond-"+name] = listener(ports[name], map[string]any{
			"handler": "static_response", "body": string(body), "headers": map[string][]string{"Content-Type": {"application/json;charset=UTF-8"}},
		})
	}
	if len(static) > 0 {
		servers["file"] = listener(ports["file"],
			map[string]any{"handler": "headers", "response": map[string]any{"set": map[string][]string{"Content-Type": {"application/json;charset=UTF-8"}}}},
			map[string]any{"handler": "file_server", "root": filesDir},
		)
	}
	cfg := map[string]any{
		"admin":   map[string]any{"disabled": true},
		"logging": map[string]any{"logs": map[string]any{"default": map[string]any{"level": "ERROR"}}},
		"apps":    map[string]any{"http": map[string]any{"servers": servers}},
	}
	buf, _ := json.Marshal(cfg)
	return buf
}

var (
	mu      sync.Mutex
	current = map[int]*server{}
	ports   map[string]int
)

// start runs Caddy with n VMs and a respond route per endpoint carrying
// the API's own answer.
func start(b *testing.B, n int) *server {
	mu.Lock()
	defer mu.Unlock()
	if s := current[n]; s != nil {
		return s
	}
	if ports == nil {
		ports = map[string]int{"api": testcaddy.FreePort(b), "file": testcaddy.FreePort(b)}
		for _, e := range endpoints {
			ports[e.name] = testcaddy.FreePort(b)
		}
	}
	if err := caddy.Load(config(ports, n, nil), true); err != nil {
		b.Fatal(err)
	}
	at := func(port int) string { return "http://127.0.0.1:" + strconv.Itoa(port) }
	s := &server{base: at(ports["api"]), client: benchload.Client(8), respond: map[string]string{}, file: at(ports["file"])}
	waitVMs(b, s, n)
	// The simulated controller looks at every VM once when it starts;
	// measure after it has gone quiet.
	waitQuiet(b)
	static := map[string][]byte{}
	if filesDir == "" {
		dir, err := os.MkdirTemp("", "caddy-proxmox-bench-")
		if err != nil {
			b.Fatal(err)
		}
		filesDir = dir
	}
	if err := os.MkdirAll(filesDir+"/file", 0o700); err != nil {
		b.Fatal(err)
	}
	for _, e := range endpoints {
		body := s.get(b, e.path, e.token)
		static[e.name] = body
		s.respond[e.name] = at(ports[e.name])
		if err := os.WriteFile(filesDir+"/file/"+e.name, body, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	if err := caddy.Load(config(ports, n, static), true); err != nil {
		b.Fatal(err)
	}
	current = map[int]*server{n: s}
	return s
}

func auth(token string) http.Header {
	return http.Header{"Authorization": {"PVEAPIToken=" + token + "=" + secret}}
}

func (s *server) get(b *testing.B, path, token string) []byte {
	req, _ := http.NewRequest("GET", s.base+path, nil)
	req.Header = auth(token)
	res, err := s.client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		b.Fatal(err)
	}
	if res.StatusCode != 200 {
		b.Fatalf("%s: %s %s", path, res.Status, body)
	}
	return body
}

// waitVMs waits until the simulated cluster lists all seeded VMs.
func waitVMs(b *testing.B, s *server, n int) {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		var env struct{ Data []json.RawMessage }
		if err := json.Unmarshal(s.get(b, "/api2/json/cluster/resources?type=vm", adminToken), &env); err == nil && len(env.Data) >= n+3 {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	b.Fatalf("simulated cluster did not list %d VMs", n)
}

// waitQuiet waits until the process uses less than a tenth of a core.
func waitQuiet(b *testing.B) {
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		used := cpu()
		time.Sleep(time.Second)
		if cpu()-used < 100*time.Millisecond {
			return
		}
	}
	b.Log("the process never went quiet; measuring anyway")
}

// cpu is the process's CPU time so far.
func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// side is how long each side is loaded in all (BENCH_SIDE, default 2s),
// in rounds of a quarter second.
func side() (rounds int, round time.Duration) {
	d := 2 * time.Second
	if v := os.Getenv("BENCH_SIDE"); v != "" {
		if p, err := time.ParseDuration(v); err == nil && p > 0 {
			d = p
		}
	}
	round = 250 * time.Millisecond
	return max(2, int(d/round)), round
}

// BenchmarkAPI: per VM count and endpoint, the API and respond with its
// answer, alternately; the ratio is the median of api/respond over the
// pairs of rounds (benchload.Ratio). Run with -benchtime 1x.
func BenchmarkAPI(b *testing.B) {
	for _, n := range sizes {
		for _, e := range endpoints {
			b.Run(fmt.Sprintf("vms=%d/%s", n, e.name), func(b *testing.B) {
				s := start(b, n)
				// Every side gets the same request headers.
				api := benchload.Target{URL: s.base + e.path, Header: auth(e.token)}
				respond := benchload.Target{URL: s.respond[e.name] + e.path, Header: auth(e.token)}
				file := benchload.Target{URL: s.file + "/file/" + e.name, Header: auth(e.token)}
				rounds, round := side()
				for i := 0; i < b.N; i++ {
					res, err := benchload.Alternate(s.client, 4, rounds, round, api, respond, file)
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(res[0].PerSec, "api-req/s")
					b.ReportMetric(res[1].PerSec, "respond-req/s")
					b.ReportMetric(benchload.Ratio(res[0], res[1]), "ratio")
					b.ReportMetric(res[2].PerSec, "file-req/s")
					b.ReportMetric(benchload.Ratio(res[0], res[2]), "file-ratio")
					b.ReportMetric(float64(res[0].Bytes), "body-B")
					if e.latency {
						lat, err := benchload.Latency(s.client, 400, api, respond)
						if err != nil {
							b.Fatal(err)
						}
						b.ReportMetric(float64(lat[0].Nanoseconds())/1000, "api-µs")
						b.ReportMetric(float64(lat[1].Nanoseconds())/1000, "respond-µs")
					}
				}
			})
		}
	}
	_ = caddy.Stop()
	if filesDir != "" {
		_ = os.RemoveAll(filesDir)
	}
}
