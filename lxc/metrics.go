package lxc

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// collectors are process-wide so that counters survive config reloads;
// each config's registry gets them registered again.
type collectors struct {
	wakeDuration *prometheus.HistogramVec
	wakeFailures *prometheus.CounterVec
	stops        *prometheus.CounterVec
	stopFailures *prometheus.CounterVec
	held         *prometheus.GaugeVec
	polls        *prometheus.CounterVec
	live         *liveCollector
}

var metrics = newCollectors()

func newCollectors() *collectors {
	const ns, sub = "caddy", "proxmox"
	return &collectors{
		wakeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "wake_duration_seconds",
			Help:    "Time from the start of a wake to the guest being ready (or the wake failing).",
			Buckets: []float64{0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300},
		}, []string{"cluster", "guest", "result"}),
		wakeFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "wake_failures_total",
			Help: "Wakes that failed or timed out.",
		}, []string{"cluster", "guest"}),
		stops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "stops_total",
			Help: "Guests put to sleep, by reason (idle, admin).",
		}, []string{"cluster", "guest", "reason"}),
		stopFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "stop_failures_total",
			Help: "Stops that failed.",
		}, []string{"cluster", "guest"}),
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "held_requests",
			Help: "Requests waiting for a guest to become ready.",
		}, []string{"cluster", "guest"}),
		polls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "cluster_polls_total",
			Help: "Cluster-wide /cluster/resources polls, by result.",
		}, []string{"cluster", "result"}),
		live: &liveCollector{
			state: prometheus.NewDesc("caddy_proxmox_guest_state", "1 for the guest's current state.", []string{"cluster", "guest", "state"}, nil),
			inflight: prometheus.NewDesc("caddy_proxmox_inflight_requests", "Requests (streams included) in flight to the guest.",
				[]string{"cluster", "guest"}, nil),
			sleepIn: prometheus.NewDesc("caddy_proxmox_sleep_in_seconds", "Time until the guest is stopped for idleness.",
				[]string{"cluster", "guest"}, nil),
		},
	}
}

// liveCollector reports per-guest gauges read at scrape time.
type liveCollector struct {
	state, inflight, sleepIn *prometheus.Desc
}

func (l *liveCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- l.state
	ch <- l.inflight
	ch <- l.sleepIn
}

func (l *liveCollector) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	for _, g := range Guests() {
		g.mu.Lock()
		st, inflight := g.state, g.inflight
		sleepIn, hasSleep := g.sleepInLocked(now)
		g.mu.Unlock()
		for _, s := range States {
			v := 0.0
			if s == st {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(l.state, prometheus.GaugeValue, v, g.clusterName, g.ref, string(s))
		}
		ch <- prometheus.MustNewConstMetric(l.inflight, prometheus.GaugeValue, float64(inflight), g.clusterName, g.ref)
		if hasSleep {
			ch <- prometheus.MustNewConstMetric(l.sleepIn, prometheus.GaugeValue, sleepIn, g.clusterName, g.ref)
		}
	}
}

// RegisterMetrics registers the wake metrics on a Caddy config's registry
// (ctx.GetMetricsRegistry()). Registering twice is harmless.
func RegisterMetrics(reg *prometheus.Registry) error {
	if reg == nil {
		return nil
	}
	for _, c := range []prometheus.Collector{metrics.wakeDuration, metrics.wakeFailures, metrics.stops,
		metrics.stopFailures, metrics.held, metrics.polls, metrics.live} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return err
			}
		}
	}
	return nil
}
