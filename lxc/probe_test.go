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
		{"within the window: fast", fastProbeWindow - time.Millisecond, time.Second, fastProbeInterval},
		{"a shorter interval is kept", time.Second, 2 * time.Millisecond, 2 * time.Millisecond},
		{"after the window: the interval", fastProbeWindow, DefaultProbeInterval, DefaultProbeInterval},
		{"long after: the interval", time.Minute, 3 * time.Second, 3 * time.Second},
	} {
		if got := probeWait(c.elapsed, c.interval); got != c.want {
			t.Errorf("%s: probeWait(%s, %s) = %s, want %s", c.name, c.elapsed, c.interval, got, c.want)
		}
	}
}
