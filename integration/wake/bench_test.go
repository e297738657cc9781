package wake

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/internal/benchload"
	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
	"github.com/caddy-proxmox/caddy-proxmox/lxc"
	"github.com/caddy-proxmox/caddy-proxmox/pvesim"
)

// BenchmarkWakeTable measures, in one run, the three goals of the wake
// feature and prints them as a table (bench/wake.sh runs it):
//
//  1. throughput of proxmox_wake + reverse_proxy on an awake guest next
//     to plain reverse_proxy to the same backend, alternating and side by
//     side (goal >= 0.97x both ways);
//  2. time from the guest's service listening to the first proxied byte
//     of a held request on a cold start (goal <= 25ms median), with the
//     default probe_interval;
//  3. PVE API calls per minute with 100 idle guests (goal: one
//     /cluster/resources poll per interval per cluster).
func BenchmarkWakeTable(b *testing.B) {
	conc := 32
	dur := 3 * time.Second
	if v := os.Getenv("WAKE_BENCH_DURATION"); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			dur = d
		}
	}
	for i := 0; i < b.N; i++ {
		plain, wake, ratio, mixPlain, mixWake := benchThroughput(b, conc, dur)
		cold := benchColdStart(b, 10)
		perMin, byPath, interval := benchIdleCalls(b)

		mixRatio := mixWake / mixPlain
		sort.Slice(cold, func(i, j int) bool { return cold[i] < cold[j] })
		med, worst := cold[len(cold)/2], cold[len(cold)-1]
		expected := float64(time.Minute / interval)
		fmt.Printf("\nproxmox_wake benchmark (GOMAXPROCS=%d, %d connections; alternating: %s per side in quarter-second rounds; side by side: 2 runs of %s)\n", runtimeProcs(), conc, 2*dur, dur)
		fmt.Printf("%-58s %16s %12s %6s\n", "measure", "value", "goal", "ok")
		row := func(name, val, goal string, ok bool) {
			mark := "yes"
			if !ok {
				mark = "NO"
			}
			fmt.Printf("%-58s %16s %12s %6s\n", name, val, goal, mark)
		}
		row("plain reverse_proxy (req/s)", fmt.Sprintf("%.0f", plain), "", true)
		row("proxmox_wake + reverse_proxy, awake guest (req/s)", fmt.Sprintf("%.0f", wake), "", true)
		row("  ratio wake / plain (alternating rounds, median)", fmt.Sprintf("%.3f", ratio), ">= 0.97", ratio >= 0.97)
		row("side by side, half the connections each: plain (req/s)", fmt.Sprintf("%.0f", mixPlain), "", true)
		row("side by side: proxmox_wake + reverse_proxy (req/s)", fmt.Sprintf("%.0f", mixWake), "", true)
		row("  ratio wake / plain (side by side)", fmt.Sprintf("%.3f", mixRatio), ">= 0.97", mixRatio >= 0.97)
		row(fmt.Sprintf("readiness -> first proxied byte, median of %d", len(cold)), med.Round(100*time.Microsecond).String(), "<= 25ms", med <= 25*time.Millisecond)
		row("readiness -> first proxied byte, worst", worst.Round(100*time.Microsecond).String(), "", true)
		row(fmt.Sprintf("PVE API calls/min, 100 idle guests, poll %s", interval), fmt.Sprintf("%.1f", perMin), fmt.Sprintf("%.0f", expected), perMin <= expected*1.05)
		fmt.Printf("  calls by path: %s\n\n", byPath)
		b.ReportMetric(ratio, "wake/plain")
		b.ReportMetric(mixRatio, "wake/plain-side-by-side")
		b.ReportMetric(float64(med.Microseconds())/1000, "ms-ready-to-byte")
		b.ReportMetric(perMin, "api-calls/min")
	}
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }

