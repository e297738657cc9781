package testenv

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/containerizeddataimporter"
	"kubevirt.io/client-go/kubevirt"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/caddy-proxmox/caddy-proxmox/kubevirtsim"
)

// realControlPlane are the options of a cluster with the real
// controllers and kubevirtsim's node stand-ins.
func realControlPlane() Options {
	return Options{
		Seed: true, VirtAPI: true, KubeVirtControllers: true, FeatureGates: []string{"Snapshot"},
		NewVirtHandler: func(e *Env) http.Handler {
			return kubevirtsim.NewVirtHandler(kubevirt.NewForConfigOrDie(e.VirtHandlerConfig))
		},
		Nodes: func(ctx context.Context, e *Env) error {
			return kubevirtsim.NewNodes(kubevirtsim.NodesOptions{
				Kube: kubernetes.NewForConfigOrDie(e.DirectConfig), KubeVirt: kubevirt.NewForConfigOrDie(e.VirtHandlerConfig),
				Dynamic:   dynamic.NewForConfigOrDie(e.DirectConfig),
				BootDelay: 100 * time.Millisecond, AgentDelay: 100 * time.Millisecond, StopDelay: 100 * time.Millisecond,
				ImportDelay: 100 * time.Millisecond, MigrationDelay: 100 * time.Millisecond,
			}).Run(ctx)
		},
	}
}

// TestKubeVirtControllers runs KubeVirt's virt-controller, CDI, the
// scheduler and the controller manager with the node stand-ins: a VM
// starts on a node, its DataVolume is imported by CDI, and it stops.
func TestKubeVirtControllers(t *testing.T) {
	e := StartT(t, realControlPlane())
	t.Logf("start took %v", e.StartDuration)
	ctx := context.Background()
	ns := e.Namespace(t, "ctrl")
	cdi := containerizeddataimporter.NewForConfigOrDie(e.DirectConfig)

	always := v1.RunStrategyAlways
	block := corev1.PersistentVolumeBlock
	vm := &v1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "vm1", Namespace: ns},
		Spec: v1.VirtualMachineSpec{
			RunStrategy: &always,
			DataVolumeTemplates: []v1.DataVolumeTemplateSpec{{
				ObjectMeta: metav1.ObjectMeta{Name: "vm1-disk"},
				Spec: cdiv1.DataVolumeSpec{
					Source: &cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}},
					Storage: &cdiv1.StorageSpec{StorageClassName: ptr("ceph-block"), VolumeMode: &block,
						AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
						Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
				},
			}},
			Template: &v1.VirtualMachineInstanceTemplateSpec{
				Spec: v1.VirtualMachineInstanceSpec{
					Domain: v1.DomainSpec{
						Devices: v1.Devices{Disks: []v1.Disk{{Name: "root"}}},
						Memory:  &v1.Memory{Guest: ptr(resource.MustParse("128Mi"))},
					},
					Volumes: []v1.Volume{{Name: "root", VolumeSource: v1.VolumeSource{DataVolume: &v1.DataVolumeSource{Name: "vm1-disk"}}}},
				},
			},
		},
	}
	if _, err := e.KubeVirt.KubevirtV1().VirtualMachines(ns).Create(ctx, vm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, e, 90*time.Second, "VM vm1 ready", func() (bool, error) {
		cur, err := e.KubeVirt.KubevirtV1().VirtualMachines(ns).Get(ctx, "vm1", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return cur.Status.Ready && cur.Status.PrintableStatus == v1.VirtualMachineStatusRunning,
			fmt.Errorf("printableStatus %s, ready %v, conditions %+v", cur.Status.PrintableStatus, cur.Status.Ready, cur.Status.Conditions)
	})
	dv, err := cdi.CdiV1beta1().DataVolumes(ns).Get(ctx, "vm1-disk", metav1.GetOptions{})
	if err != nil || dv.Status.Phase != cdiv1.Succeeded {
		t.Fatalf("DataVolume: %v, %+v", err, dv.Status)
	}
	vmi, err := e.KubeVirt.KubevirtV1().VirtualMachineInstances(ns).Get(ctx, "vm1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if vmi.Status.NodeName == "" || len(vmi.Status.Interfaces) == 0 || vmi.Status.Interfaces[0].IP == "" {
		t.Errorf("VMI status: node %q, interfaces %+v", vmi.Status.NodeName, vmi.Status.Interfaces)
	}

	// Stop: the VMI and its virt-launcher pod go away.
	halted := v1.RunStrategyHalted
	cur, err := e.KubeVirt.KubevirtV1().VirtualMachines(ns).Get(ctx, "vm1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.RunStrategy = &halted
	if _, err := e.KubeVirt.KubevirtV1().VirtualMachines(ns).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, e, 60*time.Second, "VM vm1 stopped", func() (bool, error) {
		_, err := e.KubeVirt.KubevirtV1().VirtualMachineInstances(ns).Get(ctx, "vm1", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("VMI still there (%v)", err)
		}
		pods, err := e.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(pods.Items) > 0 {
			return false, fmt.Errorf("pods left: %d (%v)", len(pods.Items), err)
		}
		return true, nil
	})
}

// waitUntil polls check until it holds, failing the test after timeout
// with check's last error.
func waitUntil(t *testing.T, e *Env, timeout time.Duration, what string, check func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		ok, err := check()
		if ok {
			return
		}
		last = err
		if err := e.ControllerErr(); err != nil {
			t.Fatalf("node stand-ins stopped: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s: %v", what, last)
}

// TestHostAssistedClone clones a DataVolume into a StorageClass of another
// provisioner, which CDI does host-assisted (a clone source pod sending to
// an upload server pod): CDI's controller must find the CA bundles of its
// upload signers, as CDI's operator publishes them, to start them.
func TestHostAssistedClone(t *testing.T) {
	e := StartT(t, realControlPlane())
	ctx := context.Background()
	ns := e.Namespace(t, "clone")
	cdi := containerizeddataimporter.NewForConfigOrDie(e.DirectConfig)
	size := corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
	dv := func(name, class string, src cdiv1.DataVolumeSource) *cdiv1.DataVolume {
		return &cdiv1.DataVolume{
			// Bound at once, not at a first consumer (local-path is
			// WaitForFirstConsumer), as the plugin asks.
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
				Annotations: map[string]string{"cdi.kubevirt.io/storage.bind.immediate.requested": "true"}},
			Spec: cdiv1.DataVolumeSpec{Source: &src, Storage: &cdiv1.StorageSpec{StorageClassName: ptr(class),
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: size}}},
		}
	}
	succeeded := func(name string) func() (bool, error) {
		return func() (bool, error) {
			cur, err := cdi.CdiV1beta1().DataVolumes(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return cur.Status.Phase == cdiv1.Succeeded, fmt.Errorf("phase %s, conditions %+v", cur.Status.Phase, cur.Status.Conditions)
		}
	}
	src := dv("src", "ceph-block", cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}})
	if _, err := cdi.CdiV1beta1().DataVolumes(ns).Create(ctx, src, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, e, 60*time.Second, "source DataVolume", succeeded("src"))
	clone := dv("copy", DefaultStorageClass, cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: ns, Name: "src"}})
	if _, err := cdi.CdiV1beta1().DataVolumes(ns).Create(ctx, clone, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, e, 90*time.Second, "cloned DataVolume", succeeded("copy"))
}
