package lxc

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"go.uber.org/zap"
)

// Usage is what a /cluster/resources row says a guest uses. PVE's
// pvestatd measures it every 10 seconds and the row carries its last
// measurement: CPU as a fraction of the guest's own CPUs (1 = all of
// them busy), and network and disk byte counters since the guest
// started, which a restart (or a migration, a new QEMU process) resets.
type Usage struct {
	CPU                                float64
	NetIn, NetOut, DiskRead, DiskWrite uint64
	Uptime                             uint64
	// Known is false for a row without RRD data (status "unknown": the
	// node's pvestatd stalled), which says nothing about usage.
	Known bool
}

// usageRow holds a row's usage fields as PVE sends them (numbers, maybe
// as strings); it is embedded in resourceRow.
type usageRow struct {
	CPU       json.Number `json:"cpu"`
	NetIn     json.Number `json:"netin"`
	NetOut    json.Number `json:"netout"`
	DiskRead  json.Number `json:"diskread"`
	DiskWrite json.Number `json:"diskwrite"`
	Uptime    json.Number `json:"uptime"`
}

func (r usageRow) usage() Usage {
	counter := func(n json.Number) uint64 {
		f, err := n.Float64()
		if err != nil || f < 0 || math.IsNaN(f) || f > math.MaxInt64 {
			return 0
		}
		return uint64(f)
	}
	u := Usage{
		NetIn: counter(r.NetIn), NetOut: counter(r.NetOut),
		DiskRead: counter(r.DiskRead), DiskWrite: counter(r.DiskWrite),
		Uptime: counter(r.Uptime),
		Known:  r.Uptime != "" || r.CPU != "",
	}
	if f, err := r.CPU.Float64(); err == nil && f >= 0 && !math.IsInf(f, 0) {
		u.CPU = f
	}
	return u
}

// BusyRule is one busy_if line: the guest is busy while, averaged over
// Window, any of the set conditions holds. Busy counts as activity, so a
// guest busy with work that does not pass through Caddy (a transcode, a
// download, SSH, SMB) is not stopped until idle_timeout after the work.
type BusyRule struct {
	// CPU is a percentage of the guest's CPUs (PVE's cpu × 100, as its
	// GUI shows "10% of 4 CPUs"); 0: no CPU condition.
	CPU float64
	// Net (in + out), NetIn, NetOut, Disk (read + write), DiskRead and
	// DiskWrite are rates in bytes per second; 0: no condition.
	Net, NetIn, NetOut, Disk, DiskRead, DiskWrite float64
	// Window is the averaging period (DefaultBusyWindow).
	Window time.Duration
}

// DefaultBusyWindow is busy_if's averaging period: six pvestatd rounds.
const DefaultBusyWindow = time.Minute

// maxUsageSamples bounds the samples kept per guest (a 5m window at a
// 100ms poll interval would be 3000).
const maxUsageSamples = 4096

func (r BusyRule) window() time.Duration {
	if r.Window > 0 {
		return r.Window
	}
	return DefaultBusyWindow
}

// metrics lists the rule's conditions: name, threshold, unit.
func (r BusyRule) conditions() []busyCond {
	all := []busyCond{
		{"cpu", r.CPU, func(x Rates) float64 { return x.CPU }},
		{"net", r.Net, func(x Rates) float64 { return x.NetIn + x.NetOut }},
		{"netin", r.NetIn, func(x Rates) float64 { return x.NetIn }},
		{"netout", r.NetOut, func(x Rates) float64 { return x.NetOut }},
		{"disk", r.Disk, func(x Rates) float64 { return x.DiskRead + x.DiskWrite }},
		{"diskread", r.DiskRead, func(x Rates) float64 { return x.DiskRead }},
		{"diskwrite", r.DiskWrite, func(x Rates) float64 { return x.DiskWrite }},
	}
	out := all[:0]
	for _, c := range all {
		if c.limit > 0 {
			out = append(out, c)
		}
	}
	return out
}

