package observed_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"

	_ "github.com/caddy-proxmox/caddy-proxmox/caddymodule"
)

const (
	adminToken  = "root@pam!ci"
	plainToken  = "nobody@pve!ci"
	tokenSecret = "5f0c2a43-1d6e-4b8a-9c71-2e3f4a5b6c7d"
	// node is a node of the simulated cluster; VM 4242 is not on it.
	node = "kv-node-1-lab-internal"
)

// answer is what the client read and what Caddy recorded of one request.
type answer struct {
	method, path string
	token        string // "" sends no credentials
	wantCode     int
	wantReason   string // the reason phrase PVE clients show
}

// site is the in-process Caddy of a test: the API on base, its access log
// in accessLog, Caddy's metrics (of the server named api) at metrics.
type site struct {
	base, metrics, accessLog string
}

// start loads Caddy with the API, an access log and metrics; it stops when
// the test ends.
func start(t *testing.T) site {
	t.Helper()
	dir := t.TempDir()
	accessLog := filepath.Join(dir, "access.log")
	port, metricsPort := testcaddy.FreePort(t), testcaddy.FreePort(t)
	testcaddy.Start(t, fmt.Sprintf(`{
	admin off
	storage file_system %[1]s
	skip_install_trust
	metrics
	servers 127.0.0.1:%[2]d {
		name api
		protocols h1
	}
}
http://127.0.0.1:%[7]d {
	bind 127.0.0.1
	metrics
}
http://127.0.0.1:%[2]d {
	bind 127.0.0.1
	log {
		output file %[3]s
		format json
	}
	proxmox_api {
		simulate
		token %[4]s %[6]s
		token %[5]s %[6]s
		auth_failure_delay 0s
		default_role NoAccess
		identity root@pam {
			role Administrator
		}
	}
}
`, dir, port, accessLog, adminToken, plainToken, tokenSecret, metricsPort))
	s := site{
		base:      fmt.Sprintf("http://127.0.0.1:%d", port),
		metrics:   fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort),
		accessLog: accessLog,
	}
	testcaddy.WaitReady(t, s.metrics)
	return s
}

// TestCaddyRecordsEveryStatus: Caddy's access log and HTTP metrics record
// the real status of every API answer (errors are written on a hijacked
// connection to carry PVE's reason phrase), and the client still reads
// that phrase.
func TestCaddyRecordsEveryStatus(t *testing.T) {
	s := start(t)
	base, metricsURL, accessLog := s.base, s.metrics, s.accessLog

	answers := []answer{
		{"GET", "/api2/json/version", adminToken, 200, "200 OK"},
		{"GET", "/api2/json/version", "", 401, "401 No ticket"},
		{"GET", "/api2/json/nodes/" + node + "/status", plainToken, 403, "403 Permission check failed (/nodes/" + node + ", Sys.Audit)"},
		{"GET", "/api2/json/nodes/" + node + "/qemu/4242/status/current", adminToken, 500, "500 Configuration file 'nodes/" + node + "/qemu-server/4242.conf' does not exist"},
		{"GET", "/api2/json/nodes/" + node + "/nonesuch", adminToken, 501, "501 Method 'GET /nodes/" + node + "/nonesuch' not implemented"},
		{"POST", "/api2/json/nodes/" + node + "/qemu", adminToken, 400, "400 Parameter verification failed."},
	}
	c := testcaddy.Client()
	for _, a := range answers {
		req, err := http.NewRequest(a.method, base+a.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if a.token != "" {
			req.Header.Set("Authorization", "PVEAPIToken="+a.token+"="+tokenSecret)
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", a.method, a.path, err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.Status != a.wantReason {
			t.Errorf("%s %s: client read %q, want %q (%s)", a.method, a.path, res.Status, a.wantReason, body)
		}
		// Keep-alive: an answer written by hand says that its connection
		// ends, so that clients do not send the next request down it.
		if wantClose := a.wantCode != 200; res.Close != wantClose {
			t.Errorf("%s %s: Connection: close is %v, want %v", a.method, a.path, res.Close, wantClose)
		}
	}

	// Caddy writes the access log line and the metrics once the handler
	// has returned, after the client has its answer: wait for them.
	logged := waitFor(t, "an access log line for every request", func() (map[string][]int, bool) {
		got := accessLogStatuses(t, accessLog)
		n := 0
		for _, codes := range got {
			n += len(codes)
		}
		return got, n >= len(answers)
	})
	for _, a := range answers {
		key := a.method + " " + a.path
		if codes := logged[key]; !contains(codes, a.wantCode) {
			t.Errorf("access log: %s logged with status %v, want %d", key, codes, a.wantCode)
		}
	}
	for key, codes := range logged {
		if contains(codes, 0) {
			t.Errorf("access log: %s logged with status 0 (%v)", key, codes)
		}
	}

	want := map[string]float64{}
	for _, a := range answers {
		want[fmt.Sprint(a.wantCode)]++
	}
	counted := waitFor(t, "the metrics of every request", func() (map[string]float64, bool) {
		got := requestCounts(t, c, metricsURL)
		var n float64
		for _, v := range got {
			n += v
		}
		return got, n >= float64(len(answers))
	})
	for code, n := range want {
		if counted[code] != n {
			t.Errorf("caddy_http_request_duration_seconds{server=\"api\",code=%q}: %v requests, want %v (all: %v)", code, counted[code], n, counted)
		}
	}
	if len(counted) != len(want) {
		t.Errorf("metrics count codes %v, want exactly %v", counted, want)
	}
}

// accessLogStatuses reads the access log: the statuses logged per
// "METHOD uri".
func accessLogStatuses(t *testing.T, path string) map[string][]int {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var line struct {
			Msg     string `json:"msg"`
			Status  int    `json:"status"`
			Request struct {
				Method string `json:"method"`
				URI    string `json:"uri"`
			} `json:"request"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("access log line %q: %v", sc.Text(), err)
		}
		if line.Msg != "handled request" || !strings.HasPrefix(line.Request.URI, "/api2/") {
			continue
		}
		key := line.Request.Method + " " + line.Request.URI
		out[key] = append(out[key], line.Status)
	}
	return out
}

// requestCounts scrapes Caddy's metrics: the requests the API's server
// (named api; the scrapes go to another) answered, per code label.
func requestCounts(t *testing.T, c *http.Client, url string) map[string]float64 {
	t.Helper()
	res, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	fam := families["caddy_http_request_duration_seconds"]
	if fam == nil {
		return out
	}
	for _, m := range fam.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["server"] == "api" {
			out[labels["code"]] += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return out
}

// waitFor polls get until it reports done, and returns its last value.
func waitFor[T any](t *testing.T, what string, get func() (T, bool)) T {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, done := get()
		if done {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: not within 10s; last: %v", what, v)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
