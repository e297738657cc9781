package api

import (
	"errors"
	"regexp"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// apiMetrics are the handler's Prometheus collectors on Caddy's registry.
type apiMetrics struct {
	unimplemented *prometheus.CounterVec
}

func newAPIMetrics(reg *prometheus.Registry) (*apiMetrics, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "caddy",
		Subsystem: "proxmox_api",
		Name:      "unimplemented_requests_total",
		Help:      "Requests for Proxmox API paths this server does not implement, by method and path template.",
	}, []string{"method", "path"})
	if reg == nil {
		return &apiMetrics{unimplemented: c}, nil
	}
	if err := reg.Register(c); err != nil {
		// A config reload provisions a new handler against the same
		// registry; keep counting on the existing collector.
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, err
		}
		c = are.ExistingCollector.(*prometheus.CounterVec)
	}
	return &apiMetrics{unimplemented: c}, nil
}

// pveRoots are the top-level directories of the PVE API.
var pveRoots = map[string]bool{"access": true, "cluster": true, "nodes": true, "pools": true, "storage": true, "version": true}

var (
	upidSegment = regexp.MustCompile(`^UPID:`)
	numSegment  = regexp.MustCompile(`^[0-9]+$`)
)

// pathTemplate replaces ids in a path by placeholders so that the metric's
// label set stays bounded whatever paths clients try.
func pathTemplate(p string) string {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	if !pveRoots[parts[0]] {
		return "/{unknown}"
	}
	if len(parts) > 8 {
		parts = append(parts[:8], "...")
	}
	for i, s := range parts {
		switch {
		case i > 0 && parts[i-1] == "nodes":
			parts[i] = "{node}"
		case upidSegment.MatchString(s):
			parts[i] = "{upid}"
		case numSegment.MatchString(s):
			parts[i] = "{id}"
		case i > 0 && (parts[i-1] == "storage" || parts[i-1] == "snapshot" || parts[i-1] == "pools"):
			parts[i] = "{name}"
		case len(s) > 40:
			parts[i] = "{long}"
		}
	}
	// Label values must be UTF-8; whatever a client sends is not.
	return strings.ToValidUTF8("/"+strings.Join(parts, "/"), "?")
}

// methodLabel keeps the method label set bounded.
func methodLabel(m string) string {
	switch m {
	case "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS":
		return m
	}
	return "OTHER"
}
