package api

import (
	"context"
	"net/http"
	"strings"
)

// clusterFree are the endpoints that need nothing from the cluster, so
// they answer during an outage too: the version, the indexes and login
// (tickets are signed locally).
var clusterFree = map[string]bool{
	"GET /":               true,
	"GET /version":        true,
	"GET /access":         true,
	"GET /access/ticket":  true,
	"POST /access/ticket": true,
	"GET /access/domains": true,
}

// withCluster answers 503 at once while the cluster cannot be served from
// (kube-apiserver unreachable, or caches not yet caught up after an
// outage), rather than serve stale state or hang on a write. Otherwise it
// returns the request with a context that ends when an outage starts, so
// that calls in flight fail fast too; call done when the request ends.
func withCluster(q *request, pattern string) (done func(), e *apiError) {
	if clusterFree[pattern] || q.c == nil {
		return func() {}, nil
	}
	if err := q.c.Healthy(); err != nil {
		return nil, newError(http.StatusServiceUnavailable, "cluster unavailable: %v", err)
	}
	if strings.HasSuffix(q.r.URL.Path, "/vncwebsocket") {
		return func() {}, nil // a console session outlives a probe hiccup
	}
	var ctx context.Context
	ctx, done = q.c.BindHealth(q.r.Context())
	q.r = q.r.WithContext(ctx)
	return done, nil
}
