package lxc

import (
	"fmt"
	"testing"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testutil"
)

// The next opening of a window, in the config's time zone, across days,
// weekdays and a DST change.
func TestNextWarmStart(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Skip("no tzdata:", err)
	}
	w := func(s string) Window {
		x, err := ParseWindow(s)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	cfg := GuestConfig{KeepWarm: []Window{w("Mon-Fri 08:00-18:00"), w("Sat 10:00-12:00")}, TimeZone: paris}
	// Friday 2026-03-27 19:00 Paris: next is Saturday 10:00.
	at := time.Date(2026, 3, 27, 19, 0, 0, 0, paris)
	if got := cfg.nextWarmStart(at); !got.Equal(time.Date(2026, 3, 28, 10, 0, 0, 0, paris)) {
		t.Fatalf("after Fri 19:00: %v", got)
	}
	// Saturday 11:00: Monday 08:00, across the DST change of Sunday
	// 2026-03-29 (UTC+1 to UTC+2): 06:00 UTC.
	got := cfg.nextWarmStart(time.Date(2026, 3, 28, 11, 0, 0, 0, paris))
	if !got.Equal(time.Date(2026, 3, 30, 6, 0, 0, 0, time.UTC)) {
		t.Fatalf("after Sat 11:00: %v", got.UTC())
	}
	// The same instant read in UTC or Paris: the zone decides.
	inst := time.Date(2026, 3, 30, 6, 30, 0, 0, time.UTC) // 08:30 in Paris
	if !cfg.inKeepWarm(inst) {
		t.Fatal("08:30 Paris outside Mon-Fri 08:00-18:00")
	}
	cfg.TimeZone = time.UTC
	if cfg.inKeepWarm(inst) {
		t.Fatal("06:30 UTC inside 08:00-18:00")
	}
	if (GuestConfig{}).nextWarmStart(inst) != (time.Time{}) {
		t.Fatal("no windows, yet a start")
	}
}

// When a window opens, the guest is woken (here its cluster is down, so
// the wake fails at once: the failure is the sign it ran).
func TestKeepWarmStartsAtWindowOpening(t *testing.T) {
	// A clock 300ms before the next full minute.
	real := time.Now()
	next := real.Truncate(time.Minute).Add(time.Minute)
	off := next.Sub(real) - 300*time.Millisecond
	warmClock = func() time.Time { return time.Now().Add(off) }
	t.Cleanup(func() { warmClock = time.Now })
	loc := time.FixedZone("test", 0)
	open := next.In(loc)
	win, err := ParseWindow(fmt.Sprintf("%02d:%02d-%02d:%02d", open.Hour(), open.Minute(), open.Add(10*time.Minute).Hour(), open.Add(10*time.Minute).Minute()))
	if err != nil {
		t.Fatal(err)
	}
	g, _ := testGuest(t, GuestConfig{KeepWarm: []Window{win}, TimeZone: loc})
	g.ScheduleKeepWarm()
	g.mu.Lock()
	waking, armed := g.wake != nil || g.state == StateFailed, g.warmTimer != nil
	g.mu.Unlock()
	if waking || !armed {
		t.Fatalf("before the window: waking %v, armed %v", waking, armed)
	}
	testutil.WaitFor(t, 3*time.Second, "the failed keep-warm start", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.state == StateFailed && g.lastErr != ""
	})
	g.mu.Lock()
	rearmed := g.warmTimer != nil
	g.mu.Unlock()
	if !rearmed {
		t.Fatal("not armed for the next opening")
	}
}
