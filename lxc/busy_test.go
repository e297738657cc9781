package lxc

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseBusyIf(t *testing.T) {
	for _, c := range []struct {
		in   string
		want BusyRule
	}{
		{"cpu > 10%", BusyRule{CPU: 10}},
		{"cpu>10% net>1MB/s disk > 5MB/s for 5m", BusyRule{CPU: 10, Net: 1e6, Disk: 5e6, Window: 5 * time.Minute}},
		{"netin > 1MiB/s netout > 500kB/s for 30s", BusyRule{NetIn: 1 << 20, NetOut: 500e3, Window: 30 * time.Second}},
		{"diskread > 1GB/s diskwrite > 2.5MB/s", BusyRule{DiskRead: 1e9, DiskWrite: 2.5e6}},
		{"CPU > 0.5%", BusyRule{CPU: 0.5}},
	} {
		got, err := ParseBusyIf(c.in)
		if err != nil || got != c.want {
			t.Errorf("%q: %+v %v, want %+v", c.in, got, err, c.want)
			continue
		}
		if _, err := ParseBusyIf(got.String()); err != nil {
			t.Errorf("%q: String() %q does not parse: %v", c.in, got.String(), err)
		}
	}
	for in, want := range map[string]string{
		"":                          "no condition",
		"for 5m":                    "no condition",
		"cpu 10%":                   "want <metric> > <value>",
		"cpu > 10":                  "want a percentage",
		"cpu > -3%":                 "want a percentage",
		"net > 1MB":                 "want a rate",
		"net > fast/s":              "want a rate",
		"net > 0MB/s":               "want a rate",
		"mem > 1GB/s":               "unknown metric",
		"cpu > 10% cpu > 20%":       "given twice",
		"cpu > 10% for":             "comes once, last",
		"cpu > 10% for 5m for 1m":   "comes once, last",
		"cpu > 10% for soon":        "bad window",
		"cpu > 10% for -1m":         "bad window",
		"for 1m cpu > 10%":          "comes once, last",
		"cpu > 10% net > 1MB/s net": "want <metric> > <value>",
	} {
		if _, err := ParseBusyIf(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err %v, want %q", in, err, want)
		}
	}
}

func usageAt(cpu float64, net, disk, uptime uint64) Usage {
	return Usage{CPU: cpu, NetIn: net / 2, NetOut: net - net/2, DiskRead: disk, Uptime: uptime, Known: true}
}

// Rates come from the samples of the window: CPU averaged, counters from
// the last sample at or before the window's start to the newest.
func TestUsageWindowRates(t *testing.T) {
	t0 := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	var w usageWindow
	// pvestatd measures every 10s, the poll runs every 5s: every other
	// poll repeats the counters.
	for i := 0; i <= 24; i++ {
		now := t0.Add(time.Duration(i) * 5 * time.Second)
		step := uint64(i / 2 * 2) // counters as of the last 10s round
		w.add(now, "running", usageAt(0.2, step*5*100_000, step*5*1000, uint64(i*5)), time.Minute)
	}
	now := t0.Add(120 * time.Second)
	r, ok := w.rates(time.Minute, now)
	if !ok || !r.counters || r.Span != time.Minute {
		t.Fatalf("rates %+v %v", r, ok)
	}
	if r.CPU < 19.99 || r.CPU > 20.01 {
		t.Errorf("cpu %v%%, want 20", r.CPU)
	}
	if net := r.NetIn + r.NetOut; net < 99_000 || net > 101_000 {
		t.Errorf("net %v B/s, want 100k", net)
	}
	if r.DiskRead < 990 || r.DiskRead > 1010 {
		t.Errorf("disk %v B/s, want 1k", r.DiskRead)
	}
	// Only the samples the longest window needs are kept (one before it).
	if n := len(w.samples); n != 13 {
		t.Errorf("%d samples kept, want 13", n)
	}
	// A window longer than the history uses what there is.
	if r, _ := w.rates(10*time.Minute, now); r.Span != time.Minute {
		t.Errorf("span %s", r.Span)
	}
}

