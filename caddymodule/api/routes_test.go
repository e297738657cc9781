package api

import (
	"fmt"
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
	mux, rr := routeMux(routes), newRouter(routes)
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
	checked := 0
	for _, p := range paths {
		if p == "" {
			p = "/"
		}
		for _, m := range routeMethods {
			if err := sameRoute(mux, rr, m, p); err != "" {
				t.Error(err)
			}
			checked++
		}
	}
	if checked < 500 {
		t.Errorf("only %d matches compared", checked)
	}
}

// FuzzRouterMatchesServeMux is TestRouterMatchesServeMux on any clean
// path: the router and ServeMux agree on the route and its values.
func FuzzRouterMatchesServeMux(f *testing.F) {
	for _, s := range []string{"/", "/nodes/n/qemu/100/status/current", "/nodes/n/storage/local/content/local:iso%2Fx.iso", "/pools/a", "/nodes/n/storage/s/content/a/b/c"} {
		f.Add(uint8(0), s)
		f.Add(uint8(4), s)
	}
	routes := new(APIHandler).routeTable()
	mux, rr := routeMux(routes), newRouter(routes)
	f.Fuzz(func(t *testing.T, m uint8, p string) {
		// What ServeHTTP hands the router: a clean, escaped path without
		// dot segments.
		u, err := url.Parse("http://x/api2/json" + p)
		if err != nil || p == "" || !cleanPath(p) && p != "/" || u.EscapedPath() != "/api2/json"+p || u.RawQuery != "" || u.Fragment != "" {
			return
		}
		for _, seg := range strings.Split(u.Path, "/") {
			if seg == "." || seg == ".." {
				return
			}
		}
		if err := sameRoute(mux, rr, routeMethods[int(m)%len(routeMethods)], p); err != "" {
			t.Error(err)
		}
	})
}

var routeMethods = []string{"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"}

// routeMux is a ServeMux over routes, as the router registers them.
func routeMux(routes []route) *http.ServeMux {
	mux := http.NewServeMux()
	for _, rt := range routes {
		p := rt.path
		if p == "/" {
			p = ""
		}
		mux.Handle(rt.method+" /api2/json"+p, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	}
	return mux
}

// sameRoute tells how the router and ServeMux differ on method and p
// (relative to /api2/json, escaped), "" when they agree.
func sameRoute(mux *http.ServeMux, rr *router, m, p string) string {
	full := "/api2/json" + p
	if p == "/" {
		full = "/api2/json"
	}
	u, err := url.Parse("http://x" + full)
	if err != nil {
		return ""
	}
	req := &http.Request{Method: m, URL: u, Host: "x"}
	handler, pattern := mux.Handler(req)
	if pattern != "" {
		// ServeMux redirects /content to the /content/ of a {volume...}
		// route; PVE has no redirects: no route.
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
	}
	if got != pattern {
		return fmt.Sprintf("%s %s: router picks %q, ServeMux %q", m, full, got, pattern)
	}
	if b == nil {
		return ""
	}
	// ServeMux fills the values when it serves: ask it through a mux of
	// this route alone.
	one := http.NewServeMux()
	want := map[string]string{}
	one.HandleFunc(pattern, func(_ http.ResponseWriter, r *http.Request) {
		for _, n := range b.wildcards {
			want[n] = r.PathValue(n)
		}
	})
	one.ServeHTTP(httptest.NewRecorder(), req)
	for _, n := range b.wildcards {
		if v.get(n) != want[n] {
			return fmt.Sprintf("%s %s: {%s} is %q, ServeMux says %q", m, full, n, v.get(n), want[n])
		}
	}
	return ""
}
