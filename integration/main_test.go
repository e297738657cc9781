// Package integration runs caddy-proxmox inside a real Caddy against a real
// kube-apiserver and etcd (with the KubeVirt CRDs, RBAC on, the stand-in
// controller and virt-api), and drives it with real Proxmox clients.
package integration

import (
	"context"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"kubevirt.io/client-go/containerizeddataimporter"
	"kubevirt.io/client-go/kubevirt"

	_ "github.com/caddy-proxmox/caddy-proxmox/caddymodule"
	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
	"github.com/caddy-proxmox/caddy-proxmox/kubevirtsim"
	"github.com/caddy-proxmox/caddy-proxmox/testenv"
)

const (
	tokenID     = "root@pam!ci"
	tokenSecret = "4a6d2f0e-71c5-4f8e-9b3a-2d1c0e9f8a7b"
	userID      = "alice@pve"
	userPass    = "correct-horse"
)

var (
	env *testenv.Env
	// uploads plays cdi-apiserver's tokens and cdi-uploadproxy.
	uploads *kubevirtsim.UploadProxy
	// base is the API with virt-api present; fallbackBase the same cluster
	// reached through a proxy without virt-api.
	base, fallbackBase string
	// metricsBase reaches the cluster through a proxy serving
	// metrics.k8s.io, with a Prometheus stub; hangingPromBase has the
	// metrics API too but a Prometheus that never answers (metrics_test.go).
	metricsBase, hangingPromBase string
	caddyDir                     string
	directConfig                 *rest.Config
)

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{
		Seed: true,
		Controller: func(ctx context.Context, kube kubernetes.Interface, kv kubevirt.Interface) error {
			// NewSubresources ran first and kept the admin config.
			cdi, err := containerizeddataimporter.NewForConfig(directConfig)
			if err != nil {
				return err
			}
			return kubevirtsim.NewController(kv, kube, kubevirtsim.Options{
				StartDelay: 300 * time.Millisecond, StopDelay: 200 * time.Millisecond,
				CDI: cdi, DataVolumeDelay: 300 * time.Millisecond, SnapshotDelay: 200 * time.Millisecond,
			}).Run(ctx)
		},
		NewSubresources: func(e *testenv.Env) http.Handler {
			directConfig = e.DirectConfig
			// virt-api's subresources, and cdi-apiserver's upload tokens
			// for the simulated cdi-uploadproxy (uploads).
			uploads = kubevirtsim.NewUploadProxy(e.DirectKube)
			sub := kubevirtsim.NewSubresourceHandler(e.DirectKubeVirt, kubevirtsim.SelfSubjectAccessAuthorizer(e.DirectConfig))
			tokens := uploads.TokenAPI(kubevirtsim.SelfSubjectAccessAuthorizerFor(e.DirectConfig, kubevirtsim.UploadGroup))
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if kubevirtsim.IsUploadTokenPath(r.URL.Path) {
					tokens.ServeHTTP(w, r)
					return
				}
				sub.ServeHTTP(w, r)
			})
		},
		IsSubresourcePath: func(p string) bool { return kubevirtsim.IsSubresourcePath(p) || kubevirtsim.IsUploadTokenPath(p) },
	}, func(e *testenv.Env) int {
		env = e
		noVirtAPI, err := e.NewProxy(nil, nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fallback proxy:", err)
			return 1
		}
		metricsSites, err := startMetricsSites(e)
		if err != nil {
			fmt.Fprintln(os.Stderr, "metrics sites:", err)
			return 1
		}
		defer metricsSites.close()
		caddyDir, _ = os.MkdirTemp("", "caddy-proxmox-it-")
		defer os.RemoveAll(caddyDir)
		uploadProxy, uploadCA, err := startUploadProxy(caddyDir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "upload proxy:", err)
			return 1
		}
		defer uploadProxy.Close()
		port, _ := testcaddy.Port()
		port2, _ := testcaddy.Port()
		base = fmt.Sprintf("https://localhost:%d", port)
		fallbackBase = fmt.Sprintf("https://localhost:%d", port2)
		cfg := testcaddy.Globals(caddyDir) + fmt.Sprintf(`
https://localhost:%d {
	tls internal
	proxmox_api {
		kubeconfig %s
		token %s %s
		user %s %s
		auth_failure_delay 0s
		cdi_upload_proxy %s {
			ca_file %s
		}
	}
}
https://localhost:%d {
	tls internal
	proxmox_api {
		kubeconfig %s
		token %s %s
		auth_failure_delay 0s
	}
}
`, port, e.Kubeconfig, tokenID, tokenSecret, userID, userPass, uploadProxy.URL, uploadCA, port2, noVirtAPI.Kubeconfig("admin"), tokenID, tokenSecret) + metricsSites.caddyfile
		if err := loadCaddy(cfg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	})
}

// startUploadProxy serves the simulated cdi-uploadproxy over TLS, as CDI
// does, and writes the CA that signed its certificate to dir.
func startUploadProxy(dir string) (*httptest.Server, string, error) {
	srv := httptest.NewTLSServer(uploads)
	ca := filepath.Join(dir, "cdi-uploadproxy-ca.pem")
	block := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(ca, block, 0o600); err != nil {
		srv.Close()
		return nil, "", err
	}
	return srv, ca, nil
}