type busyCond struct {
	name  string
	limit float64
	of    func(Rates) float64
}

func (c busyCond) format(v float64) string {
	if c.name == "cpu" {
		return strconv.FormatFloat(v, 'f', -1, 64) + "%"
	}
	return strings.ReplaceAll(humanize.Bytes(uint64(math.Round(v))), " ", "") + "/s"
}

// String is the rule in busy_if's syntax.
func (r BusyRule) String() string {
	var b strings.Builder
	for _, c := range r.conditions() {
		fmt.Fprintf(&b, "%s > %s ", c.name, c.format(c.limit))
	}
	b.WriteString("for " + r.window().String())
	return b.String()
}

// Validate checks a rule: at least one condition, no negative values.
func (r BusyRule) Validate() error {
	for _, v := range []float64{r.CPU, r.Net, r.NetIn, r.NetOut, r.Disk, r.DiskRead, r.DiskWrite} {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return errors.New("thresholds must be positive numbers")
		}
	}
	if len(r.conditions()) == 0 {
		return errors.New("no condition (want cpu, net, netin, netout, disk, diskread or diskwrite)")
	}
	if r.Window < 0 {
		return errors.New("negative window")
	}
	return nil
}

// exceeded names the first condition the rates exceed ("" if none).
func (r BusyRule) exceeded(x Rates) string {
	for _, c := range r.conditions() {
		if c.name != "cpu" && !x.counters {
			continue
		}
		if v := c.of(x); v > c.limit {
			return fmt.Sprintf("%s %s > %s over %s", c.name, c.format(math.Round(v*10)/10), c.format(c.limit), x.Span.Round(time.Second))
		}
	}
	return ""
}

// ParseBusyIf reads a busy_if line: conditions "<metric> > <value>",
// any of which makes the guest busy, and an optional "for <window>":
//
//	cpu > 10% net > 1MB/s disk > 5MB/s for 5m
//
// Metrics are cpu (a percentage of the guest's CPUs), net, netin, netout,
// disk, diskread and diskwrite (rates: a size per second, 1MB/s = 10^6
// bytes, 1MiB/s = 2^20). Spaces around ">" are optional.
func ParseBusyIf(s string) (BusyRule, error) {
	var r BusyRule
	f := strings.Fields(strings.ReplaceAll(s, ">", " > "))
	seen := map[string]bool{}
	for i := 0; i < len(f); {
		name := strings.ToLower(f[i])
		if name == "for" {
			if i+2 != len(f) || r.Window != 0 {
				return r, fmt.Errorf("busy_if %q: 'for <duration>' comes once, last", s)
			}
			d, err := time.ParseDuration(f[i+1])
			if err != nil || d <= 0 {
				return r, fmt.Errorf("busy_if %q: bad window %q", s, f[i+1])
			}
			r.Window = d
			break
		}
		if i+2 >= len(f) || f[i+1] != ">" {
			return r, fmt.Errorf("busy_if %q: want <metric> > <value> [...] [for <duration>]", s)
		}
		if seen[name] {
			return r, fmt.Errorf("busy_if %q: %s given twice", s, name)
		}
		seen[name] = true
		v, err := parseBusyValue(name, f[i+2])
		if err != nil {
			return r, fmt.Errorf("busy_if %q: %w", s, err)
		}
		switch name {
		case "cpu":
			r.CPU = v
		case "net":
			r.Net = v
		case "netin":
			r.NetIn = v
		case "netout":
			r.NetOut = v
		case "disk":
			r.Disk = v
		case "diskread":
			r.DiskRead = v
		case "diskwrite":
			r.DiskWrite = v
		}
		i += 3
	}
	if err := r.Validate(); err != nil {
		return r, fmt.Errorf("busy_if %q: %w", s, err)
	}
	return r, nil
}

