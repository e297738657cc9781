package kube

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

const pvcStorageIndex = "storageclass"

func pvcStorageIndexFunc(obj any) ([]string, error) {
	pvc, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok || pvc.Spec.StorageClassName == nil {
		return nil, nil
	}
	return []string{*pvc.Spec.StorageClassName}, nil
}

// ClaimsOf lists the cached claims of a StorageClass (a PVE storage), by
// namespace and name.
func (c *Cluster) ClaimsOf(storageClass string) []*corev1.PersistentVolumeClaim {
	var out []*corev1.PersistentVolumeClaim
	for _, o := range c.pvcs.byIndex(pvcStorageIndex, storageClass) {
		out = append(out, o.(*corev1.PersistentVolumeClaim))
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// CachedPVC returns a claim from the cache, or nil.
func (c *Cluster) CachedPVC(ns, name string) *corev1.PersistentVolumeClaim {
	if o := c.pvcs.get(ns, name); o != nil {
		return o.(*corev1.PersistentVolumeClaim)
	}
	return nil
}

// StorageClassExpands tells whether claims of a StorageClass can grow.
func (c *Cluster) StorageClassExpands(name string) bool {
	o := c.storageClasses.get("", name)
	if o == nil {
		return false
	}
	sc := o.(*storagev1.StorageClass)
	return sc.AllowVolumeExpansion != nil && *sc.AllowVolumeExpansion
}

// claimsExist tells whether every DataVolume template of vm has its claim.
func (c *Cluster) claimsExist(vm *kubevirtv1.VirtualMachine) bool {
	for _, dv := range vm.Spec.DataVolumeTemplates {
		if c.CachedPVC(vm.Namespace, dv.Name) == nil {
			return false
		}
	}
	return true
}
