package lxc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
)

// WakeOp is one wake of a guest, shared by every request that needs it.
type WakeOp struct {
	done    chan struct{}
	err     error
	started time.Time
	reason  string
}

// Done is closed when the wake ends.
func (o *WakeOp) Done() <-chan struct{} { return o.done }

// Err is the wake's error once Done is closed: nil when ready, else a
// *WakeError.
func (o *WakeOp) Err() error { return o.err }

func finishedOp(err error) *WakeOp {
	o := &WakeOp{done: make(chan struct{}), err: err}
	close(o.done)
	return o
}

// WakeError is a failed wake, or a wake refused during back-off.
type WakeError struct {
	Err error
	// Public says what failed in words fit for anyone who can reach the
	// site: no node names, addresses or the cluster's own error text,
	// which Err carries for logs and the admin API.
	Public string
	// RetryAfter is how long until the next wake may be tried.
	RetryAfter time.Duration
	// Timeout is set when wake_timeout expired.
	Timeout bool
}

func (e *WakeError) Error() string { return e.Err.Error() }

func (e *WakeError) Unwrap() error { return e.Err }

// PublicMessage is Public, or a generic sentence when none was set.
func (e *WakeError) PublicMessage() string {
	if e.Public != "" {
		return e.Public
	}
	return msgNotStarted
}

const (
	msgNotStarted = "The service could not be started."
	msgNoStatus   = "The guest's status could not be read."
)

// failure tags a wake step's error with its public words (WakeError.Public).
type failure struct {
	public string
	err    error
	// waited: the wake ran out of time waiting for something it names
	// (a backup, HA), which says more than "not ready in time".
	waited bool
}

func (f *failure) Error() string { return f.err.Error() }

func (f *failure) Unwrap() error { return f.err }

func fail(public string, err error) error { return &failure{public: public, err: err} }

// Wake starts a wake unless one is running (then it is shared) or the
// guest is ready; it returns at once. The wake belongs to the guest, not
// to the caller: it goes on when callers give up, bounded by wake_timeout.
func (g *Guest) Wake(reason string) *WakeOp {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.wakeLocked(reason, false)
}

// WakeNow is Wake ignoring a failure back-off (for the admin API).
func (g *Guest) WakeNow(reason string) *WakeOp {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.wakeLocked(reason, true)
}

func (g *Guest) wakeLocked(reason string, force bool) *WakeOp {
	if g.wake != nil {
		return g.wake
	}
	if g.state == StateReady {
		return finishedOp(nil)
	}
	now := time.Now()
	if g.state == StateFailed && now.Before(g.failedUntil) && !force {
		next := g.failedUntil.Sub(now).Round(time.Second)
		return finishedOp(&WakeError{
			Err:        fmt.Errorf("the last start failed, next try in %s: %s", next, g.lastErr),
			Public:     fmt.Sprintf("The last start failed; next try in %s.", next),
			RetryAfter: g.failedUntil.Sub(now),
		})
	}
	op := &WakeOp{done: make(chan struct{}), started: now, reason: reason}
	g.wake = op
	g.seen = ""
	if g.state != StateStopping {
		g.setStateLocked(StateStarting)
	}
	b := g.currentLocked()
	g.prog.reset()
	name := g.name
	if name == "" {
		name = g.ref
	}
	g.emit(Event{Phase: "starting", Message: "Waking up " + name, Detail: "Waking up " + g.displayLocked(), Progress: 5})
	g.logger.Info("waking guest", zap.String("reason", reason), zap.String("node", g.target.node), zap.Int("vmid", g.target.vmid))
	go g.runWake(op, b)
	return op
}

func (g *Guest) displayLocked() string {
	if g.name != "" && g.name != g.ref {
		return fmt.Sprintf("%s (%s)", g.name, g.ref)
	}
	return g.ref
}

