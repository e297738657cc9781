// Package bench measures the proxmox_api handler against Caddy's own
// static_response (the `respond` directive) serving the very same bytes,
// so that the ratio says what the translation costs, whatever the machine.
// Run ./bench/run.sh for the table.
package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	_ "github.com/caddy-proxmox/caddy-proxmox/caddymodule"
	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
)

const (
	tokenID = "root@pam!bench"
	secret  = "5b1e0d3c-aaaa-4bbb-8ccc-0123456789ab"
)

var sizes = []int{10, 1000, 10000}

// server is one Caddy run with n simulated VMs.
type server struct {
	base   string
	client *http.Client
}

func config(port int, n int, static map[string][]byte) []byte {
	routes := []any{}
	for path, body := range static {
		routes = append(routes, map[string]any{
			"match":  []any{map[string]any{"path": []string{path}}},
			"handle": []any{map[string]any{"handler": "static_response", "body": string(body), "headers": map[string][]string{"Content-Type": {"application/json;charset=UTF-8"}}}},
		})
	}
	routes = append(routes, map[string]any{"handle": []any{map[string]any{
		"handler": "proxmox_api", "simulate": true, "simulate_vms": n,
		"tokens": []any{map[string]string{"id": tokenID, "secret": secret}}, "auth_failure_delay": 0,
	}}})
	cfg := map[string]any{
		"admin":   map[string]any{"disabled": true},
		"logging": map[string]any{"logs": map[string]any{"default": map[string]any{"level": "ERROR"}}},
		"apps": map[string]any{"http": map[string]any{"servers": map[string]any{"bench": map[string]any{
			"listen": []string{"127.0.0.1:" + strconv.Itoa(port)}, "protocols": []string{"h1"},
			"automatic_https": map[string]any{"disable": true}, "routes": routes,
		}}}},
	}
	buf, _ := json.Marshal(cfg)
	return buf
}

var (
	mu      sync.Mutex
	current = map[int]*server{}
	port    int
)

// start runs Caddy with n VMs and the respond routes carrying the API's
// own answers for the two endpoints measured.
func start(b *testing.B, n int) *server {
	mu.Lock()
	defer mu.Unlock()
	if s := current[n]; s != nil {
		return s
	}
	if port == 0 {
		port = testcaddy.FreePort(b)
	}
	if err := caddy.Load(config(port, n, nil), true); err != nil {
		b.Fatal(err)
	}
	s := &server{base: "http://127.0.0.1:" + strconv.Itoa(port), client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	waitVMs(b, s, n)
	// The stand-in controller reconciles every seeded VM once (finalizers,
	// firmware UUIDs, statuses); measure after it has gone quiet.
	time.Sleep(2*time.Second + time.Duration(n)*time.Millisecond)
	static := map[string][]byte{
		"/respond/status":    s.get(b, "/api2/json/nodes/kv-node-1-lab-internal/qemu/100/status/current"),
		"/respond/resources": s.get(b, "/api2/json/cluster/resources?type=vm"),
	}
	if err := caddy.Load(config(port, n, static), true); err != nil {
		b.Fatal(err)
	}
	current = map[int]*server{n: s}
	return s
}

func (s *server) get(b *testing.B, path string) []byte {
	req, _ := http.NewRequest("GET", s.base+path, nil)
	req.Header.Set("Authorization", "PVEAPIToken="+tokenID+"="+secret)
	res, err := s.client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
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
		if err := json.Unmarshal(s.get(b, "/api2/json/cluster/resources?type=vm"), &env); err == nil && len(env.Data) >= n+3 {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	b.Fatalf("simulated cluster did not list %d VMs", n)
}

func run(b *testing.B, s *server, path string, auth bool) {
	b.ReportAllocs()
	b.SetParallelism(4)
	var bytes atomic.Int64 // written by the parallel clients
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req, _ := http.NewRequest("GET", s.base+path, nil)
		if auth {
			req.Header.Set("Authorization", "PVEAPIToken="+tokenID+"="+secret)
		}
		for pb.Next() {
			res, err := s.client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			n, _ := io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != 200 {
				b.Errorf("%s: %s", path, res.Status)
				return
			}
			bytes.Store(n)
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
	b.SetBytes(bytes.Load())
}

// BenchmarkAPI: per VM count, the API endpoint and respond with its body.
func BenchmarkAPI(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("vms=%d/status-current/api", n), func(b *testing.B) {
			run(b, start(b, n), "/api2/json/nodes/kv-node-1-lab-internal/qemu/100/status/current", true)
		})
		b.Run(fmt.Sprintf("vms=%d/status-current/respond", n), func(b *testing.B) {
			run(b, start(b, n), "/respond/status", false)
		})
		b.Run(fmt.Sprintf("vms=%d/cluster-resources/api", n), func(b *testing.B) {
			run(b, start(b, n), "/api2/json/cluster/resources?type=vm", true)
		})
		b.Run(fmt.Sprintf("vms=%d/cluster-resources/respond", n), func(b *testing.B) {
			run(b, start(b, n), "/respond/resources", false)
		})
	}
	_ = caddy.Stop()
}
