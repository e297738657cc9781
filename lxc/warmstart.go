package lxc

import "time"

// keep_warm windows do two things: inside one, an idle guest is not
// stopped (idleCheck), and when one opens, the guest is started, so that
// the first visitor of the day does not wait. Windows are read in the
// config's time zone (TimeZone; the process's local time by default).

// warmClock is the scheduler's clock; tests move it.
var warmClock = time.Now

// location is the keep_warm time zone.
func (c GuestConfig) location() *time.Location {
	if c.TimeZone != nil {
		return c.TimeZone
	}
	return time.Local
}

// inKeepWarm reports whether t is inside a keep_warm window.
func (c GuestConfig) inKeepWarm(t time.Time) bool {
	return inWindow(c.KeepWarm, t.In(c.location()))
}

// nextWarmStart is the first opening of a keep_warm window after t (zero
// without windows).
func (c GuestConfig) nextWarmStart(t time.Time) time.Time {
	var next time.Time
	for _, w := range c.KeepWarm {
		if s := w.nextStart(t, c.location()); !s.IsZero() && (next.IsZero() || s.Before(next)) {
			next = s
		}
	}
	return next
}

// nextStart is the first time after t, in loc, that the window opens.
func (w Window) nextStart(t time.Time, loc *time.Location) time.Time {
	lt := t.In(loc)
	for i := 0; i <= 7; i++ {
		s := time.Date(lt.Year(), lt.Month(), lt.Day()+i, w.Start/60, w.Start%60, 0, 0, loc)
		if s.After(t) && w.Days[s.Weekday()] {
			return s
		}
	}
	return time.Time{}
}

// ScheduleKeepWarm arms the guest's keep_warm starts from its ruling
// config, replacing those armed before: at every window opening the guest
// is woken. Inside a window already (Caddy starting or reloading), it is
// woken now. The proxmox app calls it when it starts, never at provision.
func (g *Guest) ScheduleKeepWarm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armWarmLocked(true)
}

func (g *Guest) armWarmLocked(now bool) {
	if g.warmTimer != nil {
		g.warmTimer.Stop()
		g.warmTimer = nil
	}
	cfg := g.currentLocked().cfg
	if g.ctx.Err() != nil || len(cfg.KeepWarm) == 0 {
		return
	}
	t := warmClock()
	if now && cfg.inKeepWarm(t) {
		g.warmWakeLocked()
	}
	if next := cfg.nextWarmStart(t); !next.IsZero() {
		g.warmTimer = time.AfterFunc(next.Sub(t), g.warmFire)
	}
}

// warmFire runs at a window's opening.
func (g *Guest) warmFire() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ctx.Err() != nil {
		return
	}
	if g.currentLocked().cfg.inKeepWarm(warmClock()) {
		g.warmWakeLocked()
	}
	g.armWarmLocked(false)
}

// warmWakeLocked wakes the guest for keep_warm unless it is up or waking.
func (g *Guest) warmWakeLocked() {
	switch {
	case g.wake != nil, g.state == StateReady:
		return
	}
	g.logger.Info("keep_warm window open: waking the guest")
	g.wakeLocked("keep_warm", false)
}

// stopWarm disarms the keep_warm starts (the runtime is destroyed).
func (g *Guest) stopWarm() {
	if g.warmTimer != nil {
		g.warmTimer.Stop()
	}
}
