// Package integration runs caddy-proxmox inside a real Caddy against a real
// kube-apiserver and etcd with KubeVirt's own virt-api (its CRDs, RBAC,
// admission webhooks and subresource API), and drives it with real Proxmox
// clients, on one of two backends (realcluster.EnvBackend):
//
//   - sim (the default): kubevirtsim's stand-in controller (virt-controller,
//     CDI, kubelet) and virt-handler;
//   - real (CADDY_PROXMOX_BACKEND=real): the real control plane of
//     internal/realcluster (KubeVirt's virt-controller, CDI's controller and
//     API server, kube-scheduler, kube-controller-manager), with
//     kubevirtsim.Nodes standing in only for what needs a node.
//
// Same Caddyfile, same clients, same tests; a test that needs what only
// one backend offers says so with skipOnReal or skipOnSim.
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

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"kubevirt.io/client-go/containerizeddataimporter"
	"kubevirt.io/client-go/kubevirt"

	_ "github.com/caddy-proxmox/caddy-proxmox/caddymodule"
	"github.com/caddy-proxmox/caddy-proxmox/internal/realcluster"
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
	// uploads plays cdi-uploadproxy and the upload server (and on the sim
	// backend cdi-apiserver's tokens).
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
	// (KubeVirt's virt-controller service account; sim backend).
	controllerConfig *rest.Config
	// realBackend: the suite runs on the real control plane
	// (realcluster.EnvBackend=real), not the stand-in controller.
	realBackend bool
)

func TestMain(m *testing.M) {
	real, err := realcluster.Real()
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(2)
	}
	opts := simOptions()
	if real {
		opts = realcluster.Options()
		opts.Seed = true
	}
	testenv.Main(m, opts, func(e *testenv.Env) int {
		env = e
		realBackend = real
		fmt.Printf("integration: %s backend started in %v\n", backendName(), e.StartDuration.Round(100*time.Millisecond))
		if real {
			// testenv's default class is local-path, whose provisioner CDI
			// does not know: its admin sets the claim properties.
			if err := realcluster.SetClaimProperties(context.Background(), e.Dynamic, testenv.DefaultStorageClass,
				corev1.ReadWriteOnce, corev1.PersistentVolumeFilesystem); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			if err := realcluster.WaitStorageProfiles(context.Background(), e.DirectKube, e.Dynamic); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			// Multus with a second bridge, vmbr1, for the clients' second
			// NICs (the stand-in controller takes every network as there).
			if err := realcluster.AddBridgeNetwork(context.Background(), e.Dynamic, "default", "vmbr1"); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			// cdi-apiserver issues the upload tokens; the stand-in
			// cdi-uploadproxy checks them with its public key.
			key, err := kubevirtsim.CDIUploadTokenKey(context.Background(), e.DirectKube, testenv.CDINamespace)
			if err != nil {
				fmt.Fprintln(os.Stderr, "cdi-api-signing-key:", err)
				return 1
			}
			uploads = kubevirtsim.NewCDIUploadProxy(e.DirectKube, key)
		} else {
			// cdi-apiserver's upload tokens behind the aggregator, for the
			// simulated cdi-uploadproxy (uploads).
			uploads = kubevirtsim.NewUploadProxy(e.DirectKube)
			e.Proxy.SetAPI(kubevirtsim.UploadGroup, "v1beta1",
				uploads.TokenAPI(kubevirtsim.SelfSubjectAccessAuthorizerFor(e.DirectConfig, kubevirtsim.UploadGroup)))
		}
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

// simOptions start the cluster of the sim backend: KubeVirt's virt-api
// with kubevirtsim's stand-in controller (virt-controller, CDI, kubelet)
// and virt-handler.
func simOptions() testenv.Options {
	return testenv.Options{
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
	}
}

// backendName is the backend the suite runs on, for messages.
func backendName() string {
	if realBackend {
		return "real"
	}
	return "sim"
}

// skipOnReal skips a test that needs what only the sim backend's stand-in
// controller offers; why says what.
func skipOnReal(t *testing.T, why string) {
	t.Helper()
	if realBackend {
		t.Skip("real backend: " + why)
	}
}

// skipOnSim is skipOnReal's counterpart.
func skipOnSim(t *testing.T, why string) {
	t.Helper()
	if !realBackend {
		t.Skip("sim backend: " + why)
	}
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