// A restart (uptime back), a counter reset, a stop or a stale row:
// no rate spans them.
func TestUsageWindowResets(t *testing.T) {
	t0 := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for _, c := range []struct {
		name string
		next Usage
		st   string
		want int // samples after the second add
	}{
		{"counters grow", usageAt(0.1, 2e6, 0, 20), "running", 2},
		{"restarted", usageAt(0.1, 2e6, 0, 5), "running", 1},
		{"counter reset", usageAt(0.1, 10, 0, 20), "running", 1},
		{"stopped", Usage{Known: true}, "stopped", 0},
		{"stale row", Usage{}, "unknown", 1},
	} {
		var w usageWindow
		w.add(at(0), "running", usageAt(0.1, 1e6, 0, 10), time.Minute)
		w.add(at(10), c.st, c.next, time.Minute)
		if len(w.samples) != c.want {
			t.Errorf("%s: %d samples, want %d", c.name, len(w.samples), c.want)
		}
		if r, ok := w.rates(time.Minute, at(10)); ok && (r.NetIn+r.NetOut < 0 || r.NetIn > 1e6) {
			t.Errorf("%s: rate across a reset: %+v", c.name, r)
		}
	}
}

// busy_if on the guest: a busy poll counts as activity (the idle timer
// sees it), a quiet one does not, and the admin API says why.
func TestBusyIfCountsAsActivity(t *testing.T) {
	rule, err := ParseBusyIf("cpu > 10% net > 1MB/s for 20s")
	if err != nil {
		t.Fatal(err)
	}
	g, c := testGuest(t, GuestConfig{IdleTimeout: time.Hour, BusyIf: []BusyRule{rule}})
	t0 := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	row := func(cpu float64, net uint64, up int) Resource {
		return Resource{VMID: 100, Kind: "lxc", Node: "pve1", Name: "web", Status: "running", Usage: usageAt(cpu, net, 0, uint64(up))}
	}
	g.observe(c, row(0.5, 0, 1), nil, t0)
	if g.State() != StateRunning {
		t.Fatalf("state %s", g.State())
	}
	last := func() time.Time { g.mu.Lock(); defer g.mu.Unlock(); return g.lastActivity }
	// CPU 50% of its CPUs: busy at every poll.
	for i := 1; i <= 4; i++ {
		now := t0.Add(time.Duration(i) * 5 * time.Second)
		g.observe(c, row(0.5, 0, 1+5*i), nil, now)
		if !last().Equal(now) {
			t.Fatalf("poll %d: busy guest's last activity %s, want %s", i, last(), now)
		}
	}
	if in := g.Info(); !strings.Contains(in.Busy, "cpu 50% > 10%") || in.Usage == nil || in.Usage.CPU != 50 {
		t.Fatalf("info busy %q usage %+v", in.Busy, in.Usage)
	}
	// Quiet from 25s on: busy while the 20s average is above 10% (the
	// poll at 40s averages 0.5 at 20s with four 0.01), then no more.
	for i := 5; i <= 12; i++ {
		now := t0.Add(time.Duration(i) * 5 * time.Second)
		g.observe(c, row(0.01, 0, 1+5*i), nil, now)
	}
	if want := t0.Add(40 * time.Second); !last().Equal(want) || g.Info().Busy != "" {
		t.Fatalf("quiet guest: last activity %s, want %s; busy %q", last(), want, g.Info().Busy)
	}
	// Network: 2 MB/s counted from the counters, CPU idle.
	base := t0.Add(65 * time.Second)
	for i := 0; i <= 4; i++ {
		now := base.Add(time.Duration(i) * 5 * time.Second)
		g.observe(c, row(0.01, uint64(i)*10e6, 66+5*i), nil, now)
	}
	if !last().Equal(base.Add(20*time.Second)) || !strings.Contains(g.Info().Busy, "net 2.0MB/s > 1.0MB/s") {
		t.Fatalf("network busy: last %s, busy %q", last(), g.Info().Busy)
	}
	b, _ := json.Marshal(g.Info().Usage)
	if !strings.Contains(string(b), `"window":"20s"`) {
		t.Errorf("usage JSON %s", b)
	}
}

