// Package realcluster is the real control plane the plugin is tested on
// next to its embedded simulated cluster: testenv with
// KubeVirtControllers (kube-apiserver and etcd, KubeVirt's virt-api and
// virt-controller, CDI's controller and webhooks, kube-scheduler and
// kube-controller-manager), kubevirtsim.Nodes standing in only for what
// needs a node (kubelet, virt-handler, node-labeller, CSI drivers), timed
// like the simulated cluster, and seeded with the simulated cluster's
// nodes, storage classes and namespaces, so that both offer the same nodes
// and storages. The behavioural suite (integration/behaviour) and the bpg
// acceptance tests' real mode (testenv/bpg) run on it.
package realcluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
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

// Options are the testenv options of the real control plane. The node
// stand-ins take the simulated cluster's timing (kube.Simulate).
func Options() testenv.Options {
	return testenv.Options{
		VirtAPI: true, KubeVirtControllers: true,
		// The simulated cluster has snapshots; v1.8 needs the gate.
		FeatureGates: []string{"Snapshot"},
		StartTimeout: 3 * time.Minute,
		NewVirtHandler: func(e *testenv.Env) http.Handler {
			return kubevirtsim.NewVirtHandler(kubevirt.NewForConfigOrDie(e.VirtHandlerConfig))
		},
		Nodes: func(ctx context.Context, e *testenv.Env) error {
			n := kubevirtsim.NewNodes(kubevirtsim.NodesOptions{
				Kube: kubernetes.NewForConfigOrDie(e.DirectConfig), KubeVirt: kubevirt.NewForConfigOrDie(e.VirtHandlerConfig),
				Dynamic:   dynamic.NewForConfigOrDie(e.DirectConfig),
				BootDelay: 1500 * time.Millisecond, AgentDelay: 500 * time.Millisecond, StopDelay: time.Second,
				ImportDelay: 2 * time.Second, MigrationDelay: time.Second,
			})
			nodes.Store(n)
			return n.Run(ctx)
		},
	}
}

// nodes are the node stand-ins of the cluster Options started.
var nodes atomic.Pointer[kubevirtsim.Nodes]

// GuestShutdown powers off the guest of the running VM ns/name from
// inside, as a guest's poweroff does: its instance becomes Succeeded and
// the run strategy decides what follows.
func GuestShutdown(ctx context.Context, ns, name string) error {
	n := nodes.Load()
	if n == nil {
		return errors.New("realcluster: no node stand-ins running")
	}
	return n.GuestShutdown(ctx, ns, name)
}

// SeedLikeSimulation gives the cluster the simulated one's nodes, storage
// classes and namespaces (not its VMs), its KubeVirt CR's
// vmStateStorageClass, the CSIDrivers of its CSI
// provisioners, and a VolumeSnapshotClass for ceph's: topolvm's thick
// volumes, which local-lvm is, have no snapshots.
func SeedLikeSimulation(ctx context.Context, e *testenv.Env) error {
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
	if err := testenv.SeedStorage(ctx, e.DirectKube, e.Dynamic, drivers, kubevirtsim.SeedSnapshotClasses()); err != nil {
		return err
	}
	if err := WaitStorageProfiles(ctx, e.DirectKube, e.Dynamic); err != nil {
		return err
	}
	// The lab keeps VMs' EFI/TPM state where it can clone it (the node
	// stand-ins' host-assisted clones of topolvm claims misbind).
	if err := e.SetVMStateStorageClass(ctx, kubevirtsim.SeedKubeVirt().Spec.Configuration.VMStateStorageClass); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("KubeVirt CR: %w", err)
	}
	return nil
}
