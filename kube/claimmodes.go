package kube

import (
	"context"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// fillClaimModes gives a DataVolume's storage that names neither access
// nor volume mode ReadWriteOnce and Filesystem when its class's
// StorageProfile offers none (status.claimPropertySets empty, as for
// provisioners CDI does not know, pkg/storagecapabilities). CDI takes the
// modes from that profile and otherwise never makes the claim: the
// DataVolume stays Pending with ErrClaimNotValid "no accessMode specified
// in StorageProfile" (datavolume util.go getDefaultVolumeAndAccessMode).
// ReadWriteOnce and Filesystem are what every provisioner serves and what
// a claim without modes gets elsewhere. A profile that is missing (CDI
// has not made it yet) or cannot be read changes nothing: CDI decides.
func (c *Cluster) fillClaimModes(ctx context.Context, s *cdiv1.StorageSpec) {
	if s == nil || len(s.AccessModes) > 0 || s.VolumeMode != nil || s.StorageClassName == nil || c.own.cdi == nil {
		return
	}
	p, err := c.own.cdi.CdiV1beta1().StorageProfiles().Get(ctx, *s.StorageClassName, metav1.GetOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			c.logger.Debug("reading a StorageProfile", zap.String("storage_class", *s.StorageClassName), zap.Error(err))
		}
		return
	}
	for _, set := range p.Status.ClaimPropertySets {
		if len(set.AccessModes) > 0 {
			return
		}
	}
	fs := corev1.PersistentVolumeFilesystem
	s.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	s.VolumeMode = &fs
}

// fillTemplateClaimModes is fillClaimModes for vm's DataVolume templates
// that old (the VM before an update; nil for a new one) does not have:
// the DataVolumes of the others exist already.
func (c *Cluster) fillTemplateClaimModes(ctx context.Context, vm, old *kubevirtv1.VirtualMachine) {
	had := map[string]bool{}
	if old != nil {
		for _, t := range old.Spec.DataVolumeTemplates {
			had[t.Name] = true
		}
	}
	for i := range vm.Spec.DataVolumeTemplates {
		if t := &vm.Spec.DataVolumeTemplates[i]; !had[t.Name] {
			c.fillClaimModes(ctx, t.Spec.Storage)
		}
	}
}

// claimNotValid is CDI's reason for not making dv's claim at all
// (ErrClaimNotValid: a StorageProfile without modes, a missing
// StorageClass), which it retries for ever: its Bound condition's
// message, "" when there is none.
func claimNotValid(dv *cdiv1.DataVolume) string {
	for _, c := range dv.Status.Conditions {
		if c.Type == cdiv1.DataVolumeBound && c.Status == corev1.ConditionFalse && c.Reason == errClaimNotValid {
			if c.Message != "" {
				return c.Message
			}
			return c.Reason
		}
	}
	return ""
}

// errClaimNotValid is CDI's reason (pkg/controller/common ErrClaimNotValid).
const errClaimNotValid = "ErrClaimNotValid"

// provisionFailure is CDI's reason for not making the claim of one of
// vm's DataVolumes, "" when there is none.
func (c *Cluster) provisionFailure(vm *kubevirtv1.VirtualMachine) string {
	for _, t := range vm.Spec.DataVolumeTemplates {
		if dv := c.DataVolume(vm.Namespace, t.Name); dv != nil && metav1.IsControlledBy(dv, vm) {
			if why := claimNotValid(dv); why != "" {
				return "DataVolume " + dv.Name + ": " + why
			}
		}
	}
	return ""
}
