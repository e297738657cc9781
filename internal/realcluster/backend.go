package realcluster

import (
	"context"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/caddy-proxmox/caddy-proxmox/kubevirtsim"
)

// EnvBackend names the backend a test package that runs on both starts
// its cluster with: "sim" (the default: KubeVirt's virt-api with
// kubevirtsim's stand-in controller) or "real" (Options: the real control
// plane). The integration package reads it; testenv/bpg's BPG_BACKEND is
// the same switch for its script.
const EnvBackend = "CADDY_PROXMOX_BACKEND"

// Real reports whether EnvBackend asks for the real control plane, and
// fails on a value that is neither backend.
func Real() (bool, error) {
	switch v := os.Getenv(EnvBackend); v {
	case "", "sim":
		return false, nil
	case "real":
		return true, nil
	default:
		return false, fmt.Errorf("%s is sim or real, not %q", EnvBackend, v)
	}
}

var storageProfiles = schema.GroupVersionResource{Group: "cdi.kubevirt.io", Version: "v1beta1", Resource: "storageprofiles"}

// SetClaimProperties does what CDI asks of the admin of storage whose
// provisioner it does not know (rancher.io/local-path among them): it sets
// the StorageProfile of class to access and mode, so that DataVolumes
// giving only a class and a size get claims there. Without it CDI leaves
// them Pending (ErrClaimNotValid, "no accessMode specified in
// StorageProfile"). CDI's controller makes the profile; one that is not
// there yet is created with the spec, and CDI fills its status.
func SetClaimProperties(ctx context.Context, dyn dynamic.Interface, class string, access corev1.PersistentVolumeAccessMode, mode corev1.PersistentVolumeMode) error {
	spec := map[string]any{"claimPropertySets": []any{map[string]any{
		"accessModes": []any{string(access)}, "volumeMode": string(mode)}}}
	res := dyn.Resource(storageProfiles)
	_, err := res.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "StorageProfile",
		"metadata": map[string]any{"name": class}, "spec": spec,
	}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		patch := fmt.Sprintf(`{"spec":{"claimPropertySets":[{"accessModes":[%q],"volumeMode":%q}]}}`, access, mode)
		_, err = res.Patch(ctx, class, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	}
	if err != nil {
		return fmt.Errorf("StorageProfile %s: %w", class, err)
	}
	// CDI renders claims from the status, which its controller copies.
	if err := waitProfileFilled(ctx, dyn, class, time.Minute); err != nil {
		return fmt.Errorf("StorageProfile %s: CDI did not take the claim properties: %w", class, err)
	}
	return nil
}

// waitProfileFilled waits until the StorageProfile of class has claim
// property sets in its status, which is what CDI renders claims from.
func waitProfileFilled(ctx context.Context, dyn dynamic.Interface, class string, limit time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, limit, true, func(ctx context.Context) (bool, error) {
		p, err := dyn.Resource(storageProfiles).Get(ctx, class, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		sets, _, _ := unstructured.NestedSlice(p.Object, "status", "claimPropertySets")
		return len(sets) > 0, nil
	})
}

// WaitStorageProfiles waits until CDI has filled the StorageProfile of
// every StorageClass whose provisioner it knows (the claim property sets
// in its status). Until then CDI's DataVolume controller refuses claims
// of the class ("cannot get StorageProfile", then "no accessMode
// specified"): an admin makes the classes long before their VMs, tests
// just before, and on a loaded machine CDI's StorageProfile controller
// can be seconds behind.
func WaitStorageProfiles(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface) error {
	classes, err := kube.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("StorageClasses: %w", err)
	}
	for _, sc := range classes.Items {
		if !kubevirtsim.CDIKnowsProvisioner(sc.Provisioner) {
			continue
		}
		if err := waitProfileFilled(ctx, dyn, sc.Name, 2*time.Minute); err != nil {
			return fmt.Errorf("StorageProfile %s: CDI did not fill it: %w", sc.Name, err)
		}
	}
	return nil
}

var (
	crds = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	nads = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions"}
)

// AddBridgeNetwork gives the cluster what Multus gives it: its
// NetworkAttachmentDefinition CRD (k8s.cni.cncf.io/v1, as Multus's
// deployment installs it), and a network ns/name on a Linux bridge of the
// same name, which is how a PVE bridge other than vmbr0 reaches a VM on
// KubeVirt. KubeVirt's virt-controller refuses to start a VM on a network
// that does not exist; Nodes' Multus stand-in attaches pods to one that
// does.
func AddBridgeNetwork(ctx context.Context, dyn dynamic.Interface, ns, name string) error {
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "network-attachment-definitions.k8s.cni.cncf.io"},
		"spec": map[string]any{
			"group": "k8s.cni.cncf.io", "scope": "Namespaced",
			"names": map[string]any{"plural": "network-attachment-definitions", "singular": "network-attachment-definition",
				"kind": "NetworkAttachmentDefinition", "shortNames": []any{"net-attach-def"}},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "properties": map[string]any{
					"apiVersion": map[string]any{"type": "string"}, "kind": map[string]any{"type": "string"},
					"metadata": map[string]any{"type": "object"},
					"spec":     map[string]any{"type": "object", "properties": map[string]any{"config": map[string]any{"type": "string"}}},
				}}}}},
		},
	}}
	if _, err := dyn.Resource(crds).Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("NetworkAttachmentDefinition CRD: %w", err)
	}
	config := fmt.Sprintf(`{"cniVersion":"0.3.1","name":%q,"type":"bridge","bridge":%q}`, name, name)
	nad := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"config": config},
	}}
	// The CRD is served once it is Established.
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, last = dyn.Resource(nads).Namespace(ns).Create(ctx, nad.DeepCopy(), metav1.CreateOptions{})
		return last == nil || apierrors.IsAlreadyExists(last), nil
	})
	if err != nil {
		return fmt.Errorf("NetworkAttachmentDefinition %s/%s: %w (last: %v)", ns, name, err, last)
	}
	return nil
}
