package lxc

import (
	"testing"
	"time"
)

func TestProbeWait(t *testing.T) {
	for _, c := range []struct {
		name              string
		elapsed, interval time.Duration
		want              time.Duration
	}{
		{"right after the guest runs: fast", 0, DefaultProbeInterval, fastProbeInterval},
		{"early on: never under the fast interval", 50 * time.Millisecond, time.Second, fastProbeInterval},
		{"slows with time spent probing", 2 * time.Second, time.Second, 100 * time.Millisecond},
		{"a shorter interval is kept", time.Second, 2 * time.Millisecond, 2 * time.Millisecond},
		{"never over the interval", time.Minute, 3 * time.Second, 3 * time.Second},
	} {
		if got := probeWait(c.elapsed, c.interval); got != c.want {
			t.Errorf("%s: probeWait(%s, %s) = %s, want %s", c.name, c.elapsed, c.interval, got, c.want)
		}
	}
}

// TestProbeCountStaysModest: a guest whose service takes ten seconds to
// answer is not probed thousands of times.
func TestProbeCountStaysModest(t *testing.T) {
	n := 0
	for elapsed := time.Duration(0); elapsed < 10*time.Second; elapsed += probeWait(elapsed, DefaultProbeInterval) {
		n++
	}
	if n > 200 {
		t.Fatalf("%d probes in the first 10s; want at most 200 (probing every 5ms would be 2,000)", n)
	}
}
