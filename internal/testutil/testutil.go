// Package testutil holds what the tests of several packages share: waiting
// for a condition, free loopback ports and goroutine baselines. It has no
// dependency beyond the standard library and goleak, so the lightest test
// package can use it.
package testutil

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The waits poll every 5 ms at first and a quarter less often each time
// after, up to every 100 ms: quick when the condition is near, cheap when
// it is far (a check may be an HTTP request).
const (
	firstPoll = 5 * time.Millisecond
	maxPoll   = 100 * time.Millisecond
)

// Wait polls cond until it reports done and fails t when that does not
// happen within timeout. cond also describes what it saw; the last
// description is in the failure message.
func Wait(t testing.TB, timeout time.Duration, what string, cond func() (done bool, state string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for interval := firstPoll; ; interval = min(interval*5/4, maxPoll) {
		done, state := cond()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last state: %s", timeout, what, state)
		}
		time.Sleep(interval)
	}
}

// WaitFor is Wait for a condition with no state to describe.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	Wait(t, timeout, what, func() (bool, string) { return cond(), "not yet" })
}

// WaitNoError is Wait for a check that explains itself with an error: it
// polls check until it returns nil; the last error is the failure message.
func WaitNoError(t testing.TB, timeout time.Duration, what string, check func() error) {
	t.Helper()
	Wait(t, timeout, what, func() (bool, string) {
		err := check()
		if err == nil {
			return true, ""
		}
		return false, err.Error()
	})
}

// WaitParked waits until some goroutine is blocked (on a channel, a
// select, a lock...) inside function fn, given with its package path as in
// a stack trace ("example.com/pkg.(*T).method"). Tests use it to know that
// a call is waiting before they release it, instead of sleeping.
func WaitParked(t testing.TB, timeout time.Duration, fn string) {
	t.Helper()
	WaitFor(t, timeout, "a goroutine blocked in "+fn, func() bool { return parkedIn(fn) })
}

func parkedIn(fn string) bool {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	for _, g := range strings.Split(string(buf), "\n\n") {
		header, frames, _ := strings.Cut(g, "\n")
		// "goroutine 7 [chan receive]:"; running ones are not parked.
		if strings.Contains(header, "[running]") || strings.Contains(header, "[runnable]") {
			continue
		}
		for _, line := range strings.Split(frames, "\n") {
			if strings.HasPrefix(line, fn+"(") {
				return true
			}
		}
	}
	return false
}

// Goroutines is a baseline: the goroutines running when it was taken.
type Goroutines struct {
	current goleak.Option
	count   int
}

// GoroutineBaseline records the goroutines running now.
func GoroutineBaseline() Goroutines {
	return Goroutines{current: goleak.IgnoreCurrent(), count: runtime.NumGoroutine()}
}

// SettledGoroutineBaseline waits until the number of goroutines has not
// fallen for a second (at most 10 s), so that the goroutines of work that
// just ended are not counted, and then records the goroutines running.
func SettledGoroutineBaseline() Goroutines {
	low, since := runtime.NumGoroutine(), time.Now()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && time.Since(since) < time.Second; {
		time.Sleep(100 * time.Millisecond)
		if n := runtime.NumGoroutine(); n < low {
			low, since = n, time.Now()
		}
	}
	return GoroutineBaseline()
}

// Count is the number of goroutines the baseline saw.
func (g Goroutines) Count() int { return g.count }

// Check fails t when goroutines started since the baseline are still
// running after timeout; the failure names them, with their stacks.
func (g Goroutines) Check(t testing.TB, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		// Find itself retries for about half a second.
		err := goleak.Find(g.current)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("goroutines still running %s after the work that started them ended: %v", timeout, err)
			return
		}
	}
}

// CheckCount fails t when, after timeout, more than slack goroutines run
// beyond the baseline's count. It is for work that legitimately replaces
// goroutines, where Check would report the replacements: informers whose
// watches reconnect after an outage run new goroutines in place of the
// old ones. The failure lists the goroutines started since the baseline.
func (g Goroutines) CheckCount(t testing.TB, timeout time.Duration, slack int) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		n := runtime.NumGoroutine()
		if n <= g.count+slack {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%d goroutines %s after the work that started them ended, %d at the baseline (slack %d); started since: %v",
				n, timeout, g.count, slack, goleak.Find(g.current))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// CheckAtCleanup takes a baseline now and checks it once every cleanup
// registered later (servers, clusters, controllers) has run: call it first
// in a test so that its cleanup runs last.
func CheckAtCleanup(t testing.TB, timeout time.Duration) {
	t.Helper()
	g := GoroutineBaseline()
	t.Cleanup(func() { g.Check(t, timeout) })
}
