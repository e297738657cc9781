package lxc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
)

// guests holds the guest runtimes, keyed "cluster/ref", shared by every
// config that references them so that reloads keep their state.
var guests = caddy.NewUsagePool()

// State is a guest's state as the wake machinery sees it.
type State string

// Guest states.
const (
	StateUnknown   State = "unknown"   // not polled yet
	StateStopped   State = "stopped"   // PVE says stopped
	StateStarting  State = "starting"  // a wake is running
	StateRunning   State = "running"   // PVE says running; readiness not checked
	StateReady     State = "ready"     // proxying
	StateStopping  State = "stopping"  // a stop is running
	StateSuspended State = "suspended" // suspended by us
	StateFailed    State = "failed"    // the last wake failed; backing off
	StateMissing   State = "missing"   // not in the cluster
)

// States lists every state, for metrics.
var States = []State{StateUnknown, StateStopped, StateStarting, StateRunning, StateReady, StateStopping, StateSuspended, StateFailed, StateMissing}

// Guest is the shared runtime of one guest.
type Guest struct {
	key         string
	clusterName string
	ref         string
	logger      *zap.Logger

	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	bindings []*Binding
	state    State
	target   target
	name     string
	host     string
	// up is the last address Upstream joined (host, port).
	up struct {
		host, addr string
		port       int
	}

	inflight, streams, held int
	lastActivity            time.Time
	idleTimer               *time.Timer
	idleArmed               bool
	wake                    *WakeOp
	stopDone                chan struct{}
	holders                 int
	heldDeps                []*Guest
	failures                int
	failedUntil             time.Time
	// failedObs is the guest's status|lock|hastate when the last wake
	// failed: a poll that sees another ends the back-off (a lock
	// cleared, someone started it).
	failedObs string
	// seen is the status|lock|hastate this wake last read.
	seen     string
	lastErr  string
	external bool
	lastStop string
	// res is the guest's row in the last poll.
	res Resource
	// idleDeferred: an idle stop was put off (a lock, HA busy); the next
	// poll checks again. deferredWhy is the reason last logged.
	idleDeferred bool
	deferredWhy  string
	// beforeStop is the state a deferred stop returns to.
	beforeStop State
	// warned remembers the one-time warnings given (LXC suspend, HA
	// containers' hard stop).
	warned map[string]bool
	// warmTimer fires at the next keep_warm window opening.
	warmTimer *time.Timer
	// shared publishes activity to other Caddy instances.
	shared shareState

	// usage, tracked and preStop are the activity the proxy does not
	// see: busy.go, streams.go, prestop.go.
	usage   usageWindow
	tracked map[*StreamActivity]struct{}
	preStop preStopState

	prog progress
}

// Binding is one config's hold on a guest: its settings and cluster. The
// newest binding of a handler config rules; dependencies' implicit
// bindings count only while no handler configures the guest.
type Binding struct {
	g        *Guest
	c        *Cluster
	cfg      GuestConfig
	explicit bool
	deps     []*Binding
}

// Guest is the bound guest.
func (b *Binding) Guest() *Guest { return b.g }

// Config is the binding's guest config.
func (b *Binding) Config() GuestConfig { return b.cfg }

// AcquireGuest returns a binding of the guest ref on cluster c with cfg,
// creating the shared runtime on first use. It makes no request.
func AcquireGuest(c *Cluster, ref string, cfg GuestConfig, logger *zap.Logger) (*Binding, error) {
	if err := ValidateRef(ref); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := c.checkTarget(ref, cfg); err != nil {
		return nil, err
	}
	b, err := acquire(c, ref, cfg, true, logger)
	if err != nil {
		return nil, err
	}
	for _, d := range cfg.DependsOn {
		dcfg := GuestConfig{IdleTimeout: cfg.IdleTimeout, Probe: ProbeNone}.WithDefaults()
		dcfg.WakeTimeout, dcfg.StopMethod, dcfg.StopTimeout, dcfg.TaskPollInterval = cfg.WakeTimeout, cfg.StopMethod, cfg.StopTimeout, cfg.TaskPollInterval
		dcfg.needAddress = false
		// A dependency inherits stop_method; a container among them is
		// shut down instead of suspended, with a warning.
		if err := c.checkTarget(d, GuestConfig{StopMethod: StopShutdown}); err != nil {
			_ = b.Release()
			return nil, fmt.Errorf("depends_on: %w", err)
		}
		db, err := acquire(c, d, dcfg, false, logger)
		if err != nil {
			_ = b.Release()
			return nil, err
		}
		b.deps = append(b.deps, db)
	}
	if err := checkCycle(b.g, nil); err != nil {
		_ = b.Release()
		return nil, err
	}
	return b, nil
}

