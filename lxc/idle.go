package lxc

import (
	"context"
	"errors"
	"fmt"
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
	case g.wake != nil || g.holders > 0 || g.inflightKeepsUpLocked(cfg, now, true):
		// Whatever ends these re-arms the check (quiet streams: see
		// inflightKeepsUpLocked).
		g.mu.Unlock()
		return
	case cfg.LeaveExternal && g.external:
		g.mu.Unlock()
		return
	case now.Before(g.lastActivity.Add(cfg.IdleTimeout)):
		g.armIdleLocked(0)
		g.mu.Unlock()
		return
	case cfg.inKeepWarm(now):
		g.armIdleLocked(min(cfg.IdleTimeout, keepWarmRecheck))
		g.mu.Unlock()
		return
	}
	why := idleBlocker(g.res)
	if why != "" {
		// A stop now would be refused (or would hit a backup): the next
		// poll looks again. Logged once per reason, not per poll.
		if why != g.deferredWhy {
			g.logger.Info("idle stop deferred", zap.String("why", why))
		}
		g.deferredWhy, g.idleDeferred = why, true
		g.mu.Unlock()
		return
	}
	g.deferredWhy = ""
	if g.preStopPendingLocked(cfg) {
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
	g.beforeStop = g.state
	g.setStateLocked(StateStopping)
	done := make(chan struct{})
	g.stopDone = done
	return done
}

// stopMargin is added to stop_timeout for the wait until status/current
// says stopped: for HA, a CRM and an LRM round (about 10s each) come
// first; for PVE's forced shutdown, the SIGTERM and SIGKILL grace.
const stopMargin = time.Minute

// runStop stops the guest with the configured method, mapped onto it by
// planStop: shutdown asks the guest to power off and PVE forces it after
// stop_timeout (a failed shutdown is followed by a hard stop); stop is a
// hard stop; suspend pauses a VM in RAM. It reads status/current first
// (a lock or HA at work defers the stop, never turning it into a hard
// stop), and after the task it keeps the guest "stopping" until
// status/current agrees: for an HA-managed guest the task only asked HA.
// The guest's config is never changed.
func (g *Guest) runStop(done chan struct{}, reason string) {
	b := g.current()
	cfg := b.cfg
	t := g.liveTarget()
	log := g.logger.With(zap.String("node", t.node), zap.Int("vmid", t.vmid), zap.String("reason", reason), zap.String("stop_method", cfg.StopMethod))
	ctx, cancel := context.WithTimeout(g.ctx, 2*(cfg.StopTimeout+stopMargin))
	defer cancel()

	var out stopOutcome
	if b.c == nil || t.vmid == 0 {
		out = stopOutcome{err: fmt.Errorf("guest %s has no known vmid", g.key)}
	} else {
		// Other Caddy instances sharing the storage: one of them may have
		// served the guest, or be starting it.
		release, wait := g.claimStop(ctx, b, t, reason)
		if wait > 0 {
			g.deferStopToPeer(done, wait)
			return
		}
		defer release()
		out = g.stopSteps(ctx, b.c, cfg, log)
	}
	g.finishStop(done, reason, cfg, out, log)
}

// stopOutcome is how a stop ended: done (stopped or suspended), deferred
// (not tried now, and not a failure), or failed.
type stopOutcome struct {
	suspended bool
	deferred  string
	err       error
}

