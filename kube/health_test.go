package kube

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testutil"
)

func TestHealthTransitions(t *testing.T) {
	h := newHealth(func(context.Context) error { return nil }, zap.NewNop())
	if err := h.err(); err != nil {
		t.Fatalf("fresh tracker: %v", err)
	}
	inflight, cancel := h.bind(context.Background())
	defer cancel()

	// One timeout is a slow answer, not an outage; two are.
	h.report(context.DeadlineExceeded)
	if h.err() != nil || inflight.Err() != nil {
		t.Fatal("one probe timeout marked the cluster down")
	}
	h.report(context.DeadlineExceeded)
	if h.err() == nil {
		t.Fatal("two probe timeouts did not mark the cluster down")
	}
	if !errors.Is(context.Cause(inflight), ErrClusterDown) {
		t.Fatalf("bound context after outage: %v", context.Cause(inflight))
	}
	if late, _ := h.bind(context.Background()); late.Err() == nil {
		t.Fatal("context bound during an outage is not cancelled")
	}

	// Informers wait during the outage and go on when it ends.
	waited := make(chan error, 1)
	go func() { waited <- h.wait(context.Background()) }()
	testutil.WaitParked(t, waitTimeout, "github.com/caddy-proxmox/caddy-proxmox/kube.(*health).wait")
	select {
	case err := <-waited:
		t.Fatalf("wait returned during the outage: %v", err)
	default:
	}
	h.report(nil)
	select {
	case err := <-waited:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("wait did not return after recovery")
	}
	if h.recovered().IsZero() {
		t.Fatal("recovery time not recorded")
	}

	// A refused connection is down at once.
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	h.report(refused)
	if h.err() == nil {
		t.Fatal("connection refused did not mark the cluster down")
	}
	h.report(nil)

	// A cache whose watch failed keeps the cluster unservable until a call
	// of that informer succeeds; refusals by RBAC do not count.
	h.observe("VirtualMachine", fmt.Errorf("watch: %w", refused))
	if err := h.err(); err == nil {
		t.Fatal("broken informer not reported")
	}
	h.observe("Node", apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", errors.New("no")))
	h.observe("VirtualMachine", nil)
	if err := h.err(); err != nil {
		t.Fatalf("after the informer recovered: %v", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	stop()
	if err := (*health)(nil).wait(ctx); err != nil {
		t.Fatal("nil tracker must never block")
	}
}

// TestHealthStaleSince: the caches are stale from the first sign that they
// stopped following the cluster (a failed watch may come before the
// probe's verdict), and current again once both are over.
func TestHealthStaleSince(t *testing.T) {
	h := newHealth(func(context.Context) error { return nil }, zap.NewNop())
	if since, err := h.staleSince(); err != nil || !since.IsZero() {
		t.Fatalf("fresh tracker: %v %v", since, err)
	}
	refused := &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}
	t0 := time.Now()
	h.observe("VirtualMachine", refused)
	watchFailed, err := h.staleSince()
	if err == nil || watchFailed.Before(t0) || watchFailed.After(time.Now()) {
		t.Fatalf("after a failed watch: %v %v", watchFailed, err)
	}
	h.report(refused)
	if since, err := h.staleSince(); err == nil || !since.Equal(watchFailed) {
		t.Fatalf("after the probe failed too: %v %v, want %v", since, err, watchFailed)
	}
	h.report(nil)
	if since, err := h.staleSince(); err == nil || !since.Equal(watchFailed) {
		t.Fatalf("probe back, watch not yet: %v %v, want %v", since, err, watchFailed)
	}
	h.observe("VirtualMachine", nil)
	if since, err := h.staleSince(); err != nil || !since.IsZero() {
		t.Fatalf("all back: %v %v", since, err)
	}
	// Down by the probe alone: stale since it said so.
	t1 := time.Now()
	h.report(refused)
	if since, err := h.staleSince(); err == nil || since.Before(t1) {
		t.Fatalf("probe down: %v %v", since, err)
	}
}

// TestCallServedRetries: an informer's call the apiserver cannot serve
// (5xx, a refused connection) is retried soon, so that the reflector
// never sees it; a refusal (403, 410) goes to the reflector at once; a
// retry during an outage waits for it to end and goes at once then.
func TestCallServedRetries(t *testing.T) {
	h := newHealth(func(context.Context) error { return nil }, zap.NewNop())
	ctx := context.Background()
	unavailable := apierrors.NewServiceUnavailable("the server is currently unable to handle the request")
	var calls atomic.Int32
	fails := func(n int, err error) func(context.Context) (int, error) {
		calls.Store(0)
		return func(context.Context) (int, error) {
			c := int(calls.Add(1))
			if c <= n {
				return 0, err
			}
			return c, nil
		}
	}
	t0 := time.Now()
	if got, err := callServed(ctx, h, "VirtualMachine", fails(3, unavailable)); err != nil || got != 4 {
		t.Fatalf("after three 503s: %d, %v; want the fourth call's answer", got, err)
	}
	if took := time.Since(t0); took > 10*time.Second {
		t.Errorf("three retries took %v", took)
	}
	if h.err() != nil {
		t.Fatalf("the cache stays stale after the retry succeeded: %v", h.err())
	}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "kubevirt.io", Resource: "virtualmachines"}, "", errors.New("no"))
	if _, err := callServed(ctx, h, "VirtualMachine", fails(1, forbidden)); !apierrors.IsForbidden(err) || calls.Load() != 1 {
		t.Fatalf("a 403: %v after %d calls; want it at once", err, calls.Load())
	}
	if _, err := callServed(ctx, (*health)(nil), "VirtualMachine", fails(1, unavailable)); err == nil || calls.Load() != 1 {
		t.Fatalf("without health: %v after %d calls; want one call", err, calls.Load())
	}

	// A 503 that was an outage: the retry waits for the probe, then goes.
	done := make(chan error, 1)
	fn := fails(1, unavailable)
	go func() {
		_, err := callServed(ctx, h, "VirtualMachine", func(ctx context.Context) (int, error) {
			if calls.Load() == 0 {
				h.report(syscall.ECONNREFUSED)
			}
			return fn(ctx)
		})
		done <- err
	}()
	testutil.WaitParked(t, waitTimeout, "github.com/caddy-proxmox/caddy-proxmox/kube.(*health).waitUp")
	if calls.Load() != 1 {
		t.Fatalf("%d calls during the outage", calls.Load())
	}
	h.report(nil)
	select {
	case err := <-done:
		if err != nil || calls.Load() != 2 {
			t.Fatalf("after the outage: %v after %d calls", err, calls.Load())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no retry after the outage ended")
	}
}