func acquire(c *Cluster, ref string, cfg GuestConfig, explicit bool, logger *zap.Logger) (*Binding, error) {
	key := c.Name() + "/" + ref
	v, _, err := guests.LoadOrNew(key, func() (caddy.Destructor, error) {
		ctx, cancel := context.WithCancel(context.Background())
		return &Guest{
			key: key, clusterName: c.Name(), ref: ref, ctx: ctx, cancel: cancel,
			logger: logger.With(zap.String("cluster", c.Name()), zap.String("guest", ref)),
			state:  StateUnknown,
		}, nil
	})
	if err != nil {
		return nil, err
	}
	g := v.(*Guest)
	// Zero series from the start, so that dashboards see every guest.
	metrics.wakeFailures.WithLabelValues(g.clusterName, g.ref)
	metrics.held.WithLabelValues(g.clusterName, g.ref)
	b := &Binding{g: g, c: c, cfg: cfg, explicit: explicit}
	g.mu.Lock()
	g.bindings = append(g.bindings, b)
	g.mu.Unlock()
	c.subscribe(g)
	return b, nil
}

// checkTarget refuses, when the cluster was already polled (a reload), a
// config that cannot work on the guest it names: a template, which PVE
// never starts, and stop_method suspend for a container. Before the
// first poll nothing is known: the wake then refuses the template, and
// the stop maps suspend to shutdown with a warning.
func (c *Cluster) checkTarget(ref string, cfg GuestConfig) error {
	res, polled, err := c.lookupPolled(ref)
	if !polled {
		return nil
	}
	var te *templateError
	if errors.As(err, &te) {
		return fmt.Errorf("guest %s: %w", ref, err)
	}
	if err == nil && res.Kind == "lxc" && cfg.StopMethod == StopSuspend {
		return fmt.Errorf("guest %s is a container: stop_method suspend is PVE's experimental container checkpoint (CRIU, not installed by default, and the next start would cold-boot it); use shutdown or stop", ref)
	}
	return nil
}

// checkCycle refuses depends_on loops, which would deadlock wakes.
func checkCycle(g *Guest, path []*Guest) error {
	for _, p := range path {
		if p == g {
			return fmt.Errorf("depends_on cycle through %s", g.key)
		}
	}
	path = append(path, g)
	for _, d := range g.current().deps {
		if err := checkCycle(d.g, path); err != nil {
			return err
		}
	}
	return nil
}

// Release ends the binding; the last release destroys the runtime.
func (b *Binding) Release() error {
	for _, d := range b.deps {
		_ = d.Release()
	}
	g := b.g
	g.mu.Lock()
	stillOnCluster := false
	for i, x := range g.bindings {
		if x == b {
			g.bindings = append(g.bindings[:i:i], g.bindings[i+1:]...)
			break
		}
	}
	for _, x := range g.bindings {
		if x.c == b.c {
			stillOnCluster = true
		}
	}
	g.mu.Unlock()
	if !stillOnCluster {
		b.c.unsubscribe(g)
	}
	_, err := guests.Delete(g.key)
	return err
}

// Destruct stops the guest's timers and any wake in progress. It
// implements caddy.Destructor; it never stops the guest itself.
func (g *Guest) Destruct() error {
	g.cancel()
	g.mu.Lock()
	if g.idleTimer != nil {
		g.idleTimer.Stop()
	}
	g.stopWarm()
	g.stopShare()
	for _, b := range g.bindings {
		b.c.unsubscribe(g)
	}
	g.mu.Unlock()
	g.shared.writing.Wait()
	return nil
}

// current is the ruling binding.
func (g *Guest) current() *Binding {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.currentLocked()
}

func (g *Guest) currentLocked() *Binding {
	for i := len(g.bindings) - 1; i >= 0; i-- {
		if g.bindings[i].explicit {
			return g.bindings[i]
		}
	}
	if len(g.bindings) > 0 {
		return g.bindings[len(g.bindings)-1]
	}
	return &Binding{g: g, cfg: GuestConfig{}.WithDefaults()}
}

