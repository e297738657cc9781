package kube

import (
	"cmp"
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// StateClaim returns the claim in which KubeVirt keeps the persistent EFI
// and TPM state of the VM ns/name, as KubeVirt picks it (backend-storage
// PVCForVMI: the labelled claim, else the legacy name), or nil: a VM
// never started has none yet. It asks the apiserver as the plugin, for
// the claims as they are now (one KubeVirt has just labelled included).
func (c *Cluster) StateClaim(ctx context.Context, ns, name string) (*corev1.PersistentVolumeClaim, error) {
	list, err := c.own.kube.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the state claim of %s/%s: %w", ns, name, err)
	}
	var legacy *corev1.PersistentVolumeClaim
	for i := range list.Items {
		pvc := &list.Items[i]
		if pvc.DeletionTimestamp != nil {
			continue
		}
		if v, ok := pvc.Labels[translate.StateClaimLabel]; ok && v == name {
			return pvc, nil
		}
		if pvc.Name == translate.StateClaimName(name) {
			legacy = pvc
		}
	}
	return legacy, nil
}

// CloneState starts the copy of src, the persistent EFI/TPM state claim
// of a clone's source, into the clone vm: a DataVolume owned by the clone,
// named and labelled as KubeVirt's backend storage adopts it (CDI gives
// the claim the DataVolume's labels), created as the caller. Without src
// (a source never started) there is nothing to copy. The clone task
// waits for it by name (TaskSpec.Object, StateClaimName): the VM carries
// no marker of it.
func (c *Cluster) CloneState(ctx context.Context, vm *kubevirtv1.VirtualMachine, src *corev1.PersistentVolumeClaim) (*cdiv1.DataVolume, error) {
	if src == nil {
		return nil, nil
	}
	cdi := c.as(ctx).cdi
	if cdi == nil {
		return nil, ErrNoCDI
	}
	dv := StateDataVolume(vm, src)
	created, err := cdi.CdiV1beta1().DataVolumes(vm.Namespace).Create(ctx, dv, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("copying the EFI/TPM state claim %s/%s: %w", src.Namespace, src.Name, err)
	}
	return created, nil
}

// StateDataVolume is the DataVolume copying src, a VM's state claim, into
// the state claim of vm: the same class, size and modes (KubeVirt reads
// the state with its own access mode choice), owned by vm so that it goes
// with it as KubeVirt's own state claim does. The owner is no controller:
// KubeVirt's VM controller owns only the DataVolumes of its templates.
func StateDataVolume(vm *kubevirtv1.VirtualMachine, src *corev1.PersistentVolumeClaim) *cdiv1.DataVolume {
	// CDI refuses a target smaller than the source; the storage may have
	// rounded KubeVirt's 10Mi up.
	size := src.Spec.Resources.Requests[corev1.ResourceStorage]
	if got, ok := src.Status.Capacity[corev1.ResourceStorage]; ok && got.Cmp(size) > 0 {
		size = got
	}
	spec := corev1.PersistentVolumeClaimSpec{
		AccessModes:      src.Spec.AccessModes,
		VolumeMode:       src.Spec.VolumeMode,
		StorageClassName: src.Spec.StorageClassName,
		Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
	}
	return &cdiv1.DataVolume{
		TypeMeta: metav1.TypeMeta{APIVersion: "cdi.kubevirt.io/v1beta1", Kind: "DataVolume"},
		ObjectMeta: metav1.ObjectMeta{
			Name: translate.StateClaimName(vm.Name), Namespace: vm.Namespace,
			Labels: map[string]string{translate.StateClaimLabel: vm.Name},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: vm.Name, UID: vm.UID,
			}},
		},
		Spec: cdiv1.DataVolumeSpec{
			Source: &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: src.Namespace, Name: src.Name}},
			PVC:    &spec,
		},
	}
}

