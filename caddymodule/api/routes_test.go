package api

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"
)

// TestRouteTableDeclaresEveryNeed: every route says who may call it. A
// route that forgot its privileges must not silently default to "any
// authenticated caller"; public routes carry no checks, which would never
// run.
func TestRouteTableDeclaresEveryNeed(t *testing.T) {
	isSignedIn := func(n needFunc) bool {
		return reflect.ValueOf(n).Pointer() == reflect.ValueOf(signedIn).Pointer()
	}
	seen := map[string]bool{}
	for _, rt := range new(APIHandler).routeTable() {
		pattern := rt.method + " " + rt.path
		if seen[pattern] {
			t.Errorf("%s: listed twice", pattern)
		}
		seen[pattern] = true
		switch {
		case rt.serve == nil:
			t.Errorf("%s: no endpoint", pattern)
		case rt.flags&public != 0 && rt.needs != nil:
			t.Errorf("%s: public, yet declares needs (they would never run)", pattern)
		case rt.flags&public == 0 && rt.needs == nil:
			t.Errorf("%s: declares no needs: give it its privileges, or signedIn", pattern)
		case rt.flags&public != 0 && rt.flags&clusterFree == 0:
			t.Errorf("%s: public but not cluster-free: login must work during an outage", pattern)
		}
		// Every VM, storage and pool path is guarded by a privilege on it,
		// as in PVE's schema; only lists filter by themselves.
		for _, guarded := range []string{"{vmid}", "{storage}", "{poolid}"} {
			if strings.Contains(rt.path, guarded) && rt.needs != nil && isSignedIn(rt.needs) {
				t.Errorf("%s: names a %s but checks no privilege on it", pattern, guarded)
			}
		}
		if rt.flags&(clusterFree|public) != 0 && strings.Contains(rt.path, "{") {
			t.Errorf("%s: cluster-free routes name nothing in the cluster", pattern)
		}
	}
	if len(seen) < 89 {
		t.Errorf("%d routes; the API had 89 when this test was written", len(seen))
	}
}

// TestRouterMatchesServeMux holds the router against http.ServeMux, which
// it replaces on the hot path: registered with the same patterns, both
// must pick the same route and wildcard values (or none) for every route
// and method, for each wildcard filled with plain, escaped and tricky
// segments, and for paths no route has. Where ServeMux would redirect
// (a {volume...} route's path without its volume) the router has no
// route: pveproxy answers those 501, as the router's miss does.
func TestRouterMatchesServeMux(t *testing.T) {
	routes := new(APIHandler).routeTable()
	mux := http.NewServeMux()
	for _, rt := range routes {
		p := rt.path
		if p == "/" {
			p = ""
		}
		mux.Handle(rt.method+" /api2/json"+p, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	}
	rr := newRouter(routes)
	fills := []string{"x", "100", "local:iso%2Fx.iso", "a%20b", "current", "status", "config", "%7Bvmid%7D", "a.b"}
	var paths []string
	for _, rt := range routes {
		for _, f := range fills {
			segs := strings.Split(rt.path, "/")
			for i, s := range segs {
				if strings.HasPrefix(s, "{") {
					segs[i] = f
					if strings.HasSuffix(s, "...}") {
						segs[i] = f + "/" + f
					}
				}
			}
			p := strings.Join(segs, "/")
			paths = append(paths, p, p+"/extra", strings.TrimSuffix(p, "/"+segs[len(segs)-1]))
		}
	}
	paths = append(paths, "/", "/nodes/n/qemu/100/status/current/x", "/nodes/n/storage/s/content", "/pools/a%2Fb", "/cluster/ha/status/current")
	methods := []string{"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"}
	checked := 0
	for _, p := range paths {
		if p == "" {
			p = "/"
		}
		full := "/api2/json" + p
		if p == "/" {
			full = "/api2/json"
		}
		u, err := url.Parse("http://x" + full)
		if err != nil {
			continue
		}
		for _, m := range methods {
			req := &http.Request{Method: m, URL: u, Host: "x"}
			handler, pattern := mux.Handler(req)
			if pattern != "" {
				// ServeMux redirects /content to the /content/ of a
				// {volume...} route; PVE has no redirects: no route.
				rec := httptest.NewRecorder()
				handler.ServeHTTP(rec, req)
				if rec.Code == http.StatusMovedPermanently || rec.Code == http.StatusTemporaryRedirect {
					pattern = ""
				}
			}
			var v pathValues
			b := rr.match(m, p, &v)
			got := ""
			if b != nil {
				got = b.method + " /api2/json" + strings.TrimSuffix(b.path, "/")
				if b.path == "/" {
					got = b.method + " /api2/json"
				}
			}
			if got != pattern {
				t.Errorf("%s %s: router picks %q, ServeMux %q", m, full, got, pattern)
				continue
			}
			if b == nil {
				continue
			}
			// ServeMux fills the values when it serves: ask it through a
			// handler of its own per route.
			vm := http.NewServeMux()
			var want map[string]string
			vm.HandleFunc(pattern, func(_ http.ResponseWriter, r *http.Request) {
				want = map[string]string{}
				for _, n := range b.wildcards {
					want[n] = r.PathValue(n)
				}
			})
			vm.ServeHTTP(httptest.NewRecorder(), req)
			for _, n := range b.wildcards {
				if v.get(n) != want[n] {
					t.Errorf("%s %s: {%s} is %q, ServeMux says %q", m, full, n, v.get(n), want[n])
				}
			}
			checked++
		}
	}
	if checked < 500 {
		t.Errorf("only %d matches compared", checked)
	}
}