// WaitReady wakes the guest if needed and waits until it is ready, the
// wake fails, or ctx ends.
func (g *Guest) WaitReady(ctx context.Context) error {
	op := g.Wake("dependency")
	select {
	case <-op.Done():
		return op.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// runWake runs one wake to its end and publishes the outcome.
func (g *Guest) runWake(op *WakeOp, b *Binding) {
	g.notifyWaking(op, b.c)
	cfg := b.cfg
	// A powered-off node is woken first, within its own join_timeout.
	nodeErr := g.nodeUp(b)
	ctx, cancel := context.WithTimeout(g.ctx, cfg.WakeTimeout)
	defer cancel()
	deps, err := []*Guest(nil), nodeErr
	if err == nil {
		deps, err = g.wakeSteps(ctx, b)
	}
	if err != nil && ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		public := fmt.Sprintf("The service was not ready within %s.", cfg.WakeTimeout)
		if f := (*failure)(nil); errors.As(err, &f) && f.waited {
			public = f.public
		}
		err = &WakeError{
			Err:     fmt.Errorf("not ready within wake_timeout %s: %w", cfg.WakeTimeout, err),
			Public:  public,
			Timeout: true,
		}
	}
	elapsed := time.Since(op.started)
	g.mu.Lock()
	g.wake = nil
	now := time.Now()
	var public string
	if err != nil {
		g.failures++
		backoff := cfg.RetryBackoff << min(g.failures-1, 16)
		if backoff > cfg.MaxBackoff || backoff <= 0 {
			backoff = cfg.MaxBackoff
		}
		g.failedUntil = now.Add(backoff)
		g.failedObs = g.seen
		if g.failedObs == "" {
			g.failedObs = g.res.obs()
		}
		g.lastErr = err.Error()
		we, ok := err.(*WakeError)
		if !ok {
			we = &WakeError{Err: err}
			if f := (*failure)(nil); errors.As(err, &f) {
				we.Public = f.public
			}
		}
		we.RetryAfter = backoff
		op.err = we
		public = we.PublicMessage()
		g.setStateLocked(StateFailed)
		g.host = ""
		// The guest may be running without being ready: let it idle out.
		g.lastActivity = now
		g.armIdleLocked(0)
		for _, d := range deps {
			go d.unhold()
		}
	} else {
		g.failures = 0
		g.lastErr = ""
		g.external = false
		g.setStateLocked(StateReady)
		g.lastActivity = now
		g.heldDeps = append(g.heldDeps, deps...)
		g.armIdleLocked(0)
	}
	retry := g.failedUntil.Sub(now)
	// The final event goes out before the wake is over: a wake started
	// right after must not find this one's ending in its own history.
	if err != nil {
		g.emit(Event{Phase: "error", Message: public, Detail: err.Error(), Progress: 100, Final: true, RetryAfter: retry})
	} else {
		g.emit(Event{Phase: "ready", Message: "Ready", Progress: 100, Final: true})
	}
	close(op.done)
	t := g.target
	g.mu.Unlock()

	result := "ready"
	if err != nil {
		result = "error"
		metrics.wakeFailures.WithLabelValues(g.clusterName, g.ref).Inc()
		g.logger.Error("wake failed", zap.Error(err), zap.Duration("duration", elapsed),
			zap.String("node", t.node), zap.Int("vmid", t.vmid), zap.Duration("retry_in", retry))
	} else {
		g.logger.Info("guest ready", zap.Duration("duration", elapsed), zap.String("node", t.node), zap.Int("vmid", t.vmid))
	}
	metrics.wakeDuration.WithLabelValues(g.clusterName, g.ref, result).Observe(elapsed.Seconds())
	g.notifyWakeEnd(op.err, elapsed)
}

// wakeSteps brings the guest up, checking readiness in layers: start task
// OK, status running, address known, probe passing, settle delay. It
// returns the dependencies it woke (held awake) even on error.
func (g *Guest) wakeSteps(ctx context.Context, b *Binding) ([]*Guest, error) {
	cfg := b.cfg
	// A stop in progress finishes first; then the guest starts again.
	g.mu.Lock()
	stopDone := g.stopDone
	g.mu.Unlock()
	if stopDone != nil {
		g.emit(Event{Phase: "waiting_stop", Message: "Waiting for a shutdown in progress to finish", Progress: 8})
		select {
		case <-stopDone:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for a stop in progress: %w", ctx.Err())
		}
		g.mu.Lock()
		g.setStateLocked(StateStarting)
		g.mu.Unlock()
	}

	deps, err := g.wakeDeps(ctx, b)
	if err != nil {
		return deps, err
	}

	c := b.c
	if c == nil {
		return deps, fail("The Proxmox cluster is not configured.", errors.New("guest has no cluster"))
	}
	if err := c.WaitReady(ctx); err != nil {
		if isPermission(err) {
			return deps, g.permissionFailure(err)
		}
		return deps, fail("The Proxmox cluster is not reachable.", err)
	}
	res, err := c.Lookup(g.ref)
	if err != nil {
		return deps, lookupFailure(err)
	}
	g.mu.Lock()
	g.target, g.name = target{node: res.Node, kind: res.Kind, vmid: res.VMID}, res.Name
	g.mu.Unlock()
	if err := g.powerUp(ctx, c, cfg); err != nil {
		return deps, err
	}
	g.emit(Event{Phase: "running", Message: "Guest is running", Progress: 55})

	if !cfg.needAddress {
		return deps, nil
	}
	host := cfg.Address
	client := c.Client()
	var nc *netConfig // read once, on the first try that can
	// A static address the agent has not (yet) reported is taken once the
	// service answers there (discoverQEMU).
	confirm := func(h string) bool { return probe(ctx, cfg.Probe, h, cfg.Port, cfg.ProbePath) == nil }
	for host == "" {
		var a string
		var err error
		t := g.liveTarget()
		if nc == nil {
			var v netConfig
			if v, err = readNetConfig(ctx, client, t); err == nil {
				nc = &v
			}
		}
		if nc != nil {
			a, err = discoverAddress(ctx, client, t, *nc, confirm)
		}
		if err != nil {
			if isPermission(err) {
				return deps, g.permissionFailure(err)
			}
			if errors.Is(err, errNoAgent) {
				return deps, fail("The guest's address is not known.", err)
			}
			g.logger.Debug("address discovery", zap.Error(err), zap.String("node", t.node), zap.Int("vmid", t.vmid))
		}
		if a != "" {
			host = a
			break
		}
		if !sleepCtx(ctx, cfg.TaskPollInterval) {
			return deps, fmt.Errorf("waiting for the guest's address: %w", ctx.Err())
		}
	}
	g.mu.Lock()
	g.host = host
	g.mu.Unlock()
	g.emit(Event{Phase: "address", Message: "Found the guest's address", Detail: "Address " + host, Progress: 65})

	probing, shown, checks := time.Now(), time.Time{}, 0
	for {
		err := probe(ctx, cfg.Probe, host, cfg.Port, cfg.ProbePath)
		if err == nil {
			break
		}
		// The loading page's line counts up at probe_interval's pace,
		// however fast the probes of the first seconds run.
		if time.Since(shown) >= cfg.ProbeInterval {
			shown, checks = time.Now(), checks+1
			g.emit(Event{Phase: "probing", Message: fmt.Sprintf("Waiting for the service (check %d)", checks), Detail: fmt.Sprintf("Waiting for the service on port %d (check %d)", cfg.Port, checks), Progress: min(65+checks, 90), Update: true})
		}
		if !sleepCtx(ctx, probeWait(time.Since(probing), cfg.ProbeInterval)) {
			return deps, fmt.Errorf("service on %s port %d not answering: %v", host, cfg.Port, err)
		}
	}
	if cfg.ReadyAfter > 0 {
		g.emit(Event{Phase: "settling", Message: "Letting the service settle", Progress: 95})
		if !sleepCtx(ctx, cfg.ReadyAfter) {
			return deps, ctx.Err()
		}
	}
	return deps, nil
}

// powerUp brings the guest to running, not paused. Each round reads
// status/current on the node the latest poll names (HA may start the
// guest elsewhere; a migration moves it) and acts on it: a start or
// resume is posted at most once per need; locks and HA at work are
// waited out, with what is happening on the loading page and no failure
// counted; a permission refusal ends the wake at once. For an HA-managed
// guest the start task only asks HA, so the wake goes on until the status
// says running.
func (g *Guest) powerUp(ctx context.Context, c *Cluster, cfg GuestConfig) error {
	client := c.Client()
	requested := false
	waitingFor := ""
	// outOfTime ends a wake whose wake_timeout passed, saying what it
	// waited for, if anything.
	outOfTime := func() error {
		if waitingFor != "" {
			return &failure{public: waitingFor + "; the service could not be started in time.", err: fmt.Errorf("still waiting (%s): %w", waitingFor, ctx.Err()), waited: true}
		}
		return fmt.Errorf("waiting for status running: %w", ctx.Err())
	}
	// pause is false for the first round and right after a start or
	// resume task ended OK: the guest is most likely up, and its service
	// starts counting towards the held requests' latency now.
	for first, pause := true, false; ; first = false {
		if pause && !sleepCtx(ctx, cfg.TaskPollInterval) {
			return outOfTime()
		}
		pause = true
		st, t, err := g.statusFollowing(ctx, c)
		if err != nil {
			if ctx.Err() != nil {
				return outOfTime()
			}
			if isPermission(err) {
				return g.permissionFailure(err)
			}
			if isGone(err) {
				return fail("The guest was not found in the Proxmox cluster.", fmt.Errorf("reading status: %w", err))
			}
			return fail(msgNoStatus, fmt.Errorf("reading status: %w", err))
		}
		g.mu.Lock()
		g.seen = st.obs()
		g.mu.Unlock()
		step := nextWakeStep(t.kind, st, requested)
		switch step.action {
		case actUp:
			if first {
				g.emit(Event{Phase: "running", Message: "Already running", Progress: 50})
			}
			return nil
		case actFail:
			return fail(step.public, errors.New(step.detail))
		case actWait:
			if step.public != waitingFor {
				waitingFor = step.public
				g.emit(Event{Phase: "waiting", Message: step.public + ".", Detail: fmt.Sprintf("%s %d on %s: %s", kindLabel(t.kind), t.vmid, t.node, step.detail), Progress: 20})
				g.logger.Info("wake waits", zap.String("why", step.detail), zap.String("node", t.node), zap.Int("vmid", t.vmid))
			}
			continue
		}
		waitingFor = ""
		action, msg, verb := "start", "Starting the guest", "Starting"
		if step.action == actResume {
			action, msg, verb = "resume", "Resuming the suspended guest", "Resuming"
		}
		// Other Caddy instances sharing the storage: one posts the start.
		release, changed := g.claimStart(ctx, c, t, st)
		if changed {
			release()
			continue
		}
		g.emit(Event{Phase: "start_task", Message: msg, Detail: fmt.Sprintf("%s %s %d on %s", verb, kindLabel(t.kind), t.vmid, t.node), Progress: 15})
		task, err := runTask(ctx, client, t, action, cfg.TaskPollInterval, cfg.StopTimeout)
		release()
		if task != nil {
			g.logger.Info(action+" task", zap.String("upid", string(task.UPID)), zap.NamedError("task_error", err),
				zap.String("node", t.node), zap.Int("vmid", t.vmid), zap.Bool("ha", bool(st.HA.Managed)))
		}
		switch {
		case err == nil:
		case isPermission(err):
			return g.permissionFailure(err)
		case lockOf(err) != "", isAlreadyRunning(err), isGone(err):
			// The guest changed between the status and the task: a lock
			// came, someone started it, or it moved. The next round sees.
			continue
		case action == "resume":
			return fail("The guest could not be resumed.", err)
		default:
			return fail("The guest could not be started.", err)
		}
		requested, pause = true, false
		switch {
		case bool(st.HA.Managed) && action == "start":
			g.emit(Event{Phase: "task_ok", Message: "Start requested; waiting for high availability to start it", Progress: 30})
		case action == "resume":
			g.emit(Event{Phase: "task_ok", Message: "Resumed", Progress: 50})
		default:
			g.emit(Event{Phase: "task_ok", Message: "Start task finished: OK", Progress: 45})
		}
	}
}

// liveTarget is where the guest is now, as far as the last poll (or a
// status read that followed a migration) knows.
func (g *Guest) liveTarget() target {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.target
}

// statusFollowing reads status/current where the guest is. When its config
// is no longer there (migrated, or started elsewhere by HA, since the
// last poll) it polls the cluster again and, if the guest moved, retries
// once on its new node.
func (g *Guest) statusFollowing(ctx context.Context, c *Cluster) (guestStatus, target, error) {
	t := g.liveTarget()
	st, err := status(ctx, c.Client(), t)
	if !isGone(err) {
		return st, t, err
	}
	res, lerr := c.Refresh(ctx, g.ref)
	if lerr != nil {
		return st, t, err
	}
	nt := target{node: res.Node, kind: res.Kind, vmid: res.VMID}
	if nt == t {
		return st, t, err
	}
	g.logger.Info("guest moved", zap.String("from_node", t.node), zap.String("node", nt.node), zap.Int("vmid", nt.vmid))
	g.mu.Lock()
	g.target = nt
	g.mu.Unlock()
	st, err = status(ctx, c.Client(), nt)
	return st, nt, err
}

// msgPermission is what visitors read when PVE refused a call for lack
// of a privilege: a configuration error of the token.
const msgPermission = "The service cannot be started: the Proxmox VE token lacks a permission."

// permissionFailure logs the privilege PVE found missing and ends the
// wake: retrying cannot help until the token is granted it.
func (g *Guest) permissionFailure(err error) error {
	g.logPermission(err)
	return fail(msgPermission, err)
}

func (g *Guest) logPermission(err error) {
	path, priv := missingPrivilege(err)
	if priv == "" {
		g.logger.Error("Proxmox VE refused the API token (401/403): check token_id and token_secret", zap.Error(err))
		return
	}
	g.logger.Error("the API token lacks a privilege: grant it (see the README's Permissions for wake on request)",
		zap.String("privilege", priv), zap.String("path", path), zap.Error(err))
}

// lookupFailure is a wake's answer to a ref the poll cannot resolve.
func lookupFailure(err error) error {
	var te *templateError
	if errors.As(err, &te) {
		return fail("The guest is a template and cannot be started.", err)
	}
	return fail("The guest was not found in the Proxmox cluster.", err)
}

// wakeDeps wakes the dependencies in parallel and holds them awake.
func (g *Guest) wakeDeps(ctx context.Context, b *Binding) ([]*Guest, error) {
	if len(b.deps) == 0 {
		return nil, nil
	}
	g.emit(Event{Phase: "waking_dep", Message: fmt.Sprintf("Waking %d dependencies", len(b.deps)), Progress: 10})
	var wg sync.WaitGroup
	errs := make([]error, len(b.deps))
	for i, d := range b.deps {
		d.g.hold()
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = d.g.WaitReady(ctx)
		}()
	}
	wg.Wait()
	held := make([]*Guest, 0, len(b.deps))
	for _, d := range b.deps {
		held = append(held, d.g)
	}
	for i, err := range errs {
		if err != nil {
			return held, fail("A service it depends on could not be started.", fmt.Errorf("dependency %s: %w", b.deps[i].g.ref, err))
		}
	}
	return held, nil
}

func kindLabel(kind string) string {
	if kind == "qemu" {
		return "VM"
	}
	return "CT"
}