// stateProvisioned tells whether the state copy of a clone in ns (see
// CloneState), the DataVolume state, is done: its claim is there, the
// DataVolume settled and CDI's temporary claim gone. No state ("") has
// nothing to wait for.
func (c *Cluster) stateProvisioned(ns, state string) bool {
	if state == "" {
		return true
	}
	claim := c.cachedClaim(ns, state)
	if claim == nil {
		return false
	}
	if dv := c.DataVolume(ns, state); dv != nil && !dataVolumeSettled(dv) {
		return false
	}
	// CDI's clone populator fills a temporary claim (PVC') carrying the
	// target's labels, KubeVirt's persistent-state-for among them, and
	// deletes it only after the DataVolume Succeeded. KubeVirt takes the
	// first claim so labelled as the VM's state (backend-storage
	// PVCForVMI): a clone started before then could get the temporary one.
	prime := c.cachedClaim(ns, cdiPrimeClaimName(claim.GetUID()))
	return prime == nil || prime.GetDeletionTimestamp() != nil
}

// cdiPrimeClaimName is the name of the temporary claim CDI's volume
// populators fill for the target claim of that UID (CDI
// pkg/controller/populators PVCPrimeName).
func cdiPrimeClaimName(target types.UID) string {
	return "tmp-pvc-" + string(target)
}

// CDI's reasons (pkg/controller/datavolume) for a clone it will not make
// until someone changes the cluster: the source claim does not exist
// (CDI waits for it to appear), or the target does not fit the source
// (CDI waits for the spec to change). For a state copy neither comes
// right by itself: the source is the claim of a VM that has gone or no
// longer keeps state, and the target is rendered from that source.
const (
	cdiCloneWithoutSource    = "CloneWithoutSource"
	cdiCloneValidationFailed = "CloneValidationFailed"
)

// stateCopyFailure returns why the state copy of the clone vm (see
// CloneState), the DataVolume state ("" for none), can no longer finish,
// or "": it Failed, or CDI
// found no source claim or refused the clone, with CDI's message. An
// importer or cloner that stopped on an error (Running False, reason
// Error) is not final: CDI retries it. A DataVolume of an earlier VM of
// the same name (another owner) is not this clone's.
func (c *Cluster) stateCopyFailure(vm *kubevirtv1.VirtualMachine, state string) string {
	if state == "" {
		return ""
	}
	dv := c.DataVolume(vm.Namespace, state)
	if dv == nil || !ownedBy(dv.OwnerReferences, vm.UID) {
		return ""
	}
	if msg := stateDataVolumeFailure(dv); msg != "" {
		return "DataVolume " + dv.Name + ": " + msg
	}
	return ""
}

// stateDataVolumeFailure is the final failure of a state copy's
// DataVolume as CDI reports it, or "".
func stateDataVolumeFailure(dv *cdiv1.DataVolume) string {
	if dv.Status.Phase == cdiv1.Failed {
		for _, t := range []cdiv1.DataVolumeConditionType{cdiv1.DataVolumeRunning, cdiv1.DataVolumeReady, cdiv1.DataVolumeBound} {
			for _, cond := range dv.Status.Conditions {
				if cond.Type == t && cond.Message != "" {
					return cond.Message
				}
			}
		}
		return "CDI failed the copy (phase Failed)"
	}
	for _, cond := range dv.Status.Conditions {
		if cond.Status == corev1.ConditionTrue {
			continue
		}
		switch cond.Reason {
		case cdiCloneWithoutSource, cdiCloneValidationFailed:
			return cmp.Or(cond.Message, cond.Reason) + " (" + cond.Reason + ")"
		}
	}
	return ""
}

// ownedBy tells whether refs name uid; an object without owners counts
// as anyone's.
func ownedBy(refs []metav1.OwnerReference, uid types.UID) bool {
	if len(refs) == 0 {
		return true
	}
	for _, r := range refs {
		if r.UID == uid {
			return true
		}
	}
	return false
}
