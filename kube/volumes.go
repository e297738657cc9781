package kube

import (
	"context"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// pvcStorageIndex indexes the claims holding VM disks by StorageClass (a
// PVE storage). Claims holding files are left out: they belong to the
// directory storage whatever their class (FileClaims, pvcFileIndex), so a
// storage's disks cost no walk over its files.
const pvcStorageIndex = "storageclass"

// diskClaimVMID returns the vmid of a claim named as a VM's disk
// (vm-<vmid>-disk-<n>, or base-<vmid>-disk-<n> for a template's).
func diskClaimVMID(name string) (string, bool) {
	for _, prefix := range []string{"vm-", "base-"} {
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		id, n, ok := strings.Cut(rest, "-disk-")
		if ok && allDigits(id) && allDigits(n) {
			return id, true
		}
	}
	return "", false
}

func allDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

func pvcStorageIndexFunc(obj any) ([]string, error) {
	if class, ok := diskClass(obj); ok {
		return []string{class}, nil
	}
	return nil, nil
}

// diskClass is the StorageClass of a cached claim holding a VM disk (one
// with a class, not holding a file).
func diskClass(obj any) (string, bool) {
	pvc, ok := obj.(*packedClaim)
	if !ok || pvc.class == nil || pvc.file() != "" {
		return "", false
	}
	return *pvc.class, true
}

// DiskClaims lists the cached claims of a StorageClass (a PVE storage)
// that hold VM disks, not files, by namespace and name. The claims are
// built from the cache's records: read them, never modify them.
func (c *Cluster) DiskClaims(storageClass string) []*corev1.PersistentVolumeClaim {
	return claimsOf(c.pvcs.byIndex(pvcStorageIndex, storageClass))
}

// diskUse is the space the disk claims of each StorageClass take, and
// the vmids that have claims named as their disks (diskClaimVMID), as of
// the Cluster's claimGen gen.
type diskUse struct {
	gen   uint64
	bytes map[string]int64
	vmids map[string]struct{}
}

// claimChanged is the claim cache's change handler: it wakes the tasks
// waiting on the claim and dates the disk usage.
func (c *Cluster) claimChanged() changeFunc {
	touch := c.Tasks.touchBy(c.claimKeys)
	return func(old, new any) {
		c.claimGen.Add(1)
		touch(old, new)
	}
}

// DiskClaimsBytes is the space the disk claims of a StorageClass take (as
// DiskClaims lists them): their bound capacity, the request while
// unbound. It is summed over all classes once per change of the claims,
// not per call: every storage row and /cluster/resources asks for it, and
// a class may hold thousands of claims.
func (c *Cluster) DiskClaimsBytes(storageClass string) int64 {
	return c.claimTotals().bytes[storageClass]
}

// claimTotals is the diskUse of the claims cached now, made anew once
// per change of the claims.
func (c *Cluster) claimTotals() *diskUse {
	gen := c.claimGen.Load()
	if u := c.diskUse.Load(); u != nil && u.gen == gen {
		return u
	}
	u := &diskUse{gen: gen, bytes: map[string]int64{}, vmids: map[string]struct{}{}}
	for _, o := range c.pvcs.list() {
		if class, ok := diskClass(o); ok {
			u.bytes[class] += o.(*packedClaim).bytes()
		}
		if p, ok := o.(*packedClaim); ok {
			if id, ok := diskClaimVMID(p.Name); ok {
				u.vmids[id] = struct{}{}
			}
		}
	}
	c.diskUse.Store(u)
	return u
}

// CachedPVC returns a claim from the cache (built from its record: read
// it, never modify it), or nil.
func (c *Cluster) CachedPVC(ns, name string) *corev1.PersistentVolumeClaim {
	return c.cachedClaim(ns, name).claim()
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

// volumesProvisioned tells whether every DataVolume template of vm (and
// state, a clone's state copy, see CloneState; "" for none) has its claim and has done what
// it does before the VM first runs (dataVolumeSettled). Neither
// KubeVirt's printable status nor the claims say it alone: right after
// the VM is made, virt-controller can call it Stopped before its
// DataVolumes are in its cache, and CDI makes a volume populator's claim
// before filling it.
func (c *Cluster) volumesProvisioned(vm *kubevirtv1.VirtualMachine, state string) bool {
	if !c.stateProvisioned(vm.Namespace, state) {
		return false
	}
	for _, t := range vm.Spec.DataVolumeTemplates {
		if c.CachedPVC(vm.Namespace, t.Name) == nil {
			return false
		}
		// None: collected after it succeeded, or made without CDI.
		if dv := c.DataVolume(vm.Namespace, t.Name); dv != nil && !dataVolumeSettled(dv) {
			return false
		}
	}
	return true
}

// cdiErrClaimNotValid is the reason CDI gives a DataVolume whose claim it
// cannot render (pkg/controller/datavolume), e.g. one giving only a class
// and a size where the class's StorageProfile has no access or volume
// mode: CDI retries until someone sets them, the VM stays Provisioning.
const cdiErrClaimNotValid = "ErrClaimNotValid"

// claimNotValidForGood tells whether cond says CDI cannot render a
// DataVolume's claim until someone acts. A StorageProfile not found is
// not such a case: CDI's StorageProfile controller makes one for every
// StorageClass, and the DataVolume controller, which retries meanwhile,
// renders the claim once it is there (a class just made, or CDI's
// controller behind: seen on a loaded machine).
func claimNotValidForGood(cond cdiv1.DataVolumeCondition) bool {
	return cond.Reason == cdiErrClaimNotValid && cond.Status != corev1.ConditionTrue && !profileMissing(cond)
}

// profileMissing tells whether cond is CDI's ErrClaimNotValid for a
// StorageProfile not found (pkg/controller/datavolume/util.go: "cannot
// get StorageProfile: ... not found").
func profileMissing(cond cdiv1.DataVolumeCondition) bool {
	return cond.Reason == cdiErrClaimNotValid && cond.Status != corev1.ConditionTrue &&
		strings.Contains(cond.Message, "cannot get StorageProfile") && strings.Contains(cond.Message, "not found")
}

// invalidClaim returns why CDI cannot make the claim of a DataVolume
// template of vm, or of state, a clone's state copy ("" for none)
// ("DataVolume name: CDI's message"), or "".
func (c *Cluster) invalidClaim(vm *kubevirtv1.VirtualMachine, state string) string {
	for _, name := range provisionedDataVolumes(vm, state) {
		dv := c.DataVolume(vm.Namespace, name)
		if dv == nil {
			continue
		}
		for _, cond := range dv.Status.Conditions {
			if claimNotValidForGood(cond) {
				return "DataVolume " + name + ": " + cond.Message
			}
		}
	}
	return ""
}

// provisionedDataVolumes names the DataVolumes vm waits for before it
// first runs: its templates, the DataVolumes its volumes name (those
// KubeVirt judges for DataVolumeError), and state, a clone's state copy
// ("" for none).
func provisionedDataVolumes(vm *kubevirtv1.VirtualMachine, state string) []string {
	names := make([]string, 0, len(vm.Spec.DataVolumeTemplates)+1)
	for _, t := range vm.Spec.DataVolumeTemplates {
		names = append(names, t.Name)
	}
	if tmpl := vm.Spec.Template; tmpl != nil {
		for _, v := range tmpl.Spec.Volumes {
			if v.DataVolume != nil && !slices.Contains(names, v.DataVolume.Name) {
				names = append(names, v.DataVolume.Name)
			}
		}
	}
	if state != "" {
		names = append(names, state)
	}
	return names
}

// dataVolumeTrouble tells why a DataVolume vm waits for (see
// provisionedDataVolumes) failed for good
// (importFailure), or else what error CDI is retrying on one
// (importRetrying), each as "DataVolume name: CDI's message", or "".
func (c *Cluster) dataVolumeTrouble(vm *kubevirtv1.VirtualMachine, state string) (failed, retrying string) {
	for _, name := range provisionedDataVolumes(vm, state) {
		dv := c.DataVolume(vm.Namespace, name)
		if dv == nil {
			continue
		}
		if why := importFailure(dv); why != "" {
			return "DataVolume " + name + ": " + why, ""
		}
		if why := importRetrying(dv); why != "" && retrying == "" {
			retrying = "DataVolume " + name + ": " + why
		}
	}
	return "", retrying
}

// dataVolumeSettled tells whether a DataVolume is done until a VM uses
// it: filled, or waiting for its first consumer to be scheduled, as
// KubeVirt judges it for the printable status Provisioning
// (pkg/storage/types HasDataVolumeProvisioning).
func dataVolumeSettled(dv *cdiv1.DataVolume) bool {
	switch dv.Status.Phase {
	case cdiv1.Succeeded, cdiv1.PendingPopulation:
		return true
	case cdiv1.WaitForFirstConsumer:
		for _, c := range dv.Status.Conditions {
			if c.Type == cdiv1.DataVolumeBound && c.Status == corev1.ConditionTrue {
				return false
			}
		}
		return true
	}
	return false
}

// ClaimUsers lists the cached VMs of ns that keep data on the claim name
// or refer to it (translate.VolumeClaims), except the VM with UID except.
func (c *Cluster) ClaimUsers(ns, name string, except types.UID) []*kubevirtv1.VirtualMachine {
	var out []*kubevirtv1.VirtualMachine
	for _, p := range c.claimUsers(ns, name, except) {
		out = append(out, p.full())
	}
	return out
}

// claimUsers is ClaimUsers of the packed VMs, by name.
func (c *Cluster) claimUsers(ns, name string, except types.UID) []*packedVM {
	inf := c.vms.informerFor(ns)
	if inf == nil {
		return nil
	}
	// The namespace's VMs are a range of the vmid table's keys, in name
	// order: with every namespace served the informer holds the whole
	// cluster's VMs, and an index of them by namespace cost 85 bytes per
	// VM (bench CacheMemory).
	st := inf.GetStore()
	var out []*packedVM
	for key := range c.table().namespaceKeys(ns) {
		o, _, _ := st.GetByKey(key)
		vm, ok := o.(*packedVM)
		if !ok || (except != "" && vm.hasUID(except)) {
			continue
		}
		if slices.Contains(vm.claims, name) {
			out = append(out, vm)
		}
	}
	return out
}

// VolumeNameTaken tells whether a new disk may not take the claim name in
// ns: a PVC has it (in the cache, or on the apiserver, so that a claim
// made a moment ago counts), a VM refers to it (ClaimUsers: DataVolume
// templates not created yet, unused volumes), or a DataVolume has it (when
// the caller may read DataVolumes; one without its PVC exists only for a
// moment). An error means the answer is unknown.
func (c *Cluster) VolumeNameTaken(ctx context.Context, ns, name string) (bool, error) {
	if c.CachedPVC(ns, name) != nil || len(c.claimUsers(ns, name, "")) > 0 {
		return true, nil
	}
	// As the plugin: a claim the caller cannot read still takes the name.
	_, err := c.own.kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		return true, nil
	case !apierrors.IsNotFound(err):
		return false, err
	}
	if cdi := c.as(ctx).cdi; cdi != nil {
		_, err := cdi.CdiV1beta1().DataVolumes(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil:
			return true, nil
		case !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err):
			return false, err
		}
	}
	return false, nil
}