// Ref is the vmid or name the guest was configured with.
func (g *Guest) Ref() string { return g.ref }

// State is the current state.
func (g *Guest) State() State {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.state
}

func (g *Guest) setStateLocked(s State) {
	if g.state != s {
		g.logger.Debug("guest state", zap.String("from", string(g.state)), zap.String("to", string(s)))
		g.state = s
	}
}

// Upstream is the dial address (host:port) of a ready guest; port 0
// means the configured port.
func (g *Guest) Upstream(port int) (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.upstreamLocked(port)
}

func (g *Guest) upstreamLocked(port int) (string, bool) {
	if g.state != StateReady {
		return "", false
	}
	if port == 0 {
		port = g.currentLocked().cfg.Port
	}
	// Joined once per address and port, not per request.
	if u := &g.up; u.addr == "" || u.port != port || u.host != g.host {
		u.host, u.port, u.addr = g.host, port, net.JoinHostPort(g.host, strconv.Itoa(port))
	}
	return g.up.addr, true
}

// Begin records the start of a request that counts as activity (a stream
// when stream is set); call the returned func when it ends. While any
// request is in flight the guest is never stopped for idleness.
func (g *Guest) Begin(stream bool) func() {
	g.mu.Lock()
	g.beginLocked(stream, true)
	g.mu.Unlock()
	return func() { g.End(stream) }
}

// BeginUpstream is Begin and Upstream under one lock, for a proxy's
// every request: the request counts as activity whether or not the guest
// is ready, and the caller ends it with End(stream).
//
// It reads the clock only when no request was in flight: while this one
// is (it is no watched stream, BeginStream counts those) no idle check
// stops the guest, and its end (End) sets the last activity, so a start
// amid others would only be overwritten. (The admin API's last_activity
// then says when the busy spell began, or when a request last ended.)
func (g *Guest) BeginUpstream(port int, stream bool) (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.beginLocked(stream, g.inflight == 0)
	return g.upstreamLocked(port)
}

func (g *Guest) beginLocked(stream, stamp bool) {
	g.inflight++
	if stream {
		g.streams++
	}
	if stamp {
		g.lastActivity = time.Now()
	}
	g.touchShareLocked()
}

// End ends a request that BeginUpstream began.
func (g *Guest) End(stream bool) {
	g.mu.Lock()
	g.inflight--
	if stream {
		g.streams--
	}
	g.lastActivity = time.Now()
	g.touchShareLocked()
	if g.inflight == 0 {
		g.armIdleLocked(0)
	}
	g.mu.Unlock()
}

// Hold counts a request waiting for the guest; it fails beyond max
// (max <= 0: no limit). Call release when the request stops waiting.
func (g *Guest) Hold(max int) (release func(), ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if max > 0 && g.held >= max {
		return nil, false
	}
	g.held++
	metrics.held.WithLabelValues(g.clusterName, g.ref).Inc()
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			g.held--
			g.mu.Unlock()
			metrics.held.WithLabelValues(g.clusterName, g.ref).Dec()
		})
	}, true
}

// Subscribe returns the events of the current (or last) wake so far and
// a channel of the next ones.
func (g *Guest) Subscribe() ([]Event, <-chan Event, func()) {
	hist, ch, cancel := g.prog.subscribe()
	return hist, ch, cancel
}

// emit publishes a progress event and logs it.
func (g *Guest) emit(e Event) {
	g.prog.emit(e)
}

