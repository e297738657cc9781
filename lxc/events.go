package lxc

import (
	"sync"
	"time"
)

// Event is one step of a wake, for the loading page's live progress.
type Event struct {
	Time time.Time `json:"time"`
	// Phase is one of: starting, waking_node, node_online (a powered-off
	// node woken first), waiting_stop, waking_dep, waiting (a config lock,
	// or HA at work), start_task, task_ok, running, address, probing,
	// settling, ready, error.
	Phase string `json:"phase"`
	// Message is fit for anyone who can reach the site; Detail, when set,
	// names nodes, addresses and the cluster's error text (show_details).
	Message string `json:"message"`
	Detail  string `json:"detail,omitempty"`
	// Progress is a rough percentage for a progress bar.
	Progress int `json:"progress"`
	// Final marks ready and error, after which the stream ends.
	Final bool `json:"final,omitempty"`
	// RetryAfter, on errors, is how long until a new wake may be tried.
	RetryAfter time.Duration `json:"-"`
	// Update marks a step that replaces the one before it when that has
	// the same phase (the count of readiness checks): the history keeps
	// the latest, and the loading page updates its line.
	Update bool `json:"update,omitempty"`
}

// progress is a broadcast of the events of the current wake, replayed to
// late subscribers. A new wake clears the history.
type progress struct {
	mu   sync.Mutex
	hist []Event
	subs map[chan Event]struct{}
}

// maxHistory bounds the replay buffer (the probing steps, one per
// readiness check, take a single place).
const maxHistory = 64

func (p *progress) reset() {
	p.mu.Lock()
	p.hist = p.hist[:0]
	p.mu.Unlock()
}

func (p *progress) emit(e Event) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch n := len(p.hist); {
	case e.Update && n > 0 && p.hist[n-1].Phase == e.Phase:
		p.hist[n-1] = e
	case n < maxHistory || e.Final:
		p.hist = append(p.hist, e)
	}
	for ch := range p.subs {
		select {
		case ch <- e:
		default:
			// A slow subscriber misses intermediate steps; the final
			// event is what matters (the page reloads on it), so it
			// takes the place of the oldest one waiting.
			if e.Final {
				select {
				case <-ch:
				default:
				}
				select {
				case ch <- e:
				default:
				}
			}
		}
	}
}

// subscribe returns the history so far and a channel of later events.
func (p *progress) subscribe() ([]Event, chan Event, func()) {
	ch := make(chan Event, 32)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.subs == nil {
		p.subs = map[chan Event]struct{}{}
	}
	p.subs[ch] = struct{}{}
	hist := append([]Event(nil), p.hist...)
	return hist, ch, func() {
		p.mu.Lock()
		delete(p.subs, ch)
		p.mu.Unlock()
	}
}
