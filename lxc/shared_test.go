package lxc

import (
	"context"
	"encoding/json"
	"github.com/caddy-proxmox/caddy-proxmox/internal/testutil"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
)

// countingStorage counts writes.
type countingStorage struct {
	*certmagic.FileStorage
	mu     sync.Mutex
	stores int
	last   []byte
}

func (s *countingStorage) Store(ctx context.Context, key string, value []byte) error {
	s.mu.Lock()
	s.stores++
	s.last = value
	s.mu.Unlock()
	return s.FileStorage.Store(ctx, key, value)
}

func (s *countingStorage) count() (int, activityRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var rec activityRecord
	_ = json.Unmarshal(s.last, &rec)
	return s.stores, rec
}

func sharedGuest(t *testing.T, interval time.Duration) (*Guest, *countingStorage, *Share) {
	t.Helper()
	g, c := testGuest(t, GuestConfig{IdleTimeout: time.Second})
	g.target = target{node: "pve1", kind: "lxc", vmid: 100}
	st := &countingStorage{FileStorage: &certmagic.FileStorage{Path: t.TempDir()}}
	sh := &Share{Storage: st, Interval: interval}
	c.SetShare(sh)
	// Before the temporary directory goes: no write may outlive the guest.
	t.Cleanup(func() { _ = g.Destruct() })
	return g, st, sh
}

// Activity is written at most once per interval, whatever the number of
// requests: the first at once, the rest folded into one write when the
// interval is over; while a request stays open, once per interval.
func TestShareActivityBounded(t *testing.T) {
	g, st, _ := sharedGuest(t, 300*time.Millisecond)
	var last time.Time
	for i := 0; i < 500; i++ {
		end := g.Begin(false)
		end()
	}
	g.mu.Lock()
	last = g.lastActivity
	g.mu.Unlock()
	// The last request's activity gets written: by the first write if it
	// came after them all, else by the one at the end of the interval.
	testutil.WaitFor(t, 2*time.Second, "the last activity written", func() bool {
		_, rec := st.count()
		return rec.LastActivity.Equal(last)
	})
	if n, rec := st.count(); n > 2 || rec.Instance != instanceID || rec.Busy {
		t.Fatalf("%d writes for 500 requests (want at most 2), last %+v", n, rec)
	}
	// A stream open for three intervals: written as busy every interval.
	before, _ := st.count()
	end := g.Begin(true)
	testutil.WaitFor(t, 3*time.Second, "three busy writes", func() bool { n, rec := st.count(); return n >= before+3 && rec.Busy })
	end()
	testutil.WaitFor(t, 2*time.Second, "an idle write", func() bool { _, rec := st.count(); return !rec.Busy })
}

// An idle stop waits for another instance's recent activity (plus one
// interval, the records' lag) and goes ahead once it is old enough;
// records older than a day are deleted by whoever reads them.
func TestClaimStopDefersToPeer(t *testing.T) {
	g, st, sh := sharedGuest(t, 200*time.Millisecond)
	ctx := context.Background()
	put := func(who string, at time.Time) {
		data, _ := json.Marshal(activityRecord{Instance: who, LastActivity: at})
		if err := st.FileStorage.Store(ctx, shareKey(g.clusterName, 100, "activity", who), data); err != nil {
			t.Fatal(err)
		}
	}
	b := g.current()
	// Nobody else: the stop goes ahead, under the lock.
	release, wait := g.claimStop(ctx, b, g.target, "idle")
	if wait != 0 {
		t.Fatalf("no peer, yet deferred %s", wait)
	}
	if ok, _ := st.TryLock(ctx, shareKey(g.clusterName, 100, "power")); ok {
		t.Fatal("stop does not hold the power lock")
	}
	release()
	put("peer-a", time.Now().Add(-300*time.Millisecond))
	put("gone", time.Now().Add(-25*time.Hour))
	release, wait = g.claimStop(ctx, b, g.target, "idle")
	release()
	// idle 1s + interval 200ms after 300ms ago: about 900ms.
	if wait < 700*time.Millisecond || wait > 1200*time.Millisecond {
		t.Fatalf("deferred %s, want about 900ms", wait)
	}
	if _, err := st.Load(ctx, shareKey(g.clusterName, 100, "activity", "gone")); err == nil {
		t.Fatal("day-old record kept")
	}
	// An admin sleep does not wait for peers.
	release, wait = g.claimStop(ctx, b, g.target, "admin")
	release()
	if wait != 0 {
		t.Fatalf("admin sleep deferred %s", wait)
	}
	put("peer-a", time.Now().Add(-1300*time.Millisecond))
	release, wait = g.claimStop(ctx, b, g.target, "idle")
	release()
	if wait != 0 {
		t.Fatalf("peer idle for idle_timeout+interval, yet deferred %s", wait)
	}
	_ = sh
}
