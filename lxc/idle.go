package lxc

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
)

// keepWarmRecheck is how often a guest inside a keep-warm window looks
// again whether the window is over.
const keepWarmRecheck = time.Minute

// armIdleLocked makes sure an idle check is pending: after d, or when
// the idle timeout since the last activity has passed (d == 0). The check
// itself decides; arming is cheap and never stops anything.
func (g *Guest) armIdleLocked(d time.Duration) {
	// Checked first: every request's end lands here, and the timer is
	// almost always armed already.
	if g.idleArmed {
		return
	}
	cfg := g.currentLocked().cfg
	if cfg.IdleTimeout <= 0 {
		return
	}
	if d == 0 {
		d = max(time.Until(g.lastActivity.Add(cfg.IdleTimeout)), time.Millisecond)
	}
	g.idleArmed = true
	if g.idleTimer == nil {
		g.idleTimer = time.AfterFunc(d, g.idleCheck)
	} else {
		g.idleTimer.Reset(d)
	}
}

// idleCheck stops the guest if it is truly idle: up, no wake or stop
// running, no request in flight (websockets and streams included), no
// dependent up, outside keep-warm windows and idle_timeout past the last
// activity. The check and the switch to "stopping" happen under the same
// lock as Begin, so a request either counts before it or waits for the
// stop and wakes the guest again.
func (g *Guest) idleCheck() {
	g.mu.Lock()
	g.idleArmed = false
	cfg := g.currentLocked().cfg
	now := time.Now()
	switch {
	case g.ctx.Err() != nil, cfg.IdleTimeout <= 0:
		g.mu.Unlock()
		return
	case g.state != StateReady && g.state != StateRunning && g.state != StateFailed:
		g.mu.Unlock()
		return
	case g.wake != nil || g.inflight > 0 || g.holders > 0:
		// Whatever ends these re-arms the check.
		g.mu.Unlock()
		return
	case cfg.LeaveExternal && g.external:
		g.mu.Unlock()
		return
	case now.Before(g.lastActivity.Add(cfg.IdleTimeout)):
		g.armIdleLocked(0)
		g.mu.Unlock()
		return
	case inWindow(cfg.KeepWarm, now):
		g.armIdleLocked(min(cfg.IdleTimeout, keepWarmRecheck))
		g.mu.Unlock()
		return
	}
	done := g.beginStopLocked()
	g.mu.Unlock()
	go g.runStop(done, "idle")
}

// Sleep stops the guest now, whatever its activity (admin API).
func (g *Guest) Sleep(reason string) error {
	g.mu.Lock()
	switch {
	case g.wake != nil:
		g.mu.Unlock()
		return fmt.Errorf("guest %s is waking", g.key)
	case g.state == StateStopping:
		g.mu.Unlock()
		return nil
	case g.state != StateReady && g.state != StateRunning && g.state != StateFailed:
		g.mu.Unlock()
		return fmt.Errorf("guest %s is %s", g.key, g.state)
	}
	done := g.beginStopLocked()
	g.mu.Unlock()
	go g.runStop(done, reason)
	return nil
}

func (g *Guest) beginStopLocked() chan struct{} {
	g.setStateLocked(StateStopping)
	done := make(chan struct{})
	g.stopDone = done
	return done
}

// runStop stops the guest with the configured method: shutdown asks the
// guest to power off and PVE forces it after stop_timeout (and a failed
// shutdown is followed by a hard stop); stop is a hard stop; suspend
// freezes it. The guest's config is never changed.
func (g *Guest) runStop(done chan struct{}, reason string) {
	b := g.current()
	cfg := b.cfg
	g.mu.Lock()
	t := g.target
	g.mu.Unlock()
	log := g.logger.With(zap.String("node", t.node), zap.Int("vmid", t.vmid), zap.String("reason", reason), zap.String("stop_method", cfg.StopMethod))
	ctx, cancel := context.WithTimeout(g.ctx, cfg.StopTimeout+time.Minute)
	defer cancel()

	var err error
	if b.c == nil || t.vmid == 0 {
		err = fmt.Errorf("guest %s has no known vmid", g.key)
	} else {
		client := b.c.Client()
		task, e := runTask(ctx, client, t, cfg.StopMethod, cfg.TaskPollInterval, cfg.StopTimeout)
		if task != nil {
			log.Info(cfg.StopMethod+" task", zap.String("upid", string(task.UPID)), zap.NamedError("task_error", e))
		}
		if e != nil && cfg.StopMethod == StopShutdown && !isNotRunning(e) && ctx.Err() == nil {
			log.Warn("graceful shutdown failed; forcing a stop", zap.Error(e))
			task, e = runTask(ctx, client, t, StopStop, cfg.TaskPollInterval, cfg.StopTimeout)
			if task != nil {
				log.Info("stop task", zap.String("upid", string(task.UPID)), zap.NamedError("task_error", e))
			}
		}
		if e != nil && !isNotRunning(e) {
			err = e
		}
	}

	g.mu.Lock()
	g.stopDone = nil
	close(done)
	if err != nil {
		// State unknown: assume up, and try again after another idle period.
		g.setStateLocked(StateRunning)
		g.lastActivity = time.Now()
		g.armIdleLocked(0)
		g.mu.Unlock()
		metrics.stopFailures.WithLabelValues(g.clusterName, g.ref).Inc()
		log.Error("stopping the guest failed", zap.Error(err))
		return
	}
	g.lastStop = reason
	g.host = ""
	g.external = false
	if g.wake == nil {
		if cfg.StopMethod == StopSuspend {
			g.setStateLocked(StateSuspended)
		} else {
			g.setStateLocked(StateStopped)
		}
	}
	g.releaseDepsLocked()
	g.mu.Unlock()
	metrics.stops.WithLabelValues(g.clusterName, g.ref, reason).Inc()
	log.Info("guest put to sleep")
}

// isNotRunning recognises PVE's answer to stopping a stopped guest.
func isNotRunning(err error) bool {
	return err != nil && strings.Contains(err.Error(), "not running")
}