// benchThroughput returns req/s of plain reverse_proxy and of
// proxmox_wake + reverse_proxy on an awake guest, loaded two ways: in
// alternating rounds (benchload; the ratio is the median over pairs of
// rounds) and side by side, half the connections each at the same
// moment.
func benchThroughput(b *testing.B, conc int, dur time.Duration) (plain, wake, ratio, mixPlain, mixWake float64) {
	e := newEnv(b, pvesim.GuestSpec{VMID: 100, Name: "web"})
	plainSite := fmt.Sprintf("http://plain.test:%d {\n\tbind 127.0.0.1\n\treverse_proxy %s\n}\n", e.port, e.sim.Addr(100))
	e.start(e.site("wake.test", "100", "idle_timeout 10m", ""), plainSite)
	if a := e.get("/", "Host: wake.test"); a.code != 200 {
		b.Fatalf("wake: %d %s", a.code, a.body)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: conc, MaxConnsPerHost: conc, DisableCompression: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	// load runs conc connections for dur, spread over hosts, and
	// returns req/s per host.
	load := func(hosts ...string) []float64 {
		counts := make([]atomic.Int64, len(hosts))
		stop := time.Now().Add(dur)
		var wg sync.WaitGroup
		for i := 0; i < conc; i++ {
			wg.Add(1)
			host, n := hosts[i%len(hosts)], &counts[i%len(hosts)]
			go func() {
				defer wg.Done()
				for time.Now().Before(stop) {
					req, _ := http.NewRequest("GET", e.base+"/bench", nil)
					req.Host = host
					res, err := c.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if res.StatusCode != 200 {
						b.Errorf("%s: %d", host, res.StatusCode)
						return
					}
					n.Add(1)
				}
			}()
		}
		wg.Wait()
		out := make([]float64, len(hosts))
		for i := range counts {
			out[i] = float64(counts[i].Load()) / dur.Seconds()
		}
		return out
	}
	load("plain.test", "wake.test") // warm-up of connections and caches
	// Alternating rounds of a quarter second, 2×dur per side in all.
	const round = 250 * time.Millisecond
	res, err := benchload.Alternate(c, conc, max(4, int(2*dur/round)), round,
		benchload.Target{URL: e.base + "/bench", Host: "plain.test"},
		benchload.Target{URL: e.base + "/bench", Host: "wake.test"})
	if err != nil {
		b.Fatal(err)
	}
	plain, wake, ratio = res[0].PerSec, res[1].PerSec, benchload.Ratio(res[1], res[0])
	// Side by side: half the connections each, same moment, same noise.
	for round := 0; round < 2; round++ {
		r := load("plain.test", "wake.test")
		mixPlain += r[0] / 2
		mixWake += r[1] / 2
	}
	return plain, wake, ratio, mixPlain, mixWake
}

// benchColdStart measures, for n cold starts, the time from the guest's
// service beginning to listen to the first byte of a held request.
func benchColdStart(b *testing.B, n int) []time.Duration {
	e := newEnv(b, pvesim.GuestSpec{VMID: 100, BootDelay: 300 * time.Millisecond})
	// Defaults for probe_interval and task_poll_interval.
	site := fmt.Sprintf("http://127.0.0.1:%d {\n\tbind 127.0.0.1\n\tproxmox_wake %s/100 {\n\t\tport %d\n\t\tidle_timeout 10m\n\t}\n\treverse_proxy {\n\t\tdynamic proxmox\n\t}\n}\n", e.port, e.cluster, e.guestPort)
	e.start(site)
	var out []time.Duration
	for i := 0; i < n; i++ {
		g := lxc.FindGuest(e.cluster, "100")
		if i > 0 {
			_ = e.sim.StopGuest(100)
		}
		waitFor(b, 5*time.Second, "guest known stopped", func() bool {
			g = lxc.FindGuest(e.cluster, "100")
			return g != nil && g.State() == lxc.StateStopped
		})
		var first time.Time
		trace := &httptrace.ClientTrace{GotFirstResponseByte: func() { first = time.Now() }}
		req, _ := http.NewRequest("GET", e.base+"/cold", nil)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
		res, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || res.Header.Get("X-Proxmox-Wake") != "cold" {
			b.Fatalf("cold start %d: %d", i, res.StatusCode)
		}
		out = append(out, first.Sub(e.sim.ServingSince(100)))
	}
	return out
}

// benchIdleCalls counts API calls for 100 idle guests over 10 poll
// intervals and extrapolates to a minute.
func benchIdleCalls(b *testing.B) (float64, string, time.Duration) {
	const interval = time.Second
	var specs []pvesim.GuestSpec
	for i := 0; i < 100; i++ {
		specs = append(specs, pvesim.GuestSpec{VMID: 1000 + i})
	}
	e := newEnv(b, specs...)
	var sites []string
	for i := 0; i < 100; i++ {
		sites = append(sites, e.site(fmt.Sprintf("g%d.test", i), fmt.Sprint(1000+i), "", ""))
	}
	cfg := strings.Replace(e.globals(""), "poll_interval 100ms", "poll_interval "+interval.String(), 1) + strings.Join(sites, "\n")
	testcaddy.Start(b, cfg)
	time.Sleep(interval + 200*time.Millisecond)
	e.sim.ResetCalls()
	window := 10 * interval
	time.Sleep(window)
	counts := e.sim.CallCounts()
	total := 0
	var parts []string
	for k, v := range counts {
		total += v
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(parts)
	return float64(total) * float64(time.Minute) / float64(window), strings.Join(parts, " "), interval
}
