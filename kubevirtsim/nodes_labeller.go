package kubevirtsim

import (
	"context"
	"encoding/json"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"
)

// The host every stand-in node is: the one of KubeVirt's own node-labeller
// tests (pkg/virt-handler/node-labeller/testdata/virsh_domcapabilities.xml,
// an Intel host whose host-model is Skylake-Client-IBRS) with the machine
// types of its QEMU's alias and one canonical q35 type.
var (
	hostCPUModel     = "Skylake-Client-IBRS"
	hostCPUVendor    = "Intel"
	hostCPUModels    = []string{"Penryn", "IvyBridge", "Haswell", "Skylake-Client-IBRS", "Opteron_G2"}
	hostCPUFeatures  = []string{"ds", "acpi", "ss", "vmx", "pdcm", "hypervisor", "tsc_adjust", "clflushopt", "umip", "md-clear", "stibp", "arch-capabilities", "ssbd", "xsaves", "pdpe1gb", "invtsc"}
	hostMachineTypes = []string{"q35", defaultMachineType}
	hostHyperV       = []string{"base", "frequencies", "ipi", "reenlightenment", "reset", "runtime", "synic", "synic2", "synictimer", "time", "tlbflush", "vpindex"}
	tscFrequency     = "2111998000"
)

// deviceResources are virt-handler's device plugins: each node offers 1000
// of each (device-manager's default).
var deviceResources = []corev1.ResourceName{"devices.kubevirt.io/kvm", "devices.kubevirt.io/tun", "devices.kubevirt.io/vhost-net"}

// heartbeatInterval is how often virt-handler's heartbeat patches its node
// (pkg/virt-handler/heartbeat: every minute, with jitter).
const heartbeatInterval = time.Minute

// nodeLabels are the labels virt-handler sets on a node it runs on: its
// heartbeat's kubevirt.io/schedulable and CPU manager labels (no CPU
// manager here) and the node-labeller's (prepareLabels).
func nodeLabels() map[string]string {
	l := map[string]string{virtv1.NodeSchedulable: "true", virtv1.CPUManager: "false", virtv1.DeprecatedCPUManager: "false"}
	for _, m := range hostCPUModels {
		l[virtv1.CPUModelLabel+m] = "true"
		l[virtv1.SupportedHostModelMigrationCPU+m] = "true"
	}
	for _, f := range hostCPUFeatures {
		l[virtv1.CPUFeatureLabel+f] = "true"
	}
	for _, m := range hostMachineTypes {
		l[virtv1.SupportedMachineTypeLabel+m] = "true"
	}
	for _, h := range hostHyperV {
		l[virtv1.HypervLabel+h] = "true"
	}
	l[virtv1.CPUModelVendorLabel+hostCPUVendor] = "true"
	l[virtv1.HostModelCPULabel+hostCPUModel] = "true"
	l[virtv1.CPUTimerLabel+"tsc-frequency"] = tscFrequency
	l[virtv1.CPUTimerLabel+"tsc-scalable"] = "true"
	return l
}

// syncNode labels a node as virt-handler's heartbeat and node-labeller
// do, renews the heartbeat, and advertises the device plugins' resources.
// A node that is not Ready runs no virt-handler, so it gets none of it.
func (n *Nodes) syncNode(ctx context.Context, name string) (time.Duration, error) {
	node := cached[*corev1.Node](n.nodes, name)
	if node == nil || !nodeReady(node) {
		return 0, nil
	}
	missing := map[string]string{}
	for k, v := range nodeLabels() {
		if node.Labels[k] != v {
			missing[k] = v
		}
	}
	beat := metav1.Time{}
	_ = beat.UnmarshalQueryParameter(node.Annotations[virtv1.VirtHandlerHeartbeat])
	if len(missing) > 0 || time.Since(beat.Time) > heartbeatInterval/2 {
		now, err := metav1.Now().MarshalQueryParameter()
		if err != nil {
			return 0, err
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"labels": missing, "annotations": map[string]string{virtv1.VirtHandlerHeartbeat: now}}})
		if err != nil {
			return 0, err
		}
		if node, err = n.opts.Kube.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return 0, err
		}
	}
	st := node.Status.DeepCopy()
	for _, r := range deviceResources {
		for _, list := range []*corev1.ResourceList{&st.Capacity, &st.Allocatable} {
			if *list == nil {
				*list = corev1.ResourceList{}
			}
			if _, ok := (*list)[r]; !ok {
				(*list)[r] = resource.MustParse("1k")
			}
		}
	}
	if equality.Semantic.DeepEqual(&node.Status, st) {
		return heartbeatInterval, nil
	}
	cp := node.DeepCopy()
	cp.Status = *st
	_, err := n.opts.Kube.CoreV1().Nodes().UpdateStatus(ctx, cp, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	return heartbeatInterval, err
}
