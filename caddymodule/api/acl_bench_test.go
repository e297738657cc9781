package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.uber.org/zap"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
)

// BenchmarkClusterResourcesByRole serves /cluster/resources over 10,000
// VMs to an Administrator (no filtering), to a PVEAuditor on / (the same
// rows, each checked against the grants: the cost of filtering) and to a
// PVEVMUser of one pool (few rows); compare them within one run.
func BenchmarkClusterResourcesByRole(b *testing.B) {
	c, err := kube.Simulate(context.Background(), 10000, kube.Options{Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Stop()
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
		h.mux = h.routes()
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
