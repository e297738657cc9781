package testutil

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder is a testing.TB that records failures; Fatal ends the calling
// goroutine as testing does, so helpers run under it in their own.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	failed []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = append(r.failed, fmt.Sprintf(format, args...))
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Fatal(args ...any) { r.Fatalf("%s", fmt.Sprint(args...)) }

// run calls f with r as its TB on a goroutine of its own and returns the
// failures.
func (r *recorder) run(f func(testing.TB)) []string {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.failed...)
}

func TestWait(t *testing.T) {
	calls := 0
	got := (&recorder{TB: t}).run(func(tb testing.TB) {
		Wait(tb, time.Second, "the third call", func() (bool, string) {
			calls++
			return calls == 3, fmt.Sprint(calls)
		})
	})
	if len(got) != 0 || calls != 3 {
		t.Fatalf("Wait: failures %q after %d calls", got, calls)
	}
	got = (&recorder{TB: t}).run(func(tb testing.TB) {
		Wait(tb, 50*time.Millisecond, "never", func() (bool, string) { return false, "still not" })
	})
	if len(got) != 1 || !strings.Contains(got[0], "waiting for never; last state: still not") {
		t.Fatalf("Wait on a condition that never holds: %q", got)
	}
}

func TestGoroutineBaselineNamesTheLeak(t *testing.T) {
	stop := make(chan struct{})
	base := GoroutineBaseline()
	go leakUntil(stop)
	got := (&recorder{TB: t}).run(func(tb testing.TB) { base.Check(tb, 100*time.Millisecond) })
	if len(got) != 1 || !strings.Contains(got[0], "leakUntil") {
		t.Fatalf("a running goroutine was not reported: %q", got)
	}
	got = (&recorder{TB: t}).run(func(tb testing.TB) { base.CheckCount(tb, 100*time.Millisecond, 0) })
	if len(got) != 1 || !strings.Contains(got[0], "leakUntil") {
		t.Fatalf("a goroutine over the count was not reported: %q", got)
	}
	close(stop)
	if got = (&recorder{TB: t}).run(func(tb testing.TB) { base.Check(tb, 5*time.Second) }); len(got) != 0 {
		t.Fatalf("after the goroutine ended: %q", got)
	}
}

func leakUntil(stop chan struct{}) { <-stop }

func TestWaitParked(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	got := (&recorder{TB: t}).run(func(tb testing.TB) {
		WaitParked(tb, 50*time.Millisecond, "github.com/caddy-proxmox/caddy-proxmox/internal/testutil.leakUntil")
	})
	if len(got) != 1 {
		t.Fatalf("found a goroutine parked in leakUntil before one ran: %q", got)
	}
	go leakUntil(stop)
	WaitParked(t, 5*time.Second, "github.com/caddy-proxmox/caddy-proxmox/internal/testutil.leakUntil")
}

func TestFreePort(t *testing.T) {
	if p := FreePort(t); p <= 0 || p > 65535 {
		t.Fatalf("port %d", p)
	}
}

// Ports come from below the kernel's ephemeral range, are distinct, can
// be bound, and are locked against other test processes (a second open
// file description's flock conflicts as another process's would).
func TestPortReserved(t *testing.T) {
	seen := map[int]bool{}
	for range 50 {
		p := FreePort(t)
		if p < portFloor || p >= ephemeralLow() {
			t.Fatalf("port %d outside [%d, %d)", p, portFloor, ephemeralLow())
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		if f, ok := lockPort(p); ok {
			f.Close()
			t.Fatalf("port %d not locked against another process", p)
		}
		if !bindable(p) {
			t.Fatalf("port %d handed out but not bindable", p)
		}
	}
}
