package prom

import (
	"context"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Key names one rrddata series.
type Key struct {
	// Node selects a node series (Name is the Kubernetes node name);
	// otherwise Namespace and Name are a VMI's.
	Node            bool
	Namespace, Name string
	// Step is the timeframe's resolution in seconds (PVE's: 60 for hour,
	// 1800 for day, ...); CF is AVERAGE or MAX.
	Step int64
	CF   string
}

// Points maps a point's time (unix seconds, a multiple of the step) to its
// fields. A point without a reading is absent, as in PVE's answers.
type Points map[int64]map[string]float64

// Tuning of History; variables so that tests can shrink them.
var (
	// historyIdle drops a series nobody asked for in that long.
	historyIdle = 10 * time.Minute
	// historyMaxKeys bounds the cache; the least recently asked key goes.
	historyMaxKeys = 512
	// historyPerRound bounds the series fetched per interval, so a
	// dashboard opened on every VM at once costs the same per interval
	// as a few: the rest wait for the next rounds.
	historyPerRound = 32
)

// RRDPoints is the number of points of every PVE rrddata timeframe.
const RRDPoints = 70

// History is the rrddata cache. No request waits on Prometheus: Get
// answers from memory and only records that the key is wanted; a
// background loop (Run) fetches wanted keys that are missing or older
// than their refresh age (the step, at least the interval, at most 30
// minutes) with one range query per field, and forgets keys nobody asked
// for in ten minutes. The first request for a key therefore answers the
// PVE-shaped series without values and wakes the loop; the next ones see
// the values. The cost is bounded by the number of keys asked for
// recently (at most historyPerRound fetched per interval), never by the
// request rate.
type History struct {
	c        *Client
	interval time.Duration
	logger   *zap.Logger
	now      func() time.Time

	mu      sync.Mutex
	entries map[Key]*entry
	wake    chan struct{}
	failing bool // only the loop touches it
}

type entry struct {
	asked   time.Time
	fetched time.Time
	points  Points // replaced whole, never modified once stored
}

// NewHistory reads through c, refreshing every interval.
func NewHistory(c *Client, interval time.Duration, logger *zap.Logger) *History {
	if logger == nil {
		logger = zap.NewNop()
	}
	return &History{c: c, interval: interval, logger: logger, now: time.Now, entries: map[Key]*entry{}, wake: make(chan struct{}, 1)}
}

// Get returns the cached points of k (nil when not fetched yet) and marks
// k as wanted. It never blocks on I/O.
func (h *History) Get(k Key) Points {
	now := h.now()
	h.mu.Lock()
	e, ok := h.entries[k]
	if !ok {
		if len(h.entries) >= historyMaxKeys {
			h.evictOldestLocked()
		}
		e = &entry{}
		h.entries[k] = e
	}
	e.asked = now
	pts := e.points
	h.mu.Unlock()
	if !ok {
		select {
		case h.wake <- struct{}{}:
		default:
		}
	}
	return pts
}

func (h *History) evictOldestLocked() {
	var oldest Key
	var at time.Time
	first := true
	for k, e := range h.entries {
		if first || e.asked.Before(at) {
			oldest, at, first = k, e.asked, false
		}
	}
	delete(h.entries, oldest)
}

// refreshAfter is how old a series may get before it is fetched again.
func (h *History) refreshAfter(step int64) time.Duration {
	return max(h.interval, min(time.Duration(step)*time.Second, 30*time.Minute))
}

// Run fetches until ctx ends.
func (h *History) Run(ctx context.Context) {
	t := time.NewTicker(h.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-h.wake:
		}
		h.round(ctx)
	}
}

// due lists the keys to fetch, most recently asked first, and drops the
// idle ones.
func (h *History) due(now time.Time) []Key {
	h.mu.Lock()
	defer h.mu.Unlock()
	var keys []Key
	for k, e := range h.entries {
		if now.Sub(e.asked) > historyIdle {
			delete(h.entries, k)
			continue
		}
		if e.points == nil || now.Sub(e.fetched) >= h.refreshAfter(k.Step) {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return h.entries[keys[i]].asked.After(h.entries[keys[j]].asked) })
	if len(keys) > historyPerRound {
		keys = keys[:historyPerRound]
	}
	return keys
}

// round fetches the due keys one after the other; the first failure ends
// the round, so an unreachable Prometheus costs one query per interval.
func (h *History) round(ctx context.Context) {
	for _, k := range h.due(h.now()) {
		pts, err := h.fetch(ctx, k)
		if err != nil {
			if !h.failing && ctx.Err() == nil {
				h.logger.Info("prometheus history unavailable; rrddata answers without values until it is back", zap.Error(err))
			}
			h.failing = true
			return
		}
		if h.failing {
			h.logger.Info("prometheus history available again")
			h.failing = false
		}
		h.mu.Lock()
		if e, ok := h.entries[k]; ok {
			e.points, e.fetched = pts, h.now()
		}
		h.mu.Unlock()
	}
}

// fetch runs one range query per field of k over the 70 points ending at
// the current step.
func (h *History) fetch(ctx context.Context, k Key) (Points, error) {
	fields, sel := guestHistory, guestSelector(k.Namespace, k.Name)
	if k.Node {
		fields, sel = nodeHistory, nodeSelector(k.Name)
	}
	step := time.Duration(k.Step) * time.Second
	last := h.now().Unix() / k.Step * k.Step
	end := time.Unix(last, 0)
	start := time.Unix(last-(RRDPoints-1)*k.Step, 0)
	pts := Points{}
	for _, f := range fields {
		qctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		series, err := h.c.QueryRange(qctx, historyQuery(f, sel, k.CF, k.Step), start, end, step)
		cancel()
		if err != nil {
			return nil, err
		}
		// The queries aggregate to one series; should a server answer
		// more, the first is taken.
		if len(series) == 0 {
			continue
		}
		for _, p := range series[0].Points {
			m := pts[p.T]
			if m == nil {
				m = map[string]float64{}
				pts[p.T] = m
			}
			m[f.name] = p.V
		}
	}
	return pts, nil
}