// A stream that carries nothing for stream_idle_timeout stops keeping
// the guest up; one with traffic keeps it up, and its last byte counts.
func TestQuietStreamStopsCounting(t *testing.T) {
	g, _ := testGuest(t, GuestConfig{IdleTimeout: time.Hour, StreamIdleTimeout: time.Minute})
	cfg := g.current().cfg
	live, endLive := g.BeginStream()
	quiet, endQuiet := g.BeginStream()
	now := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.inflightKeepsUpLocked(cfg, now, false) {
		t.Fatal("fresh streams do not count")
	}
	quiet.last.Store(now.Add(-2 * time.Minute).UnixNano())
	live.last.Store(now.Add(-30 * time.Second).UnixNano())
	if !g.inflightKeepsUpLocked(cfg, now, false) {
		t.Fatal("a stream with traffic 30s ago does not count")
	}
	live.last.Store(now.Add(-61 * time.Second).UnixNano())
	g.lastActivity = now.Add(-time.Hour)
	if g.inflightKeepsUpLocked(cfg, now, false) {
		t.Fatal("two quiet streams keep the guest up")
	}
	if want := now.Add(-61 * time.Second); !g.lastActivity.Equal(time.Unix(0, want.UnixNano())) {
		t.Fatalf("last activity %s, want the last byte %s", g.lastActivity, want)
	}
	// A plain request in flight still counts.
	g.inflight++
	if !g.inflightKeepsUpLocked(cfg, now, false) {
		t.Fatal("a plain request does not count")
	}
	g.inflight--
	g.mu.Unlock()
	endLive()
	endQuiet()
	g.mu.Lock()
	if g.inflight != 0 || len(g.tracked) != 0 {
		t.Fatalf("inflight %d tracked %d", g.inflight, len(g.tracked))
	}
}

// pre_stop_check: 2xx lets the stop go ahead; another status, a redirect
// or no answer in time is busy; placeholders are filled in.
func TestAskPreStop(t *testing.T) {
	var code atomic.Int32
	var gotPath atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPath.Store(r.URL.Path)
		if r.URL.Path == "/slow" {
			time.Sleep(300 * time.Millisecond)
		}
		if c := int(code.Load()); c == http.StatusFound {
			http.Redirect(w, r, "/elsewhere", c)
			return
		}
		w.WriteHeader(int(code.Load()))
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	ip, port, _ := strings.Cut(host, ":")
	g, _ := testGuest(t, GuestConfig{IdleTimeout: time.Hour, Address: ip, PreStopTimeout: 100 * time.Millisecond})
	g.target = target{node: "pve1", kind: "lxc", vmid: 100}
	g.name = "web"
	cfg := g.current().cfg
	ask := func(url string) string {
		cfg.PreStopCheck = url
		ctx, cancel := contextWithTimeout(cfg.PreStopTimeout)
		defer cancel()
		return g.askPreStop(ctx, cfg)
	}
	code.Store(200)
	if why := ask("http://{guest.address}:" + port + "/idle/{guest.vmid}/{guest.node}/{guest.name}"); why != "" {
		t.Fatalf("2xx: %q", why)
	}
	if p := gotPath.Load(); p != "/idle/100/pve1/web" {
		t.Fatalf("path %v", p)
	}
	code.Store(503)
	if why := ask(srv.URL + "/"); why != "HTTP 503" {
		t.Fatalf("503: %q", why)
	}
	code.Store(http.StatusFound)
	if why := ask(srv.URL + "/"); why != "HTTP 302" {
		t.Fatalf("redirect followed or not busy: %q", why)
	}
	code.Store(200)
	if why := ask(srv.URL + "/slow"); why != "no answer in time" {
		t.Fatalf("timeout: %q", why)
	}
	for _, bad := range []string{"ftp://x/", "/idle", "http://{guest.ip}/", "http://"} {
		if err := validatePreStopURL(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// busy_if lines are typed by people: none may panic, and what parses is
// a valid rule whose String parses again.
func FuzzParseBusyIf(f *testing.F) {
	for _, s := range []string{"cpu > 10% net > 1MB/s disk > 5MB/s for 5m", "cpu>1%", "net > 1,000kB/s", "disk > 1e3MB/s", "cpu > 10% for 1h2m", "netin >> 1B/s", "cpu > 1e308%"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseBusyIf(s)
		if err != nil {
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("%q parsed into an invalid rule: %v", s, err)
		}
		if _, err := ParseBusyIf(r.String()); err != nil {
			t.Fatalf("%q: String() %q does not parse: %v", s, r.String(), err)
		}
	})
}
