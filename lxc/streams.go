package lxc

import (
	"sync/atomic"
	"time"
)

// StreamActivity is the traffic of one open stream (a websocket, an
// event stream) whose silence is bounded by stream_idle_timeout: the
// handler calls Touch whenever bytes pass, either way.
type StreamActivity struct {
	last atomic.Int64 // unix nanoseconds of the last byte
}

// Touch records traffic now.
func (s *StreamActivity) Touch() { s.last.Store(time.Now().UnixNano()) }

func (s *StreamActivity) lastTraffic() time.Time { return time.Unix(0, s.last.Load()) }

// BeginStream is Begin for a stream whose traffic is watched. While it
// carries bytes it keeps the guest up like any request in flight; once it
// has carried nothing for stream_idle_timeout it no longer does (a
// forgotten tab must not keep a guest up forever), and the guest idles
// out idle_timeout after its last byte. Call end when it closes.
func (g *Guest) BeginStream() (s *StreamActivity, end func()) {
	s = &StreamActivity{}
	s.Touch()
	done := g.Begin(true)
	g.mu.Lock()
	if g.tracked == nil {
		g.tracked = map[*StreamActivity]struct{}{}
	}
	g.tracked[s] = struct{}{}
	if sit := g.currentLocked().cfg.StreamIdleTimeout; sit > 0 {
		// Some check must come when the stream could go quiet.
		g.armIdleLocked(sit)
	}
	g.mu.Unlock()
	return s, func() {
		g.mu.Lock()
		delete(g.tracked, s)
		g.foldStreamLocked(s)
		g.mu.Unlock()
		done()
	}
}

// foldStreamLocked counts a stream's last byte as activity.
func (g *Guest) foldStreamLocked(s *StreamActivity) {
	if t := s.lastTraffic(); t.After(g.lastActivity) {
		g.lastActivity = t
	}
}

// inflightKeepsUpLocked reports whether the requests in flight keep the
// guest from idling out: any request that is not a watched stream, or a
// watched stream with traffic within stream_idle_timeout. Streams' last
// bytes are folded into the last activity. When only watched streams are
// in flight, a check is armed for the moment the first live one could go
// quiet (nothing else would come: a quiet stream ends no request).
func (g *Guest) inflightKeepsUpLocked(cfg GuestConfig, now time.Time, arm bool) bool {
	if g.inflight == 0 {
		return false
	}
	for s := range g.tracked {
		g.foldStreamLocked(s)
	}
	sit := cfg.StreamIdleTimeout
	if sit <= 0 || g.inflight > len(g.tracked) {
		return true
	}
	var quietAt time.Time
	for s := range g.tracked {
		if q := s.lastTraffic().Add(sit); q.After(now) && (quietAt.IsZero() || q.Before(quietAt)) {
			quietAt = q
		}
	}
	if quietAt.IsZero() {
		return false
	}
	if arm {
		g.armIdleLocked(max(quietAt.Sub(now), time.Millisecond))
	}
	return true
}
