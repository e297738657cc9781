package kubevirtsim

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// firstSight remembers when objects were first seen in some state: the
// base of the simulated delays (start, stop, import, snapshot, restore).
type firstSight struct {
	mu sync.Mutex
	at map[types.UID]time.Time
}

// since returns when uid was first seen, recording now on first sight.
func (f *firstSight) since(uid types.UID, now time.Time) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.at == nil {
		f.at = map[types.UID]time.Time{}
	}
	t, ok := f.at[uid]
	if !ok {
		f.at[uid] = now
		t = now
	}
	return t
}

// forget drops uid, so that its next sight starts a new delay.
func (f *firstSight) forget(uid types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.at, uid)
}
