package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
)

// BenchmarkClusterResourcesByRole serves /cluster/resources over 10,000
// VMs to an Administrator (no filtering), to a PVEAuditor on / (the same
// rows, each checked against the grants: the cost of filtering) and to a
// PVEVMUser of one pool (few rows); compare them within one run.
func BenchmarkClusterResourcesByRole(b *testing.B) {
	c := simulated(b, 10000)
	var err error
	for _, tc := range []struct {
		name  string
		grant []GrantConfig
	}{
		{"administrator", nil},
		{"auditor-on-root", []GrantConfig{{Path: "/", Role: "PVEAuditor"}}},
		{"pool-vm-user", []GrantConfig{{Path: "/pool/lab", Role: "PVEVMUser"}, {Path: "/vms/100", Role: "PVEAuditor"}}},
	} {
		h := &APIHandler{ClusterName: "bench", logger: zap.NewNop(), cluster: c}
		h.auth = newAuthenticator([]byte("bench-key"))
		h.auth.tokens["u@pve!b"] = "s"
		h.perms, err = newPermissions(false, []IdentityConfig{{ID: "u@pve", Roles: tc.grant}}, "")
		if err != nil {
			b.Fatal(err)
		}
		h.metrics, _ = newAPIMetrics(nil)
		h.router = h.routes()
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodGet, "https://x/api2/json/cluster/resources?type=vm", nil)
				req.Header.Set("Authorization", "PVEAPIToken=u@pve!b=s")
				rec := httptest.NewRecorder()
				if err := h.ServeHTTP(rec, req, &nextHandler{}); err != nil || rec.Code != 200 {
					b.Fatalf("%v %d %s", err, rec.Code, rec.Body.String())
				}
			}
		})
	}
}

// BenchmarkQemuStatusCurrent serves one VM's status/current to a
// PVEAuditor, so that the route's VM.Audit check runs: the check and the
// endpoint share one vmid parse and one guest lookup, and the node is a
// map lookup.
func BenchmarkQemuStatusCurrent(b *testing.B) {
	c := simulated(b, 1000)
	var err error
	h := &APIHandler{ClusterName: "bench", logger: zap.NewNop(), cluster: c}
	h.auth = newAuthenticator([]byte("bench-key"))
	h.auth.tokens["u@pve!b"] = "s"
	h.perms, err = newPermissions(false, []IdentityConfig{{ID: "u@pve", Roles: []GrantConfig{{Path: "/", Role: "PVEAuditor"}}}}, "")
	if err != nil {
		b.Fatal(err)
	}
	h.metrics, _ = newAPIMetrics(nil)
	h.router = h.routes()
	g, err := c.Guest(100)
	if err != nil {
		b.Fatal(err)
	}
	url := "https://x/api2/json/nodes/" + g.Node + "/qemu/100/status/current"
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Authorization", "PVEAPIToken=u@pve!b=s")
		rec := httptest.NewRecorder()
		if err := h.ServeHTTP(rec, req, &nextHandler{}); err != nil || rec.Code != 200 {
			b.Fatalf("%v %d %s", err, rec.Code, rec.Body.String())
		}
	}
}

// BenchmarkRowRebuild builds a running VM's row anew (its VM or instance
// changed: both are decoded) and after a new usage reading alone (the
// row's object facts are kept): every reading rebuilds the rows of every
// running VM.
func BenchmarkRowRebuild(b *testing.B) {
	c := simulated(b, 10)
	h := &APIHandler{ClusterName: "bench", logger: zap.NewNop(), cluster: c}
	r := h.vmRows(c)
	var running kube.Guest
	for _, g := range c.Guests() {
		if g.State().Running() {
			running = g
			break
		}
	}
	if running.VMID == 0 {
		b.Fatal("no running VM")
	}
	in := r.inputs(c, running)
	prev := buildRow(running, in, nil)
	reading := in
	reading.usage, reading.hasUsage = kube.Usage{CPUCores: 0.5, MemBytes: 1 << 30}, true
	for _, tc := range []struct {
		name string
		prev *guestRow
	}{{"objects-changed", nil}, {"reading-changed", prev}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				// A Guest of its own each time: a Guest keeps what it decoded.
				g, err := c.Guest(running.VMID)
				if err != nil {
					b.Fatal(err)
				}
				if row := buildRow(g, reading, tc.prev); row.f.mem != 1<<30 {
					b.Fatalf("row mem %d, want the reading's", row.f.mem)
				}
			}
		})
	}
}

// simulated is a simulated cluster of n extra VMs for one benchmark.
func simulated(b *testing.B, n int) *kube.Cluster {
	b.Helper()
	c, err := kube.Simulate(context.Background(), n, kube.Options{Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Stop)
	// The simulated controller looks at every VM once when it starts:
	// measure once it has gone quiet (no change to what Guests shows for
	// half a second), not against its work.
	deadline := time.Now().Add(time.Minute)
	for v := c.GuestsVersion(); time.Now().Before(deadline); {
		time.Sleep(500 * time.Millisecond)
		w := c.GuestsVersion()
		if w == v {
			break
		}
		v = w
	}
	return c
}