// observe applies a poll result (lookupErr is the ref's lookup error).
// Only the ruling binding's cluster feeds state, so two pollers
// overlapping during a reload never disagree.
func (g *Guest) observe(c *Cluster, res Resource, lookupErr error, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if b := g.currentLocked(); b.c != c {
		return
	}
	busy := g.wake != nil || g.state == StateStopping
	var te *templateError
	if lookupErr != nil && !errors.As(lookupErr, &te) {
		if !busy && g.state != StateMissing {
			g.logger.Warn("guest not found in /cluster/resources", zap.Error(lookupErr))
			g.setStateLocked(StateMissing)
			g.host = ""
		}
		return
	}
	if g.target.vmid != res.VMID || g.target.node != res.Node {
		if g.target.node != "" && g.target.node != res.Node {
			g.logger.Info("guest moved", zap.String("from_node", g.target.node), zap.String("node", res.Node), zap.Int("vmid", res.VMID))
		}
		g.target = target{node: res.Node, kind: res.Kind, vmid: res.VMID}
	}
	if res.Name != "" {
		g.name = res.Name
	}
	g.res = res
	g.sampleUsageLocked(res, now)
	if g.idleDeferred {
		g.idleDeferred = false
		g.armIdleLocked(0)
	}
	if busy {
		return
	}
	next, external, note := observedState(g.state, res, te != nil)
	if g.state == StateFailed {
		if res.obs() == g.failedObs || next == StateFailed {
			return
		}
		// The guest changed since the wake failed: the back-off was about
		// what no longer is.
		g.logger.Info("guest changed since the failed wake; back-off ends", zap.String("was", g.failedObs), zap.String("now", res.obs()))
		g.failedUntil = time.Time{}
		g.failedObs = ""
	}
	if note != "" {
		g.logger.Info(note, zap.String("node", res.Node), zap.Int("vmid", res.VMID))
	}
	if next == g.state {
		return
	}
	g.setStateLocked(next)
	switch next {
	case StateRunning:
		if external {
			g.external = true
			g.lastActivity = now
		}
		g.armIdleLocked(0)
	case StateStopped, StateMissing:
		g.host = ""
		g.releaseDepsLocked()
	}
}

// observedState is the state a poll row moves an idle guest (no wake or
// stop running) to, whether that counts as an outside start, and what to
// log. Rows never demote a guest on "unknown" (no status: pvestatd
// stalled); a VM "running" under a backup lock after being stopped is a
// backup's prelaunch, not a start; a template is never up.
func observedState(cur State, res Resource, template bool) (next State, external bool, note string) {
	switch {
	case template:
		return StateMissing, false, ""
	case res.Status == "unknown":
		return cur, false, ""
	case res.Status == "running":
		switch cur {
		case StateUnknown, StateStopped, StateMissing, StateSuspended, StateFailed:
			if res.Kind == "qemu" && res.Lock == "backup" && cur != StateSuspended {
				// vzdump runs a stopped VM paused to read its disks.
				if cur == StateStopped {
					return cur, false, ""
				}
				return StateStopped, false, ""
			}
			if cur == StateSuspended {
				return cur, false, "" // a suspended VM is "running" to PVE
			}
			if cur == StateUnknown {
				return StateRunning, true, ""
			}
			return StateRunning, true, "guest started outside Caddy; counting it as activity"
		}
	case res.Status == "stopped":
		switch cur {
		case StateReady, StateRunning, StateSuspended, StateUnknown, StateMissing, StateFailed:
			note := ""
			if cur == StateReady || cur == StateRunning {
				note = "guest stopped outside Caddy"
			}
			return StateStopped, false, note
		}
	}
	return cur, false, ""
}

// hold keeps a dependency awake while a dependent is up.
func (g *Guest) hold() {
	g.mu.Lock()
	g.holders++
	g.mu.Unlock()
}

// unhold ends a dependent's hold; the idle countdown starts anew.
func (g *Guest) unhold() {
	g.mu.Lock()
	if g.holders > 0 {
		g.holders--
	}
	g.lastActivity = time.Now()
	g.armIdleLocked(0)
	g.mu.Unlock()
}

// releaseDepsLocked lets the dependencies this guest held idle out.
func (g *Guest) releaseDepsLocked() {
	deps := g.heldDeps
	g.heldDeps = nil
	for _, d := range deps {
		go d.unhold()
	}
}

