// Package behaviour runs one behavioural suite through ./caddy on two
// backends and fails on any difference between them:
//
//   - sim: proxmox_api's embedded simulated cluster (simulate), which is
//     kubevirtsim over in-memory clients;
//   - real: a test cluster with the real control plane (testenv with
//     KubeVirtControllers: kube-apiserver and etcd, KubeVirt's virt-api and
//     virt-controller, CDI's controller and webhooks, kube-scheduler and
//     kube-controller-manager), kubevirtsim.Nodes standing in only for
//     what needs a node (kubelet, virt-handler, node-labeller, CSI
//     drivers). It is seeded with the simulated cluster's nodes, storage
//     classes and namespaces (kubevirtsim.Seed), so that both offer the
//     same nodes and storages.
//
// Each case (cases_test.go) is a sequence of Proxmox API calls on its own
// VMs; what a client sees of each (normalize.go) must be the same on both.
// A case whose difference is a known product or stand-in divergence is
// listed in known-divergences.txt with its cause: it must still differ
// (a listed case that agrees fails, so that the list shrinks with the
// fixes), and only in the steps recorded there.
package behaviour

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"kubevirt.io/client-go/kubevirt"

	"github.com/caddy-proxmox/caddy-proxmox/kubevirtsim"
	"github.com/caddy-proxmox/caddy-proxmox/testenv"
)

var (
	env *testenv.Env
	// nodes stand in for what runs on the real cluster's nodes (for
	// guest-initiated shutdowns).
	nodes = make(chan *kubevirtsim.Nodes, 1)
	// only runs the cases whose name matches (go test -run is for tests,
	// -case for the cases of TestBehaviour).
	only = flag.String("case", "", "run only the cases whose name contains this")
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() && os.Getenv("CI") == "" {
		fmt.Println("behaviour: skipped in -short mode")
		os.Exit(0)
	}
	testenv.Main(m, realCluster(), func(e *testenv.Env) int {
		env = e
		fmt.Printf("behaviour: real control plane started in %v\n", e.StartDuration.Round(100*time.Millisecond))
		if err := seedLikeSimulation(context.Background(), e); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: seed:", err)
			return 1
		}
		return m.Run()
	})
}

// realCluster is the test cluster of the real backend.
func realCluster() testenv.Options {
	return testenv.Options{
		VirtAPI: true, KubeVirtControllers: true,
		// The simulated cluster has snapshots; v1.8 needs the gate.
		FeatureGates: []string{"Snapshot"},
		StartTimeout: 3 * time.Minute,
		NewVirtHandler: func(e *testenv.Env) http.Handler {
			return kubevirtsim.NewVirtHandler(kubevirt.NewForConfigOrDie(e.VirtHandlerConfig))
		},
		Nodes: func(ctx context.Context, e *testenv.Env) error {
			// The simulated cluster's timing (kube.Simulate).
			n := kubevirtsim.NewNodes(kubevirtsim.NodesOptions{
				Kube: kubernetes.NewForConfigOrDie(e.DirectConfig), KubeVirt: kubevirt.NewForConfigOrDie(e.VirtHandlerConfig),
				Dynamic:   dynamic.NewForConfigOrDie(e.DirectConfig),
				BootDelay: 1500 * time.Millisecond, AgentDelay: 500 * time.Millisecond, StopDelay: time.Second,
				ImportDelay: 2 * time.Second, MigrationDelay: time.Second,
			})
			nodes <- n
			return n.Run(ctx)
		},
	}
}

// seedLikeSimulation gives the real cluster the simulated one's nodes,
// storage classes and namespaces (not its VMs), the CSIDrivers of its
// CSI provisioners, and a VolumeSnapshotClass for ceph's: topolvm's thick
// volumes, which local-lvm is, have no snapshots.
func seedLikeSimulation(ctx context.Context, e *testenv.Env) error {
	var drivers []string
	for _, o := range kubevirtsim.Seed() {
		switch obj := o.(type) {
		case *corev1.Node:
			if err := testenv.CreateNodes(ctx, e.DirectKube, obj); err != nil {
				return err
			}
		case *storagev1.StorageClass:
			obj.UID, obj.ResourceVersion = "", ""
			if _, err := e.DirectKube.StorageV1().StorageClasses().Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return err
			}
			drivers = append(drivers, obj.Provisioner)
		case *corev1.Namespace:
			obj.UID, obj.ResourceVersion = "", ""
			if _, err := e.DirectKube.CoreV1().Namespaces().Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return err
			}
		}
	}
	return testenv.SeedStorage(ctx, e.DirectKube, e.Dynamic, drivers, kubevirtsim.SeedSnapshotClasses())
}
