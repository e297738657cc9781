package api_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
)

// TestTrustCaddyAuth: a user authenticated by basic_auth in front is
// accepted, and the API sees them as user@realm.
func TestTrustCaddyAuth(t *testing.T) {
	a := shared(t)
	sso := &testcaddy.PVE{T: t, Base: fmt.Sprintf("https://localhost:%d", ssoPort), C: a.C}
	// basic_auth answers before the API: no credentials, no entry.
	if code := rawStatus(t, sso, ""); code != 401 {
		t.Fatalf("without basic auth: %d", code)
	}
	sso.Auth = func(r *http.Request) { r.SetBasicAuth("carol", "sso-pass") }
	var users []map[string]any
	sso.OK("GET", "/access/users", nil, &users)
	found := false
	for _, u := range users {
		if u["userid"] == "carol@sso" {
			found = true
		}
	}
	if !found {
		t.Fatalf("caller not listed as carol@sso: %v", users)
	}
	var upid string
	sso.OK("POST", "/nodes/kv-node-2-lab-internal/qemu/101/status/stop", nil, &upid)
	if !strings.HasSuffix(upid, ":qmstop:101:carol@sso:") {
		t.Fatalf("task user: %s", upid)
	}
	sso.WaitTask(upid)
	if code := rawStatus(t, sso, "wrong"); code != 401 {
		t.Fatalf("bad basic auth: %d", code)
	}
}

func rawStatus(t *testing.T, a *testcaddy.PVE, password string) int {
	req, _ := http.NewRequest("GET", a.Base+"/api2/json/nodes", nil)
	if password != "" {
		req.SetBasicAuth("carol", password)
	}
	res, err := a.C.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// TestUnimplementedIsCounted: a 501 is logged and counted on Caddy's
// metrics registry with a bounded path template.
func TestUnimplementedIsCounted(t *testing.T) {
	a := shared(t)
	for i := 0; i < 3; i++ {
		if ans := a.Do("POST", "/nodes/kv-node-1-lab-internal/qemu/100/spiceproxy", nil); ans.Code != 501 {
			t.Fatalf("spiceproxy: %s", ans.Status)
		}
	}
	res, err := a.C.Get(fmt.Sprintf("https://localhost:%d/metrics", ssoPort))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	want := `caddy_proxmox_api_unimplemented_requests_total{method="POST",path="/nodes/{node}/qemu/{id}/spiceproxy"}`
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, want) {
			var n float64
			fmt.Sscan(strings.TrimPrefix(line, want), &n)
			if n < 3 {
				t.Fatalf("counter %v, want >= 3", n)
			}
			return
		}
	}
	t.Fatalf("metric %s missing from:\n%s", want, body)
}
