package kube

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Health probe settings: kube-apiserver's /readyz is asked every
// healthInterval, each try bounded by healthTimeout. A refused connection
// or an error answer marks the cluster down at once; timeouts only after
// healthTimeoutsDown in a row, so that a slow answer on a loaded machine is
// no outage.
const (
	healthInterval     = time.Second
	healthTimeout      = 2 * time.Second
	healthTimeoutsDown = 2
	// outageGrace is how long after the cluster comes back tasks whose
	// deadline passed meanwhile still wait for their goal: the controllers
	// catch up only once they can write again.
	outageGrace = 30 * time.Second
)

// ErrClusterDown is the cause of request contexts cancelled by an outage.
var ErrClusterDown = errors.New("the Kubernetes API server became unreachable")

// health tracks whether the cluster can be served from: kube-apiserver
// answers its readiness probe, and every informer's last list or watch
// call succeeded, so the caches follow the cluster again. While it is
// down, informers wait for it instead of retrying into growing backoffs,
// so that caches catch up within a probe interval after an outage.
type health struct {
	probe  func(ctx context.Context) error // nil: always up (in-memory cluster)
	logger *zap.Logger

	mu       sync.Mutex
	down     error            // probe failure; nil while up
	timeouts int              // probe timeouts in a row
	broken   map[string]error // informer (kind/namespace) -> last list/watch error
	brokenAt time.Time        // since when broken is not empty
	downAt   time.Time        // start of the current or last outage
	upAt     time.Time        // end of the last outage; zero if none
	up       chan struct{}    // closed while up
	nextID   uint64
	bound    map[uint64]context.CancelCauseFunc
	kick     chan struct{}
}

func newHealth(probe func(ctx context.Context) error, logger *zap.Logger) *health {
	up := make(chan struct{})
	close(up)
	return &health{probe: probe, logger: logger, broken: map[string]error{},
		up: up, bound: map[uint64]context.CancelCauseFunc{}, kick: make(chan struct{}, 1)}
}

// readyzProbe asks kube-apiserver's /readyz with its own client, so that a
// request rate limit or a slow informer never delays the verdict.
func readyzProbe(cfg *rest.Config) (func(ctx context.Context) error, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = healthTimeout
	cfg.QPS, cfg.Burst = 50, 100
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("health probe client: %w", err)
	}
	rc := kc.Discovery().RESTClient()
	host := cfg.Host
	return func(ctx context.Context) error {
		_, err := rc.Get().AbsPath("/readyz").DoRaw(ctx)
		switch {
		case err == nil, apierrors.IsForbidden(err), apierrors.IsUnauthorized(err), apierrors.IsNotFound(err):
			// It answered; who may read /readyz is RBAC's business.
			return nil
		}
		return fmt.Errorf("%s: %w", host, err)
	}, nil
}

// run probes until ctx ends.
func (h *health) run(ctx context.Context) {
	if h.probe == nil {
		return
	}
	t := time.NewTicker(healthInterval)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, healthTimeout)
		err := h.probe(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		h.report(err)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-h.kick:
		}
	}
}

func (h *health) report(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		h.timeouts = 0
		if h.down != nil {
			h.upAt = time.Now()
			h.logger.Info("kubernetes API server reachable again", zap.Duration("outage", h.upAt.Sub(h.downAt)))
			h.down = nil
			close(h.up)
		}
		return
	}
	if isTimeout(err) {
		h.timeouts++
		if h.timeouts < healthTimeoutsDown && h.down == nil {
			return
		}
	}
	if h.down == nil {
		h.logger.Warn("kubernetes API server unreachable: answering 503 until it is back", zap.Error(err))
		h.up = make(chan struct{})
		h.downAt = time.Now()
		for id, cancel := range h.bound {
			cancel(ErrClusterDown)
			delete(h.bound, id)
		}
	}
	h.down = err
}

// observe records the outcome of an informer's list or watch call.
// Connection failures and server errors make the informer stale and ask
// for an immediate probe; any success makes it current again.
func (h *health) observe(key string, err error) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		delete(h.broken, key)
		return
	}
	if !unreachable(err) {
		return
	}
	if len(h.broken) == 0 {
		h.brokenAt = time.Now()
	}
	h.broken[key] = err
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// wait blocks while the probe says the cluster is down, so that informers
// do not pile up failures (and reflector backoff) during an outage and
// resume as soon as it ends.
func (h *health) wait(ctx context.Context) error {
	_, err := h.waitUp(ctx)
	return err
}

// waitUp is wait, telling whether it had to wait.
func (h *health) waitUp(ctx context.Context) (waited bool, err error) {
	if h == nil {
		return false, nil
	}
	h.mu.Lock()
	up := h.up
	h.mu.Unlock()
	select {
	case <-up:
		return false, nil
	default:
	}
	select {
	case <-up:
		return true, nil
	case <-ctx.Done():
		return true, ctx.Err()
	}
}

// upAgain is closed when the cluster is up after an outage that is on
// now; while it is up, a channel that is never closed.
func (h *health) upAgain() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.up:
		return nil
	default:
		return h.up
	}
}

// Retries of an informer's list or watch while kube-apiserver answers its
// probe but cannot serve that call (a 5xx: an aggregated API or a CRD not
// served yet after a restart, etcd catching up). client-go's reflector
// would back off 0.8 s doubling to 30 s (with jitter up to 60 s) and stay
// there, leaving reads stale for that long after the cause has gone; the
// probe already keeps the informers off a cluster that is down, so these
// retries stay short.
var serveRetry = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.2, Cap: 2 * time.Second, Steps: math.MaxInt32}

