package api

import (
	"context"
	"net/http"
	"time"
)

// defaultStaleReads is how long reads outlive the caches' last contact
// with the cluster by default: longer than a restart of kube-apiserver.
const defaultStaleReads = 30 * time.Second

// staleReads is StaleReads or its default.
func (h *APIHandler) staleReads() time.Duration {
	if h.StaleReads != nil {
		return time.Duration(*h.StaleReads)
	}
	return defaultStaleReads
}

// withCluster answers 503 at once while the cluster cannot be served from
// (kube-apiserver unreachable, or caches not caught up after an outage):
// a write, at once, rather than hang or act on stale state; a read once
// the caches have stopped following the cluster for longer than
// staleFor; until then reads are answered from the caches, as they were
// at that moment. Otherwise it returns the request with a context that
// ends when an outage starts, so that calls in flight fail fast too; call
// done when the request ends. Cluster-free routes pass; a session
// outlives a probe's hiccup.
func withCluster(q *request, flags routeFlags, staleFor time.Duration) (done func(), e *apiError) {
	if flags&clusterFree != 0 || q.c == nil {
		return func() {}, nil
	}
	if since, err := q.c.Stale(); err != nil {
		read := q.r.Method == http.MethodGet || q.r.Method == http.MethodHead
		if !read || flags&session != 0 || time.Since(since) >= staleFor {
			return nil, newError(http.StatusServiceUnavailable, "cluster unavailable: %v", err)
		}
	}
	if flags&session != 0 {
		return func() {}, nil
	}
	var ctx context.Context
	ctx, done = q.c.BindHealth(q.r.Context())
	q.r = q.r.WithContext(ctx)
	return done, nil
}
