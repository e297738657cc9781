package api

import (
	"context"
	"net/http"
)

// withCluster answers 503 at once while the cluster cannot be served from
// (kube-apiserver unreachable, or caches not yet caught up after an
// outage), rather than serve stale state or hang on a write. Otherwise it
// returns the request with a context that ends when an outage starts, so
// that calls in flight fail fast too; call done when the request ends.
// Cluster-free routes pass; a session outlives a probe's hiccup.
func withCluster(q *request, flags routeFlags) (done func(), e *apiError) {
	if flags&clusterFree != 0 || q.c == nil {
		return func() {}, nil
	}
	if err := q.c.Healthy(); err != nil {
		return nil, newError(http.StatusServiceUnavailable, "cluster unavailable: %v", err)
	}
	if flags&session != 0 {
		return func() {}, nil
	}
	var ctx context.Context
	ctx, done = q.c.BindHealth(q.r.Context())
	q.r = q.r.WithContext(ctx)
	return done, nil
}
