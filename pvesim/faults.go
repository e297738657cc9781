package pvesim

import (
	"fmt"
	"strings"
	"time"
)

// fault is an injected API misbehaviour for requests whose "METHOD
// /path" contains match.
type fault struct {
	match     string
	code      int
	msg       string
	delay     time.Duration
	remaining int // < 0: until cleared
}

// FailAPI makes the next n API calls whose "METHOD /path" contains match
// answer code with msg as reason phrase (n <= 0: every call until
// ClearFaults). Example: FailAPI("GET /cluster/resources", 500, "boom", 3).
func (s *Sim) FailAPI(match string, code int, msg string, n int) {
	if n <= 0 {
		n = -1
	}
	s.mu.Lock()
	s.faults = append(s.faults, &fault{match: match, code: code, msg: msg, remaining: n})
	s.mu.Unlock()
}

// DelayAPI delays every API call whose "METHOD /path" contains match by d
// (or until the client gives up), to simulate timeouts.
func (s *Sim) DelayAPI(match string, d time.Duration) {
	s.mu.Lock()
	s.faults = append(s.faults, &fault{match: match, delay: d, remaining: -1})
	s.mu.Unlock()
}

// FailStarts makes every start task of vmid end with exit status msg
// (e.g. "startup for container '101' failed"); "" heals it.
func (s *Sim) FailStarts(vmid int, msg string) {
	s.withGuest(vmid, func(g *guest) { g.failStart = msg })
}

// SetNeverReady makes a started guest run (status running, address known)
// without its service ever listening.
func (s *Sim) SetNeverReady(vmid int, never bool) {
	s.withGuest(vmid, func(g *guest) { g.neverReady = never })
}

// SetStartDelay sets how long vmid's start tasks run.
func (s *Sim) SetStartDelay(vmid int, d time.Duration) {
	s.withGuest(vmid, func(g *guest) { g.spec.StartDelay = d })
}

// SetBootDelay sets how long vmid takes from the end of its start task
// to listening.
func (s *Sim) SetBootDelay(vmid int, d time.Duration) {
	s.withGuest(vmid, func(g *guest) { g.spec.BootDelay = d })
}

// SetShutdownDelay sets how long a graceful shutdown of vmid takes.
func (s *Sim) SetShutdownDelay(vmid int, d time.Duration) {
	s.withGuest(vmid, func(g *guest) { g.spec.ShutdownDelay = d })
}

// ClearFaults removes API faults and guest faults (failed starts, never
// ready); delays set on guests stay.
func (s *Sim) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
	for _, g := range s.guests {
		g.failStart = ""
		g.neverReady = false
	}
}

func (s *Sim) withGuest(vmid int, f func(*guest)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.guests[vmid]; g != nil {
		f(g)
	} else {
		panic(fmt.Sprintf("pvesim: no guest %d", vmid))
	}
}

// faultFor returns the delay and error fault for a call, consuming one
// use of a counted fault. Called with s.mu held.
func (s *Sim) faultFor(key string) (time.Duration, *fault) {
	var delay time.Duration
	var hit *fault
	kept := s.faults[:0]
	for _, f := range s.faults {
		if strings.Contains(key, f.match) {
			if f.delay > delay {
				delay = f.delay
			}
			if f.code != 0 && hit == nil && f.remaining != 0 {
				hit = f
				if f.remaining > 0 {
					f.remaining--
				}
			}
		}
		if f.remaining != 0 {
			kept = append(kept, f)
		}
	}
	s.faults = kept
	return delay, hit
}
