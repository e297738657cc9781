// Package integration runs caddy-proxmox inside a real Caddy against a real
// kube-apiserver and etcd with KubeVirt's own virt-api (its CRDs, RBAC,
// admission webhooks and subresource API), the stand-in controller and
// virt-handler, and drives it with real Proxmox clients.
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

	"k8s.io/client-go/dynamic"
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
	// controllerConfig is the identity of the stand-in controller
	// (KubeVirt's virt-controller service account).
	controllerConfig *rest.Config
)

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{
		Seed:    true,
		VirtAPI: true,
		// Snapshots are Beta in KubeVirt v1.8 and off by default; the suite
		// runs on a cluster that has turned them on.
		FeatureGates: []string{"Snapshot"},
		Controller: func(ctx context.Context, kube kubernetes.Interface, kv kubevirt.Interface) error {
			// NewVirtHandler ran first and kept the controller's config.
			cdi, err := containerizeddataimporter.NewForConfig(controllerConfig)
			if err != nil {
				return err
			}
			return kubevirtsim.NewController(kv, kube, kubevirtsim.Options{
				StartDelay: 300 * time.Millisecond, StopDelay: 200 * time.Millisecond,
				CDI: cdi, DataVolumeDelay: 300 * time.Millisecond, SnapshotDelay: 200 * time.Millisecond,
				AgentDelay: 500 * time.Millisecond,
				// Which storage can snapshot: the seeded VolumeSnapshotClasses.
				Dynamic: dynamic.NewForConfigOrDie(controllerConfig),
			}).Run(ctx)
		},
		NewVirtHandler: func(e *testenv.Env) http.Handler {
			controllerConfig = e.ControllerConfig
			return kubevirtsim.NewVirtHandler(kubevirt.NewForConfigOrDie(e.VirtHandlerConfig))
		},
	}, func(e *testenv.Env) int {
		env = e
		// cdi-apiserver's upload tokens behind the aggregator, for the
		// simulated cdi-uploadproxy (uploads).
		uploads = kubevirtsim.NewUploadProxy(e.DirectKube)
		e.Proxy.SetAPI(kubevirtsim.UploadGroup, "v1beta1",
			uploads.TokenAPI(kubevirtsim.SelfSubjectAccessAuthorizerFor(e.DirectConfig, kubevirtsim.UploadGroup)))
		noVirtAPI, err := e.NewProxy()
		if err != nil {
			fmt.Fprintln(os.Stderr, "fallback proxy:", err)
			return 1
		}
		noVirtAPI.HideGroup(testenv.SubresourceGroup)
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
		if _, err := testcaddy.LoadCaddyfile(cfg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := testcaddy.Ready(base+"/api2/json/version", 30*time.Second); err != nil {
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