// DeleteVolume deletes a claim a config change freed (PVE deleting an
// unused volume, or a disk removed with force=1), as the caller: its
// DataVolume when it has one (the garbage collector removes the PVC the
// DataVolume owns), else the PVC. Each delete is guarded by the UID just
// read. The caller has made sure no other VM uses the claim.
func (c *Cluster) DeleteVolume(ctx context.Context, ns, name string) error {
	bg := metav1.DeletePropagationBackground
	if cdi := c.as(ctx).cdi; cdi != nil {
		dv, err := cdi.CdiV1beta1().DataVolumes(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil:
			uid := dv.UID
			err = cdi.CdiV1beta1().DataVolumes(ns).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}, PropagationPolicy: &bg})
			if err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			if pvc := c.CachedPVC(ns, name); pvc == nil || metav1.IsControlledBy(pvc, dv) {
				return nil
			}
		case !apierrors.IsNotFound(err):
			return err
		}
	}
	pvc, err := c.as(ctx).kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	uid := pvc.UID
	err = c.as(ctx).kube.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}, PropagationPolicy: &bg})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// claimKeys names the task subjects a claim's change is about: the claim
// itself (its deletion), its owners, and the VM that owns it through a
// DataVolume (whose disks are provisioned once the claims exist).
func (c *Cluster) claimKeys(obj any) []string {
	out := ownerKeys(obj)
	pvc, ok := obj.(*packedClaim)
	if !ok {
		return out
	}
	for _, r := range pvc.GetOwnerReferences() {
		if r.Kind != "DataVolume" {
			continue
		}
		if dv := c.cachedDataVolume(pvc.Namespace, r.Name); dv != nil {
			out = append(out, ownerKeys(dv)[1:]...)
		}
	}
	return out
}

// StorageClass returns a cached StorageClass, or nil.
func (c *Cluster) StorageClass(name string) *storagev1.StorageClass {
	return cached[storagev1.StorageClass](c.storageClasses, "", name)
}
