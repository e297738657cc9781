package integration

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
	"github.com/caddy-proxmox/caddy-proxmox/internal/testutil"
	"github.com/caddy-proxmox/caddy-proxmox/kubevirtsim"
	"github.com/caddy-proxmox/caddy-proxmox/testenv"
)

// metricsSites are two more Caddy sites over the same cluster, each
// through its own front proxy that plays metrics-server (kubevirtsim's
// metrics.k8s.io stand-in, so the plugin's real metrics.k8s.io poller
// runs against the real apiserver's address): metricsBase reads a
// Prometheus stub, hangingPromBase a Prometheus that never answers.
type metricsSites struct {
	caddyfile string
	prom      *httptest.Server
	hanging   *httptest.Server
	release   chan struct{}
}

func startMetricsSites(e *testenv.Env) (*metricsSites, error) {
	s := &metricsSites{release: make(chan struct{})}
	api := kubevirtsim.NewMetrics(e.DirectKube, e.DirectKubeVirt).APIHandler()
	var kubeconfigs [2]string
	for i := range kubeconfigs {
		p, err := e.NewProxy()
		if err != nil {
			return nil, err
		}
		p.SetMetricsAPI(api)
		kubeconfigs[i] = p.Kubeconfig("admin")
	}
	s.prom = httptest.NewServer(kubevirtsim.NewPrometheus(e.DirectKube, e.DirectKubeVirt))
	s.hanging = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-s.release:
		case <-r.Context().Done():
		}
	}))
	p1, err := testcaddy.Port()
	if err != nil {
		return nil, err
	}
	p2, err := testcaddy.Port()
	if err != nil {
		return nil, err
	}
	metricsBase = fmt.Sprintf("https://localhost:%d", p1)
	hangingPromBase = fmt.Sprintf("https://localhost:%d", p2)
	site := func(port int, kubeconfig, prom string) string {
		return fmt.Sprintf(`
https://localhost:%d {
	tls internal
	proxmox_api {
		kubeconfig %s
		token %s %s
		auth_failure_delay 0s
		prometheus %s {
			interval 1s
		}
	}
}
`, port, kubeconfig, tokenID, tokenSecret, prom)
	}
	s.caddyfile = site(p1, kubeconfigs[0], s.prom.URL) + site(p2, kubeconfigs[1], s.hanging.URL)
	return s, nil
}

func (s *metricsSites) close() {
	close(s.release)
	s.prom.Close()
	s.hanging.Close()
}

func clientAt(t *testing.T, base string) *testcaddy.PVE {
	c := testcaddy.Client()
	// No request may wait on a metrics source: a generous bound that a
	// request held by a hanging Prometheus (forever) would exceed.
	c.Timeout = 20 * time.Second
	return &testcaddy.PVE{T: t, Base: base, C: c, Auth: testcaddy.TokenAuth(tokenID, tokenSecret)}
}

func num(m map[string]any, k string) float64 {
	f, _ := m[k].(float64)
	return f
}

// eventuallyOK waits until check passes (60 s: the metrics.k8s.io poller
// runs every 15 s, the Prometheus ones every second).
func eventuallyOK(t *testing.T, what string, check func() error) {
	t.Helper()
	testutil.WaitNoError(t, 60*time.Second, what, check)
}

func findRow(rows []map[string]any, typ, key string, val any) map[string]any {
	for _, r := range rows {
		if r["type"] == typ && r[key] == val {
			return r
		}
	}
	return nil
}

