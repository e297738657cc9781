// Package testutil holds what the tests of several packages share: waiting
// for a condition, free loopback ports and goroutine baselines. It has no
// dependency beyond the standard library and goleak, so the lightest test
// package can use it.
package testutil

import (
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// PollInterval is how often Wait and WaitFor evaluate their condition.
const PollInterval = 10 * time.Millisecond

// Wait polls cond until it reports done and fails t when that does not
// happen within timeout. cond also describes what it saw; the last
// description is in the failure message.
func Wait(t testing.TB, timeout time.Duration, what string, cond func() (done bool, state string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		done, state := cond()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last state: %s", timeout, what, state)
		}
		time.Sleep(PollInterval)
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

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := Port()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Port returns a loopback TCP port that was free a moment ago.
func Port() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Goroutines is a baseline: the goroutines running when it was taken.
type Goroutines struct {
	current goleak.Option
}

// GoroutineBaseline records the goroutines running now.
func GoroutineBaseline() Goroutines {
	return Goroutines{current: goleak.IgnoreCurrent()}
}

// Leaked waits up to timeout for every goroutine started since the
// baseline to end (except those ignore matches) and returns an error
// naming, with their stacks, the ones still running.
func (g Goroutines) Leaked(timeout time.Duration, ignore ...goleak.Option) error {
	opts := append([]goleak.Option{g.current}, ignore...)
	deadline := time.Now().Add(timeout)
	for {
		// Find itself retries for about half a second.
		err := goleak.Find(opts...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
	}
}

// Check fails t when goroutines started since the baseline (except those
// ignore matches) are still running after timeout.
func (g Goroutines) Check(t testing.TB, timeout time.Duration, ignore ...goleak.Option) {
	t.Helper()
	if err := g.Leaked(timeout, ignore...); err != nil {
		t.Errorf("goroutines still running %s after the work that started them ended: %v", timeout, err)
	}
}

// CheckAtCleanup takes a baseline now and checks it once every cleanup
// registered later (servers, clusters, controllers) has run: call it first
// in a test so that its cleanup runs last.
func CheckAtCleanup(t testing.TB, timeout time.Duration, ignore ...goleak.Option) {
	t.Helper()
	g := GoroutineBaseline()
	t.Cleanup(func() { g.Check(t, timeout, ignore...) })
}
