package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
)

var (
	fuzzOnce    sync.Once
	fuzzHandler *APIHandler
)

// handlerForFuzz is the API over a simulated cluster, without Caddy
// around it, so that each fuzz input costs one in-process call.
func handlerForFuzz(t testing.TB) *APIHandler {
	fuzzOnce.Do(func() {
		c, err := kube.Simulate(context.Background(), 0, kube.Options{Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		h := &APIHandler{Tokens: []TokenConfig{{ID: "root@pam!fuzz", Secret: "fuzz-secret"}}, ClusterName: "fuzz"}
		h.auth = newAuthenticator([]byte("fuzz-key"))
		h.auth.tokens["root@pam!fuzz"] = "fuzz-secret"
		// PVEAdmin rather than Administrator: every request then runs the
		// role evaluation instead of its all-admin short cut.
		perms, err := newPermissions(false, []IdentityConfig{{ID: "root@pam!fuzz", Roles: []GrantConfig{{Path: "/", Role: "PVEAdmin"}}}}, "")
		if err != nil {
			t.Fatal(err)
		}
		h.perms = perms
		h.logger = zap.NewNop()
		h.metrics, _ = newAPIMetrics(nil)
		h.cluster = c
		h.router = h.routes()
		fuzzHandler = h
	})
	return fuzzHandler
}

type nextHandler struct{ called bool }

func (n *nextHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) error {
	n.called = true
	return nil
}

// FuzzAPI throws arbitrary methods, paths, queries, bodies and headers at
// the API. Every answer must be PVE-shaped (a JSON envelope with "data"),
// with a status PVE uses, and no input may reach the panic handler.
func FuzzAPI(f *testing.F) {
	seeds := [][5]string{
		{"GET", "/api2/json/nodes", "", "", ""},
		{"GET", "/api2/json/cluster/resources", "type=vm", "", ""},
		{"POST", "/api2/json/nodes/kv-node-1-lab-internal/qemu", "", "vmid=900&name=x&net0=virtio,bridge=vmbr0&scsi0=local-lvm:1", "application/x-www-form-urlencoded"},
		{"PUT", "/api2/json/nodes/kv-node-1-lab-internal/qemu/100/config", "", `{"cores":2,"delete":"tablet"}`, "application/json"},
		{"GET", "/api2/json/nodes/x/tasks/UPID:x:0:0:0:a:b:c:/status", "", "", ""},
		{"DELETE", "/api2/json/nodes/kv-node-1-lab-internal/qemu/101", "purge=1", "x=1", ""},
		{"POST", "/api2/json/access/ticket", "", "username=root@pam&password=PVE:root@pam:00000000::AAAA", ""},
		{"GET", "/api2/json//nodes/../cluster/%2e%2e/status", "", "", ""},
		{"POST", "/api2/json/nodes/kv-node-1-lab-internal/qemu/100/snapshot", "", "snapname=a%00b", ""},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1], s[2], s[3], s[4], true)
	}
	allowed := map[int]bool{200: true, 400: true, 401: true, 403: true, 413: true, 500: true, 501: true, 503: true}
	f.Fuzz(func(t *testing.T, method, path, query, body, ctype string, auth bool) {
		h := handlerForFuzz(t)
		req, err := http.NewRequest(method, "https://x/", strings.NewReader(body))
		if err != nil {
			return // not a request any client could send
		}
		req.URL.Path = path
		req.URL.RawQuery = query
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		if auth {
			req.Header.Set("Authorization", "PVEAPIToken=root@pam!fuzz=fuzz-secret")
		}
		rec := httptest.NewRecorder()
		next := &nextHandler{}
		if err := h.ServeHTTP(rec, req, next); err != nil {
			t.Fatalf("handler error: %v", err)
		}
		if next.called {
			if strings.HasPrefix(path, "/api2/json/") || path == "/api2/json" {
				t.Fatalf("API path %q went to the next handler", path)
			}
			return
		}
		if !allowed[rec.Code] {
			t.Fatalf("%s %q: status %d", method, path, rec.Code)
		}
		var env map[string]json.RawMessage
		if err := json.Unmarshal(rec.Body.Bytes(), &env); err != nil {
			t.Fatalf("%s %q: body is not JSON: %q", method, path, rec.Body.String())
		}
		if _, ok := env["data"]; !ok {
			t.Fatalf("%s %q: no data key: %s", method, path, rec.Body.String())
		}
		if strings.Contains(rec.Body.String(), "internal error (incident") {
			t.Fatalf("%s %q %q %q: reached the panic handler", method, path, query, body)
		}
	})
}
