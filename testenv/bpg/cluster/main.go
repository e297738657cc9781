// Command cluster runs the real control plane of internal/realcluster
// (kube-apiserver and etcd, KubeVirt's virt-api and virt-controller, CDI,
// kube-scheduler and kube-controller-manager, node stand-ins), seeded like
// the simulated cluster, until SIGINT or SIGTERM, for testenv/bpg/run.sh's
// real mode (BPG_BACKEND=real). Once the cluster serves it writes an admin
// kubeconfig for it to the path of -kubeconfig (atomically, so that a
// waiting script sees it whole).
//
// With -upload-proxy it also serves kubevirtsim's stand-in cdi-uploadproxy
// there over TLS (CDI's upload path needs a proxy that the plugin reaches;
// the real one is a pod the node stand-ins do not run): it checks the
// tokens the real cdi-apiserver signs and hands the data to CDI's upload
// server pods as the integration suite's does. Its certificate (for
// 127.0.0.1) goes to -upload-proxy-ca, written before the kubeconfig.
//
//	go run ./testenv/bpg/cluster -kubeconfig /tmp/x/kubeconfig \
//		-upload-proxy 127.0.0.1:18443 -upload-proxy-ca /tmp/x/uploadproxy.pem
//
// The binaries come from CADDY_PROXMOX_TESTBIN or build-binaries.sh, as
// for the integration tests.
package main

import (
	"context"
	"encoding/pem"
	"flag"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"

	"github.com/caddy-proxmox/caddy-proxmox/internal/realcluster"
	"github.com/caddy-proxmox/caddy-proxmox/kubevirtsim"
	"github.com/caddy-proxmox/caddy-proxmox/testenv"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "write the admin kubeconfig here once the cluster serves")
	uploadAddr := flag.String("upload-proxy", "", "serve the stand-in cdi-uploadproxy on this address (host:port)")
	uploadCA := flag.String("upload-proxy-ca", "", "write the stand-in cdi-uploadproxy's certificate (PEM) here")
	flag.Parse()
	if *kubeconfig == "" || (*uploadAddr == "") != (*uploadCA == "") {
		fmt.Fprintln(os.Stderr, "cluster: -kubeconfig is required; -upload-proxy and -upload-proxy-ca go together")
		os.Exit(2)
	}
	if err := run(*kubeconfig, *uploadAddr, *uploadCA); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, uploadAddr, uploadCA string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log, err := zap.NewDevelopment()
	if err != nil {
		return err
	}
	opts := realcluster.Options()
	opts.Logger = log
	e, err := testenv.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer e.Stop()
	if err := realcluster.SeedLikeSimulation(ctx, e); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	if uploadAddr != "" {
		srv, err := serveUploadProxy(ctx, e, uploadAddr, uploadCA)
		if err != nil {
			return fmt.Errorf("upload proxy: %w", err)
		}
		defer srv.Close()
	}
	b, err := os.ReadFile(e.Kubeconfig)
	if err != nil {
		return err
	}
	if err := os.WriteFile(kubeconfig+".tmp", b, 0o600); err != nil {
		return err
	}
	if err := os.Rename(kubeconfig+".tmp", kubeconfig); err != nil {
		return err
	}
	log.Info("cluster: serving", zap.String("kubeconfig", kubeconfig), zap.Duration("start", e.StartDuration))
	<-ctx.Done()
	if err := e.ControllerErr(); err != nil {
		return fmt.Errorf("node stand-ins: %w", err)
	}
	return nil
}

// serveUploadProxy serves kubevirtsim's stand-in cdi-uploadproxy for the
// real cdi-apiserver's tokens on addr and writes its certificate to ca.
func serveUploadProxy(ctx context.Context, e *testenv.Env, addr, ca string) (*httptest.Server, error) {
	key, err := kubevirtsim.CDIUploadTokenKey(ctx, e.DirectKube, testenv.CDINamespace)
	if err != nil {
		return nil, fmt.Errorf("cdi-api-signing-key: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := httptest.NewUnstartedServer(kubevirtsim.NewCDIUploadProxy(e.DirectKube, key))
	srv.Listener.Close()
	srv.Listener = ln
	srv.StartTLS()
	block := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(ca, block, 0o600); err != nil {
		srv.Close()
		return nil, err
	}
	return srv, nil
}
