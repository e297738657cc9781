package api

import (
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
// at that moment. Otherwise the request's cluster calls (ctx) are bound
// to the cluster's health, so that calls in flight fail fast when an
// outage starts. Cluster-free routes pass; a session outlives a probe's
// hiccup.
func withCluster(q *request, flags routeFlags, staleFor time.Duration) *apiError {
	if flags&clusterFree != 0 || q.c == nil {
		return nil
	}
	if since, err := q.c.Stale(); err != nil {
		read := q.r.Method == http.MethodGet || q.r.Method == http.MethodHead
		if !read || flags&session != 0 || time.Since(since) >= staleFor {
			return newError(http.StatusServiceUnavailable, "cluster unavailable: %v", err)
		}
	}
	q.health = flags&session == 0
	return nil
}