func TestMetricsSources(t *testing.T) {
	main := pve(t)
	node := firstNode(main)
	id := nextID(main)
	var upid string
	main.OK("POST", "/nodes/"+node+"/qemu", form("vmid", id, "name", "metrics-vm", "cores", "2", "memory", "2048", "start", "1"), &upid)
	if exit := main.WaitTask(upid); exit != "OK" {
		t.Fatalf("create+start: %s", exit)
	}
	defer func() {
		main.OK("POST", "/nodes/"+node+"/qemu/"+id+"/status/stop", nil, &upid)
		main.WaitTask(upid)
		main.OK("DELETE", "/nodes/"+node+"/qemu/"+id, nil, &upid)
		main.WaitTask(upid)
	}()
	vm := vmByID(t, id)
	began := time.Now().Unix()
	want := kubevirtsim.PromGuest(vm.Namespace, vm.Name)
	vmid, _ := strconv.Atoi(id)
	const cpus = 2.0

	t.Run("prometheus and metrics.k8s.io", func(t *testing.T) {
		a := clientAt(t, metricsBase)
		eventuallyOK(t, "VM row from prometheus", func() error {
			var rows []map[string]any
			a.OK("GET", "/cluster/resources", nil, &rows)
			r := findRow(rows, "qemu", "vmid", float64(vmid))
			if r == nil {
				return fmt.Errorf("vm %s not listed", id)
			}
			now := time.Now().Unix()
			if num(r, "cpu") != want.CPUCores/cpus || num(r, "mem") != float64(want.MemUsed) {
				return fmt.Errorf("cpu %v mem %v, want %v %v", r["cpu"], r["mem"], want.CPUCores/cpus, want.MemUsed)
			}
			for k, rate := range map[string]float64{"netin": want.NetInRate, "netout": want.NetOutRate, "diskread": want.DiskReadRate, "diskwrite": want.DiskWriteRate} {
				if v := num(r, k); v < math.Floor(kubevirtsim.Counter(rate, began-2)) || v > kubevirtsim.Counter(rate, now) {
					return fmt.Errorf("%s = %v, want the counter of %v/s at [%d, %d]", k, v, rate, began, now)
				}
			}
			n := findRow(rows, "node", "node", "node-1")
			if n == nil || num(n, "mem") < 1<<30 || num(n, "cpu") <= 0 {
				return fmt.Errorf("node-1 row without metrics.k8s.io usage: %v", n)
			}
			wn := kubevirtsim.PromNode("node-1")
			if num(n, "maxdisk") != float64(wn.RootSize) || num(n, "disk") != float64(wn.RootSize-wn.RootAvail) {
				return fmt.Errorf("node-1 rootfs %v/%v", n["disk"], n["maxdisk"])
			}
			return nil
		})
		st := a.Status(node, id)
		if num(st, "cpu") != want.CPUCores/cpus || num(st, "mem") != float64(want.MemUsed) || num(st, "netin") < kubevirtsim.Counter(want.NetInRate, began-2) {
			t.Fatalf("status/current %v", st)
		}
		var ns map[string]any
		a.OK("GET", "/nodes/node-1/status", nil, &ns)
		wn := kubevirtsim.PromNode("node-1")
		load := ns["loadavg"].([]any)
		if load[0] != strconv.FormatFloat(wn.Load1, 'f', 2, 64) || load[2] != strconv.FormatFloat(wn.Load15, 'f', 2, 64) {
			t.Errorf("loadavg %v, want %v %v %v", load, wn.Load1, wn.Load5, wn.Load15)
		}
		if up := num(ns, "uptime"); up < float64(time.Now().Unix()-wn.BootTime-5) {
			t.Errorf("uptime %v, want since %d", up, wn.BootTime)
		}
		swap := ns["swap"].(map[string]any)
		if num(swap, "total") != float64(wn.SwapTotal) || num(swap, "used") != float64(wn.SwapTotal-wn.SwapFree) || num(swap, "free") != float64(wn.SwapFree) {
			t.Errorf("swap %v, want total %d free %d", swap, wn.SwapTotal, wn.SwapFree)
		}
		if num(ns, "wait") != wn.IOWait || num(ns, "idle") != wn.Idle {
			t.Errorf("wait %v idle %v, want %v %v", ns["wait"], ns["idle"], wn.IOWait, wn.Idle)
		}

		// rrddata: the first request answers at once (without values);
		// the background cache fills the series.
		vmPath := "/nodes/" + node + "/qemu/" + id + "/rrddata"
		eventuallyOK(t, "VM rrddata", func() error {
			var pts []map[string]any
			a.OK("GET", vmPath, url.Values{"timeframe": {"hour"}, "cf": {"AVERAGE"}}, &pts)
			if len(pts) != 70 {
				return fmt.Errorf("%d points", len(pts))
			}
			p := pts[68]
			if num(p, "cpu") != want.CPUCores/cpus || num(p, "netin") != want.NetInRate || num(p, "diskwrite") != want.DiskWriteRate ||
				num(p, "mem") != float64(want.MemUsed) || num(p, "maxcpu") != cpus || num(p, "maxmem") != 2048<<20 {
				return fmt.Errorf("point %v", p)
			}
			return nil
		})
		eventuallyOK(t, "node rrddata", func() error {
			var pts []map[string]any
			a.OK("GET", "/nodes/node-1/rrddata", url.Values{"timeframe": {"day"}, "cf": {"MAX"}}, &pts)
			if len(pts) != 70 {
				return fmt.Errorf("%d points", len(pts))
			}
			p := pts[68]
			if num(p, "loadavg") != wn.Load1 || num(p, "memtotal") != float64(wn.MemTotal) ||
				num(p, "cpu") != 1-wn.Idle || num(p, "rootused") != float64(wn.RootSize-wn.RootAvail) || num(p, "maxcpu") != float64(wn.Cores) {
				return fmt.Errorf("%d points, point %v", len(pts), p)
			}
			return nil
		})
	})

	t.Run("hanging prometheus: pod metrics, and nobody waits", func(t *testing.T) {
		a := clientAt(t, hangingPromBase)
		sample := kubevirtsim.NewMetrics(env.DirectKube, env.DirectKubeVirt)
		eventuallyOK(t, "VM row from pod metrics", func() error {
			_, guests, err := sample.Sample(context.Background(), nil)
			if err != nil {
				return err
			}
			u := guests[vm.Namespace+"/"+vm.Name]
			var rows []map[string]any
			a.OK("GET", "/cluster/resources", url.Values{"type": {"vm"}}, &rows)
			r := findRow(rows, "qemu", "vmid", float64(vmid))
			if r == nil {
				return fmt.Errorf("vm %s not listed", id)
			}
			wantCPU := math.Floor(u.CPUCores*1000) / 1000 / cpus
			if math.Abs(num(r, "cpu")-wantCPU) > 1e-9 || num(r, "mem") != float64(u.MemBytes) {
				return fmt.Errorf("cpu %v mem %v, want %v %v (metrics.k8s.io)", r["cpu"], r["mem"], wantCPU, u.MemBytes)
			}
			if num(r, "netin") != 0 || num(r, "diskread") != 0 {
				return fmt.Errorf("counters %v %v without a source", r["netin"], r["diskread"])
			}
			return nil
		})
		var pts []map[string]any
		a.OK("GET", "/nodes/"+node+"/qemu/"+id+"/rrddata", url.Values{"timeframe": {"week"}}, &pts)
		a.OK("GET", "/nodes/"+node+"/qemu/"+id+"/rrddata", url.Values{"timeframe": {"week"}}, &pts)
		if len(pts) != 70 || len(pts[69]) != 1 {
			t.Fatalf("rrddata with a hanging Prometheus: %d points: %v", len(pts), pts)
		}
		var ns map[string]any
		a.OK("GET", "/nodes/node-1/status", nil, &ns)
		if l := ns["loadavg"].([]any); l[0] != "0.00" {
			t.Errorf("loadavg %v without an answer from Prometheus", l)
		}
	})

	t.Run("no metrics sources", func(t *testing.T) {
		a := pve(t)
		var rows []map[string]any
		a.OK("GET", "/cluster/resources", nil, &rows)
		r := findRow(rows, "qemu", "vmid", float64(vmid))
		n := findRow(rows, "node", "node", "node-1")
		if r == nil || n == nil || num(r, "netin") != 0 || num(r, "cpu") != 0 || num(n, "mem") != 0 {
			t.Fatalf("usage without a source: vm %v node %v", r, n)
		}
		var pts []map[string]any
		a.OK("GET", "/nodes/node-1/rrddata", url.Values{"timeframe": {"hour"}}, &pts)
		if len(pts) != 70 || len(pts[69]) != 1 {
			t.Fatalf("rrddata without Prometheus: %v", pts[69])
		}
	})
}