// callServed makes an informer's list or watch call (key names the informer):
// it waits while the cluster is down, records the outcome (observe), and
// retries a call the apiserver could not serve on serveRetry, starting
// over after each outage, so that the reflector sees neither outages nor
// 5xx answers and never grows its own backoff on them. It gives up only
// on other errors (the reflector's business: a 410 relists, a 403 is
// logged) or when ctx ends.
func callServed[T any](ctx context.Context, h *health, key string, fn func(ctx context.Context) (T, error)) (T, error) {
	if h == nil {
		return fn(ctx)
	}
	b := serveRetry
	for {
		waited, err := h.waitUp(ctx)
		if err != nil {
			var zero T
			return zero, err
		}
		if waited {
			b = serveRetry
		}
		out, err := fn(ctx)
		h.observe(key, err)
		if err == nil || !unreachable(err) || ctx.Err() != nil {
			return out, err
		}
		t := time.NewTimer(b.Step())
		select {
		case <-ctx.Done():
			t.Stop()
			return out, err
		case <-t.C:
		case <-h.upAgain():
			// The probe saw the outage behind the error end: at once.
			t.Stop()
		}
	}
}

// err tells why the cluster cannot be served from, or nil.
func (h *health) err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.down != nil {
		return h.down
	}
	if len(h.broken) > 0 {
		keys := make([]string, 0, len(h.broken))
		for k := range h.broken {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return fmt.Errorf("caches of %s not in sync: %w", strings.Join(keys, ", "), h.broken[keys[0]])
	}
	return nil
}

// staleSince is since when the caches no longer follow the cluster (the
// start of the outage, or the first informer's failure), with why; zero
// and nil while they do.
func (h *health) staleSince() (time.Time, error) {
	err := h.err()
	if err == nil {
		return time.Time{}, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var since time.Time
	if h.down != nil {
		since = h.downAt
	}
	if len(h.broken) > 0 && (since.IsZero() || h.brokenAt.Before(since)) {
		since = h.brokenAt
	}
	if since.IsZero() { // it just came back
		since = time.Now()
	}
	return since, err
}

// recovered is when the last outage ended (zero if there was none).
func (h *health) recovered() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.upAt
}

// bind derives a context that is cancelled (cause ErrClusterDown) when an
// outage is detected, so that calls in flight fail fast instead of running
// into their timeouts. The binding is made on the context's first use:
// most requests are answered from the caches and never wait on the
// cluster, and registering each of them would cost more than answering.
func (h *health) bind(ctx context.Context) (context.Context, context.CancelFunc) {
	b := &boundContext{Context: ctx, h: h}
	return b, b.end
}

// bindNow is bind made at once.
func (h *health) bindNow(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	h.mu.Lock()
	if h.down != nil {
		h.mu.Unlock()
		cancel(ErrClusterDown)
		return ctx, func() {}
	}
	id := h.nextID
	h.nextID++
	h.bound[id] = cancel
	h.mu.Unlock()
	return ctx, func() {
		h.mu.Lock()
		delete(h.bound, id)
		h.mu.Unlock()
		cancel(context.Canceled)
	}
}

// boundContext is a context bound to the cluster's health on its first
// use (Done, Err or Value); its deadline is its parent's.
type boundContext struct {
	context.Context
	h *health

	bound atomic.Pointer[context.Context]
	mu    sync.Mutex
	ended bool
	end1  context.CancelFunc
}

func (b *boundContext) use() context.Context {
	if c := b.bound.Load(); c != nil {
		return *c
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if c := b.bound.Load(); c != nil {
		return *c
	}
	var c context.Context
	if b.ended {
		// Used after its request ended: as cancelled as it would be.
		var cancel context.CancelFunc
		c, cancel = context.WithCancel(b.Context)
		cancel()
	} else {
		c, b.end1 = b.h.bindNow(b.Context)
	}
	b.bound.Store(&c)
	return c
}

func (b *boundContext) end() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ended = true
	if b.end1 != nil {
		b.end1()
	}
}

func (b *boundContext) Done() <-chan struct{} { return b.use().Done() }
func (b *boundContext) Err() error            { return b.use().Err() }
func (b *boundContext) Value(key any) any     { return b.use().Value(key) }

// Healthy returns nil when the cluster is reachable and every cache
// follows it, else why not. The HTTP layer answers 503 meanwhile rather
// than serve stale state or hang on writes.
func (c *Cluster) Healthy() error {
	return c.health.err()
}

// Stale tells since when the caches no longer follow the cluster, and
// why (zero and nil while they do). A caller may still serve reads from
// them for a while: the cached state is what the cluster held at that
// moment, and a restart of kube-apiserver takes seconds.
func (c *Cluster) Stale() (since time.Time, err error) {
	return c.health.staleSince()
}

// BindHealth returns a context that is cancelled when the cluster becomes
// unreachable (context.Cause is ErrClusterDown); call cancel when done.
func (c *Cluster) BindHealth(ctx context.Context) (context.Context, context.CancelFunc) {
	return c.health.bind(ctx)
}

// unreachable tells whether err means the apiserver could not serve at
// all (as opposed to refusing the request).
func unreachable(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	if utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) || isTimeout(err) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return se.Status().Code >= 500
	}
	return false
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) ||
		apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err)
}

type healthKey struct{}

// withHealth hands the tracker to the informers built under ctx.
func withHealth(ctx context.Context, h *health) context.Context {
	return context.WithValue(ctx, healthKey{}, h)
}

func healthFrom(ctx context.Context) *health {
	h, _ := ctx.Value(healthKey{}).(*health)
	return h
}
