package api

import (
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