func parseBusyValue(metric, v string) (float64, error) {
	switch metric {
	case "cpu":
		n, ok := strings.CutSuffix(v, "%")
		f, err := strconv.ParseFloat(n, 64)
		if !ok || err != nil || f <= 0 || f > 100*1024 {
			return 0, fmt.Errorf("cpu %q: want a percentage such as 10%%", v)
		}
		return f, nil
	case "net", "netin", "netout", "disk", "diskread", "diskwrite":
		size, ok := strings.CutSuffix(strings.ToLower(v), "/s")
		b, err := humanize.ParseBytes(size)
		if !ok || err != nil || b == 0 {
			return 0, fmt.Errorf("%s %q: want a rate such as 1MB/s", metric, v)
		}
		return float64(b), nil
	}
	return 0, fmt.Errorf("unknown metric %q (want cpu, net, netin, netout, disk, diskread or diskwrite)", metric)
}

// Rates is a guest's usage averaged over a window, from the polls.
type Rates struct {
	// Window is the period asked for; Span the period the samples cover
	// (shorter while the guest has not run that long).
	Window time.Duration `json:"-"`
	Span   time.Duration `json:"-"`
	// CPU is a percentage of the guest's CPUs.
	CPU float64 `json:"cpu_percent"`
	// The rest are bytes per second.
	NetIn     float64 `json:"netin_bytes_per_sec"`
	NetOut    float64 `json:"netout_bytes_per_sec"`
	DiskRead  float64 `json:"diskread_bytes_per_sec"`
	DiskWrite float64 `json:"diskwrite_bytes_per_sec"`
	// counters: the counter rates are known (two samples apart in time).
	counters bool
}

// MarshalJSON writes the periods as Go durations ("1m0s").
func (r Rates) MarshalJSON() ([]byte, error) {
	type plain Rates
	return json.Marshal(struct {
		Window string `json:"window"`
		Span   string `json:"span"`
		plain
	}{r.Window.String(), r.Span.Round(time.Millisecond).String(), plain(r)})
}

type usageSample struct {
	t time.Time
	u Usage
}

// usageWindow is a guest's recent usage samples, oldest first, since
// it last started, and what busy_if made of them.
type usageWindow struct {
	samples []usageSample
	// busy says why the guest counts as busy ("" when it does not).
	busy string
}

// add records a poll's row. A guest that is not running has no window; a
// row without data is skipped; counters that went back (the guest
// restarted or moved, a counter wrapped) start the window anew, since a
// rate across them would be nonsense. keep is the longest window needed.
func (w *usageWindow) add(now time.Time, status string, u Usage, keep time.Duration) {
	if status == "unknown" || !u.Known {
		return
	}
	if status != "running" {
		w.samples = w.samples[:0]
		return
	}
	if n := len(w.samples); n > 0 {
		p := w.samples[n-1].u
		if u.Uptime < p.Uptime || u.NetIn < p.NetIn || u.NetOut < p.NetOut || u.DiskRead < p.DiskRead || u.DiskWrite < p.DiskWrite {
			w.samples = w.samples[:0]
		}
	}
	w.samples = append(w.samples, usageSample{t: now, u: u})
	// Keep one sample at or before the start of the longest window: the
	// base of its rates.
	drop := 0
	for drop+1 < len(w.samples) && !w.samples[drop+1].t.After(now.Add(-keep)) {
		drop++
	}
	drop = max(drop, len(w.samples)-maxUsageSamples)
	if drop > 0 {
		w.samples = append(w.samples[:0], w.samples[drop:]...)
	}
}

