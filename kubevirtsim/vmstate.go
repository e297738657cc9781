package kubevirtsim

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"
)

// stateLabel is the label by which KubeVirt's backend storage finds a
// VM's persistent EFI/TPM state claim (pkg/storage/backend-storage
// PVCPrefix); the value is the VM's name, and "<label>-<vm>" is the
// legacy name it also takes.
const stateLabel = "persistent-state-for"

// hasPersistentState is backend-storage's IsBackendStorageNeeded for a
// VM (persistent EFI or TPM; changed block tracking is not simulated).
func hasPersistentState(spec *virtv1.VirtualMachineInstanceSpec) bool {
	if tpm := spec.Domain.Devices.TPM; tpm != nil && (tpm.Enabled == nil || *tpm.Enabled) && tpm.Persistent != nil && *tpm.Persistent {
		return true
	}
	fw := spec.Domain.Firmware
	return fw != nil && fw.Bootloader != nil && fw.Bootloader.EFI != nil && fw.Bootloader.EFI.Persistent != nil && *fw.Bootloader.EFI.Persistent
}

// ensureStateClaim is virt-controller's handleBackendStorage when vm
// starts: the claim labelled for the VM, else the one of the legacy name
// (labelled then), is kept; without either a new one is made, 10Mi on
// the KubeVirt CR's vmStateStorageClass (ReadWriteMany) or the default
// virt, else cluster default, class (ReadWriteOnce), owned by the VM. A
// VM without persistent state loses the claim it had.
func (c *Controller) ensureStateClaim(ctx context.Context, vm *virtv1.VirtualMachine) error {
	if vm.Spec.Template == nil {
		return nil
	}
	pvcs := c.k8s.CoreV1().PersistentVolumeClaims(vm.Namespace)
	found, err := c.stateClaimOf(ctx, vm)
	if err != nil {
		return err
	}
	switch {
	case !hasPersistentState(&vm.Spec.Template.Spec):
		// KubeVirt deletes the state of a VM that no longer keeps any.
		if found != nil {
			return pvcs.Delete(ctx, found.Name, metav1.DeleteOptions{})
		}
		return nil
	case found != nil && found.Labels[stateLabel] != vm.Name:
		patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`, stateLabel, vm.Name)
		_, err := pvcs.Patch(ctx, found.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	case found != nil:
		return nil
	}
	class, mode, err := c.stateStorageClass(ctx)
	if err != nil {
		return err
	}
	if class == "" {
		return fmt.Errorf("no default storage class found")
	}
	fs := corev1.PersistentVolumeFilesystem
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: stateLabel + "-" + vm.Name + "-", Namespace: vm.Namespace,
			Labels:          map[string]string{stateLabel: vm.Name, "cdi.kubevirt.io/applyStorageProfile": "true"},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm, virtv1.VirtualMachineGroupVersionKind)},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{mode},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Mi")}},
			StorageClassName: &class,
			VolumeMode:       &fs,
		},
	}
	_, err = c.createBoundPVC(ctx, pvc)
	return err
}

// stateClaimOf is backend-storage's PVCForVMI: the claim labelled for vm,
// else the one of the legacy name, else nil.
func (c *Controller) stateClaimOf(ctx context.Context, vm *virtv1.VirtualMachine) (*corev1.PersistentVolumeClaim, error) {
	pvcs := c.k8s.CoreV1().PersistentVolumeClaims(vm.Namespace)
	list, err := pvcs.List(ctx, metav1.ListOptions{LabelSelector: stateLabel + "=" + vm.Name})
	if err != nil {
		return nil, err
	}
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp == nil {
			return &list.Items[i], nil
		}
	}
	pvc, err := pvcs.Get(ctx, stateLabel+"-"+vm.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	case pvc.DeletionTimestamp != nil:
		return nil, nil
	}
	return pvc, nil
}

// stateStorageClass is backend-storage's getStorageClass and default
// access mode.
func (c *Controller) stateStorageClass(ctx context.Context) (string, corev1.PersistentVolumeAccessMode, error) {
	kvs, err := c.kv.KubevirtV1().KubeVirts(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err == nil && len(kvs.Items) > 0 {
		if sc := kvs.Items[0].Spec.Configuration.VMStateStorageClass; sc != "" {
			return sc, corev1.ReadWriteMany, nil
		}
	}
	class, err := (&dataVolumes{c: c}).defaultStorageClass(ctx)
	return class, corev1.ReadWriteOnce, err
}
