// Command cluster runs the real control plane of internal/realcluster
// (kube-apiserver and etcd, KubeVirt's virt-api and virt-controller, CDI,
// kube-scheduler and kube-controller-manager, node stand-ins), seeded like
// the simulated cluster, until SIGINT or SIGTERM, for testenv/bpg/run.sh's
// real mode (BPG_BACKEND=real). Once the cluster serves it writes an admin
// kubeconfig for it to the path of -kubeconfig (atomically, so that a
// waiting script sees it whole).
//
//	go run ./testenv/bpg/cluster -kubeconfig /tmp/x/kubeconfig
//
// The binaries come from CADDY_PROXMOX_TESTBIN or build-binaries.sh, as
// for the integration tests.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"

	"github.com/caddy-proxmox/caddy-proxmox/internal/realcluster"
	"github.com/caddy-proxmox/caddy-proxmox/testenv"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "write the admin kubeconfig here once the cluster serves")
	flag.Parse()
	if *kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "cluster: -kubeconfig is required")
		os.Exit(2)
	}
	if err := run(*kubeconfig); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func run(kubeconfig string) error {
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