// rates averages the samples over window: CPU over the samples inside
// it, counters from the last sample at or before its start (or the
// oldest) to the newest.
func (w *usageWindow) rates(window time.Duration, now time.Time) (Rates, bool) {
	n := len(w.samples)
	if n == 0 {
		return Rates{}, false
	}
	from := now.Add(-window)
	base := 0
	for base+1 < n && !w.samples[base+1].t.After(from) {
		base++
	}
	last := w.samples[n-1]
	r := Rates{Window: window, Span: now.Sub(w.samples[base].t)}
	var cpu float64
	var k int
	for _, s := range w.samples {
		if !s.t.Before(from) || s.t.Equal(last.t) {
			cpu += s.u.CPU
			k++
		}
	}
	r.CPU = cpu / float64(k) * 100
	if dt := last.t.Sub(w.samples[base].t).Seconds(); dt > 0 {
		b := w.samples[base].u
		r.NetIn = float64(last.u.NetIn-b.NetIn) / dt
		r.NetOut = float64(last.u.NetOut-b.NetOut) / dt
		r.DiskRead = float64(last.u.DiskRead-b.DiskRead) / dt
		r.DiskWrite = float64(last.u.DiskWrite-b.DiskWrite) / dt
		r.counters = true
	}
	return r, true
}

// keepUsage is how long back the samples go: the longest busy_if window,
// else the default one (for the admin API's rates).
func (c GuestConfig) keepUsage() time.Duration {
	keep := DefaultBusyWindow
	for _, r := range c.BusyIf {
		keep = max(keep, r.window())
	}
	return keep
}

// busyWhy checks the busy_if rules against the samples: the first one
// exceeded, "" if none is.
func (w *usageWindow) busyWhy(rules []BusyRule, now time.Time) string {
	for _, r := range rules {
		if x, ok := w.rates(r.window(), now); ok {
			if why := r.exceeded(x); why != "" {
				return why
			}
		}
	}
	return ""
}

// sampleUsageLocked records a poll's usage and applies busy_if: a busy
// guest counts as active at this poll. Starting and ending to be busy
// are logged.
func (g *Guest) sampleUsageLocked(res Resource, now time.Time) {
	cfg := g.currentLocked().cfg
	g.usage.add(now, res.Status, res.Usage, cfg.keepUsage())
	why := ""
	if len(cfg.BusyIf) > 0 && (g.state == StateReady || g.state == StateRunning) {
		why = g.usage.busyWhy(cfg.BusyIf, now)
	}
	switch {
	case why != "" && g.usage.busy == "":
		g.logger.Info("guest busy: counting it as active", zap.String("why", why))
	case why == "" && g.usage.busy != "":
		g.logger.Info("guest no longer busy", zap.String("was", g.usage.busy))
	}
	g.usage.busy = why
	if why != "" {
		g.lastActivity = now
	}
}

// validateActivity checks busy_if, pre_stop_check and
// stream_idle_timeout.
func (c GuestConfig) validateActivity() error {
	for _, r := range c.BusyIf {
		if err := r.Validate(); err != nil {
			return fmt.Errorf("busy_if %s: %w", r, err)
		}
	}
	if c.PreStopCheck != "" {
		if err := validatePreStopURL(c.PreStopCheck); err != nil {
			return err
		}
	}
	if c.PreStopTimeout < 0 || c.StreamIdleTimeout < 0 {
		return errors.New("pre_stop_timeout and stream_idle_timeout must not be negative")
	}
	return nil
}

// activityInfoLocked is the admin API's view: why the guest is busy, and
// its usage over the first busy_if window.
func (g *Guest) activityInfoLocked(cfg GuestConfig, now time.Time) (string, *Rates) {
	var why []string
	if g.usage.busy != "" {
		why = append(why, g.usage.busy)
	}
	if g.preStop.why != "" && cfg.PreStopCheck != "" {
		why = append(why, "pre_stop_check: "+g.preStop.why)
	}
	window := DefaultBusyWindow
	if len(cfg.BusyIf) > 0 {
		window = cfg.BusyIf[0].window()
	}
	var rates *Rates
	if x, ok := g.usage.rates(window, now); ok {
		rates = &x
	}
	return strings.Join(why, "; "), rates
}