// Info is a snapshot of a guest for the admin API.
type Info struct {
	Cluster      string     `json:"cluster"`
	Guest        string     `json:"guest"`
	VMID         int        `json:"vmid,omitempty"`
	Node         string     `json:"node,omitempty"`
	Type         string     `json:"type,omitempty"`
	Name         string     `json:"name,omitempty"`
	State        State      `json:"state"`
	Address      string     `json:"address,omitempty"`
	Inflight     int        `json:"inflight"`
	Streams      int        `json:"streams"`
	Held         int        `json:"held"`
	Holders      int        `json:"dependents_up,omitempty"`
	LastActivity *time.Time `json:"last_activity,omitempty"`
	// SleepIn is how long until an idle stop, in seconds: absent when
	// the guest is not up or never idles out, idle_timeout while busy.
	SleepIn     *float64 `json:"sleep_in,omitempty"`
	IdleTimeout string   `json:"idle_timeout"`
	StopMethod  string   `json:"stop_method"`
	External    bool     `json:"started_externally,omitempty"`
	LastError   string   `json:"last_error,omitempty"`
	RetryIn     *float64 `json:"retry_in,omitempty"`
	LastStop    string   `json:"last_stop_reason,omitempty"`
	// Lock and HAState are the guest's config lock and HA state as the
	// last poll saw them.
	Lock    string `json:"lock,omitempty"`
	HAState string `json:"hastate,omitempty"`
	// Busy says why the guest counts as active without requests (a
	// busy_if rule, a pre_stop_check's answer); Usage is its usage over
	// the first busy_if window (1m without busy_if).
	Busy  string `json:"busy,omitempty"`
	Usage *Rates `json:"usage,omitempty"`
}

// Info returns a snapshot.
func (g *Guest) Info() Info {
	g.mu.Lock()
	defer g.mu.Unlock()
	cfg := g.currentLocked().cfg
	now := time.Now()
	in := Info{
		Cluster: g.clusterName, Guest: g.ref, VMID: g.target.vmid, Node: g.target.node,
		Type: g.target.kind, Name: g.name, State: g.state, Address: g.host,
		Inflight: g.inflight, Streams: g.streams, Held: g.held, Holders: g.holders,
		IdleTimeout: cfg.IdleTimeout.String(), StopMethod: cfg.StopMethod,
		External: g.external, LastError: g.lastErr, LastStop: g.lastStop,
		Lock: g.res.Lock, HAState: g.res.HAState,
	}
	if !g.lastActivity.IsZero() {
		t := g.lastActivity
		in.LastActivity = &t
	}
	if s, ok := g.sleepInLocked(now); ok {
		in.SleepIn = &s
	}
	in.Busy, in.Usage = g.activityInfoLocked(cfg, now)
	if g.state == StateFailed && now.Before(g.failedUntil) {
		r := g.failedUntil.Sub(now).Seconds()
		in.RetryIn = &r
	}
	return in
}

// sleepInLocked is the time left until an idle stop, in seconds.
func (g *Guest) sleepInLocked(now time.Time) (float64, bool) {
	cfg := g.currentLocked().cfg
	if cfg.IdleTimeout <= 0 || (g.state != StateReady && g.state != StateRunning) {
		return 0, false
	}
	if g.holders > 0 || g.inflightKeepsUpLocked(cfg, now, false) {
		return cfg.IdleTimeout.Seconds(), true
	}
	return max(0, g.lastActivity.Add(cfg.IdleTimeout).Sub(now).Seconds()), true
}

// Guests returns every guest runtime.
func Guests() []*Guest {
	var out []*Guest
	guests.Range(func(_, v any) bool {
		out = append(out, v.(*Guest))
		return true
	})
	return out
}

// FindGuest returns the runtime of "cluster/ref", or of the guest of that
// cluster whose vmid or name is ref.
func FindGuest(cluster, ref string) *Guest {
	var found *Guest
	guests.Range(func(_, v any) bool {
		g := v.(*Guest)
		if g.clusterName != cluster {
			return true
		}
		g.mu.Lock()
		match := g.ref == ref || (g.target.vmid != 0 && strconv.Itoa(g.target.vmid) == ref) || (g.name != "" && g.name == ref)
		g.mu.Unlock()
		if match {
			found = g
			return false
		}
		return true
	})
	return found
}

// Guests returns the runtimes of this cluster's guests.
func (c *Cluster) Guests() []*Guest {
	var out []*Guest
	for _, g := range Guests() {
		if g.clusterName == c.Name() {
			out = append(out, g)
		}
	}
	return out
}

// FindGuest returns the runtime of this cluster's guest ref, or of its
// guest whose vmid or name is ref.
func (c *Cluster) FindGuest(ref string) *Guest { return FindGuest(c.Name(), ref) }

// WakeTimeout is the ruling config's wake_timeout.
func (g *Guest) WakeTimeout() time.Duration { return g.current().cfg.WakeTimeout }