func (g *Guest) stopSteps(ctx context.Context, c *Cluster, cfg GuestConfig, log *zap.Logger) stopOutcome {
	st, t, err := g.statusFollowing(ctx, c)
	if err != nil {
		return stopOutcome{err: fmt.Errorf("reading status: %w", err)}
	}
	if st.Status == "stopped" {
		return stopOutcome{}
	}
	if st.Lock != "" {
		return stopOutcome{deferred: lockText(st.Lock)}
	}
	ha := bool(st.HA.Managed)
	if ha && haBusy(st.HA.State) {
		return stopOutcome{deferred: "HA state " + st.HA.State}
	}
	plan := planStop(cfg.StopMethod, t.kind, ha)
	if plan.warn != "" {
		g.warnOnce(plan.warn, log)
	}
	if plan.action == StopSuspend && st.paused() {
		return stopOutcome{suspended: true}
	}
	client := c.Client()
	task, err := runTask(ctx, client, t, plan.action, cfg.TaskPollInterval, cfg.StopTimeout)
	if task != nil {
		log.Info(plan.action+" task", zap.String("upid", string(task.UPID)), zap.NamedError("task_error", err), zap.Bool("ha", ha))
	}
	if lock := lockOf(err); lock != "" {
		return stopOutcome{deferred: lockText(lock)}
	}
	if err != nil && plan.force && !isNotRunning(err) && !isPermission(err) && ctx.Err() == nil {
		log.Warn("graceful shutdown failed; forcing a stop", zap.Error(err))
		task, err = runTask(ctx, client, t, StopStop, cfg.TaskPollInterval, cfg.StopTimeout)
		if task != nil {
			log.Info("stop task", zap.String("upid", string(task.UPID)), zap.NamedError("task_error", err))
		}
		if lock := lockOf(err); lock != "" {
			return stopOutcome{deferred: lockText(lock)}
		}
	}
	if err != nil && !isNotRunning(err) {
		return stopOutcome{err: err}
	}
	bound := cfg.StopTimeout + stopMargin
	return g.awaitStopped(ctx, c, cfg, plan.action == StopSuspend, bound)
}

// awaitStopped polls status/current until the guest is down (stopped, or
// paused for suspend), within bound. HA may leave it running in its error
// state, which ends the wait at once.
func (g *Guest) awaitStopped(ctx context.Context, c *Cluster, cfg GuestConfig, suspend bool, bound time.Duration) stopOutcome {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	for {
		st, _, err := g.statusFollowing(ctx, c)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return stopOutcome{err: fmt.Errorf("waiting for the guest to stop: %w", err)}
			}
		case st.Status == "stopped":
			return stopOutcome{}
		case suspend && st.paused():
			return stopOutcome{suspended: true}
		case bool(st.HA.Managed) && st.HA.State == "error":
			return stopOutcome{err: errors.New("HA put the guest in its error state; it keeps running until an administrator recovers it")}
		}
		if !sleepCtx(ctx, cfg.TaskPollInterval) {
			return stopOutcome{err: fmt.Errorf("still running %s after the stop task", bound)}
		}
	}
}

// finishStop publishes a stop's outcome.
func (g *Guest) finishStop(done chan struct{}, reason string, cfg GuestConfig, out stopOutcome, log *zap.Logger) {
	g.mu.Lock()
	g.stopDone = nil
	close(done)
	switch {
	case out.deferred != "":
		// Nothing was done: back to what it was, and the next poll checks.
		if g.wake == nil {
			g.setStateLocked(g.beforeStop)
		}
		g.idleDeferred = true
		g.mu.Unlock()
		log.Info("stop deferred", zap.String("why", out.deferred))
		return
	case out.err != nil:
		// State unknown: assume up, and try again after another idle period.
		if g.wake == nil {
			g.setStateLocked(StateRunning)
		}
		g.lastActivity = time.Now()
		g.armIdleLocked(0)
		g.mu.Unlock()
		metrics.stopFailures.WithLabelValues(g.clusterName, g.ref).Inc()
		if isPermission(out.err) {
			g.logPermission(out.err)
		}
		log.Error("stopping the guest failed", zap.Error(out.err))
		return
	}
	g.lastStop = reason
	g.host = ""
	g.external = false
	if g.wake == nil {
		if out.suspended {
			g.setStateLocked(StateSuspended)
		} else {
			g.setStateLocked(StateStopped)
		}
	}
	g.releaseDepsLocked()
	g.mu.Unlock()
	metrics.stops.WithLabelValues(g.clusterName, g.ref, reason).Inc()
	log.Info("guest put to sleep")
	g.notifyAsleep(reason, cfg, out.suspended)
}

// warnOnce logs a warning the first time this guest meets it.
func (g *Guest) warnOnce(msg string, log *zap.Logger) {
	g.mu.Lock()
	if g.warned == nil {
		g.warned = map[string]bool{}
	}
	seen := g.warned[msg]
	g.warned[msg] = true
	g.mu.Unlock()
	if !seen {
		log.Warn(msg)
	}
}
