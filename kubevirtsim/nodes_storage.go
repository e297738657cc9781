package kubevirtsim

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The CSI sidecars' part of Nodes, for every StorageClass's provisioner:
//
//   - external-provisioner: a claim that kube-controller-manager's
//     PersistentVolume controller hands to the class's provisioner
//     (annotation volume.kubernetes.io/storage-provisioner; with
//     WaitForFirstConsumer only once the scheduler picked a node) gets a
//     PersistentVolume of the requested size, empty, cloned from a claim
//     or restored from a ready VolumeSnapshot; claims a volume populator
//     fills (dataSourceRef of another kind, CDI's) are left to it, as the
//     external-provisioner does. Released volumes of reclaim policy Delete
//     are deleted;
//   - external-resizer: a claim that the expand controller handed to the
//     driver (volume.kubernetes.io/storage-resizer) grows to its new
//     request, volume and claim capacity alike (the kubelet's file system
//     resize included);
//   - snapshot-controller and csi-snapshotter: a VolumeSnapshot of a claim
//     whose driver has a VolumeSnapshotClass (named, or the driver's
//     default) gets a bound, ready VolumeSnapshotContent; without one it
//     reports the snapshot controller's error and never becomes ready.

// Annotations of the PersistentVolume controller, the scheduler and the
// provisioners.
const (
	annStorageProvisioner = "volume.kubernetes.io/storage-provisioner"
	annSelectedNode       = "volume.kubernetes.io/selected-node"
	annProvisionedBy      = "pv.kubernetes.io/provisioned-by"
	annStorageResizer     = "volume.kubernetes.io/storage-resizer"
	annDefaultSnapClass   = "snapshot.storage.kubernetes.io/is-default-class"
	localPathProvisioner  = "rancher.io/local-path"
)

func (n *Nodes) syncClaim(ctx context.Context, key string) (time.Duration, error) {
	pvc := cached[*corev1.PersistentVolumeClaim](n.pvcs, key)
	if pvc == nil || pvc.DeletionTimestamp != nil {
		return 0, n.reclaim(ctx, key)
	}
	if pvc.Spec.VolumeName != "" {
		return 0, n.resize(ctx, pvc)
	}
	return 0, n.provision(ctx, pvc)
}

// provision creates the volume of a claim handed to its class's
// provisioner.
func (n *Nodes) provision(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	provisioner := pvc.Annotations[annStorageProvisioner]
	if provisioner == "" || pvc.Spec.StorageClassName == nil {
		return nil
	}
	class := cached[*storagev1.StorageClass](n.classes, *pvc.Spec.StorageClassName)
	if class == nil || class.Provisioner != provisioner {
		return nil
	}
	wffc := class.VolumeBindingMode != nil && *class.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer
	node := pvc.Annotations[annSelectedNode]
	if wffc && node == "" {
		return nil
	}
	size := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	if ref := dataSource(pvc); ref != nil {
		switch {
		case ref.Kind == "PersistentVolumeClaim" && (ref.APIGroup == nil || *ref.APIGroup == ""):
			src := cached[*corev1.PersistentVolumeClaim](n.pvcs, pvc.Namespace+"/"+ref.Name)
			if src == nil || src.Status.Phase != corev1.ClaimBound {
				return nil // the provisioner retries until the source is there
			}
		case ref.Kind == "VolumeSnapshot" && ref.APIGroup != nil && *ref.APIGroup == volumeSnapshotGVR.Group:
			snap := cached[*unstructured.Unstructured](n.snapshots, pvc.Namespace+"/"+ref.Name)
			if snap == nil {
				return nil
			}
			if ready, _, _ := unstructured.NestedBool(snap.Object, "status", "readyToUse"); !ready {
				return nil
			}
			if rs, ok, _ := unstructured.NestedString(snap.Object, "status", "restoreSize"); ok {
				if q, err := resource.ParseQuantity(rs); err == nil && q.Cmp(size) > 0 {
					size = q
				}
			}
		default:
			return nil // a volume populator's claim
		}
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        "pvc-" + string(pvc.UID),
			Annotations: map[string]string{annProvisionedBy: provisioner},
			Finalizers:  []string{"kubernetes.io/pv-protection"},
		},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   pvc.Spec.AccessModes,
			VolumeMode:                    pvc.Spec.VolumeMode,
			StorageClassName:              class.Name,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			MountOptions:                  class.MountOptions,
			ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID, ResourceVersion: pvc.ResourceVersion},
		},
	}
	if class.ReclaimPolicy != nil {
		pv.Spec.PersistentVolumeReclaimPolicy = *class.ReclaimPolicy
	}
	if provisioner == localPathProvisioner {
		dir := corev1.HostPathDirectoryOrCreate
		pv.Spec.HostPath = &corev1.HostPathVolumeSource{
			Path: fmt.Sprintf("/opt/local-path-provisioner/%s_%s_%s", pv.Name, pvc.Namespace, pvc.Name), Type: &dir}
	} else {
		fs := ""
		if pvc.Spec.VolumeMode == nil || *pvc.Spec.VolumeMode == corev1.PersistentVolumeFilesystem {
			fs = "ext4"
		}
		pv.Spec.CSI = &corev1.CSIPersistentVolumeSource{Driver: provisioner, VolumeHandle: uuid.NewString(), FSType: fs,
			VolumeAttributes: class.Parameters}
	}
	if node != "" && (provisioner == localPathProvisioner || wffc) {
		pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
		}}}}
	}
	_, err := n.opts.Kube.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

func dataSource(pvc *corev1.PersistentVolumeClaim) *corev1.TypedObjectReference {
	if r := pvc.Spec.DataSourceRef; r != nil {
		return r
	}
	if r := pvc.Spec.DataSource; r != nil {
		return &corev1.TypedObjectReference{APIGroup: r.APIGroup, Kind: r.Kind, Name: r.Name}
	}
	return nil
}

// reclaim deletes the Released volumes of reclaim policy Delete that a
// stand-in provisioner made for the claim ns/name.
func (n *Nodes) reclaim(ctx context.Context, key string) error {
	ns, name, _ := strings.Cut(key, "/")
	for _, o := range n.pvs.GetStore().List() {
		pv := o.(*corev1.PersistentVolume)
		ref := pv.Spec.ClaimRef
		if ref == nil || ref.Namespace != ns || ref.Name != name || pv.Status.Phase != corev1.VolumeReleased ||
			pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete || pv.Annotations[annProvisionedBy] == "" {
			continue
		}
		err := n.opts.Kube.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// resize grows the volume of a claim the external resizer serves, and the
// claim's capacity with it: one whose volume is its CSI driver's
// (external-resizer watches those), or that the expand controller handed
// to it (volume.kubernetes.io/storage-resizer, for migrated in-tree
// volumes).
func (n *Nodes) resize(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName == "" {
		return nil
	}
	want := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	have := pvc.Status.Capacity[corev1.ResourceStorage]
	if want.Cmp(have) <= 0 {
		return nil
	}
	pv, err := n.opts.Kube.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if pv.Spec.CSI == nil && pvc.Annotations[annStorageResizer] == "" {
		return nil
	}
	if cur := pv.Spec.Capacity[corev1.ResourceStorage]; cur.Cmp(want) < 0 {
		pv.Spec.Capacity[corev1.ResourceStorage] = want
		if _, err := n.opts.Kube.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	cp := pvc.DeepCopy()
	cp.Status.Capacity[corev1.ResourceStorage] = want
	cp.Status.AllocatedResources = corev1.ResourceList{corev1.ResourceStorage: want}
	cp.Status.AllocatedResourceStatuses = nil
	cp.Status.Conditions = nil
	_, err = n.opts.Kube.CoreV1().PersistentVolumeClaims(pvc.Namespace).UpdateStatus(ctx, cp, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// syncSnapshot takes a VolumeSnapshot of a claim: a content bound to it
// and both ready, or the snapshot controller's error when the claim's
// driver has no VolumeSnapshotClass.
func (n *Nodes) syncSnapshot(ctx context.Context, key string) (time.Duration, error) {
	if n.snapshots == nil {
		return 0, nil
	}
	snap := cached[*unstructured.Unstructured](n.snapshots, key)
	if snap == nil {
		return 0, n.dropContents(ctx, key)
	}
	if ready, _, _ := unstructured.NestedBool(snap.Object, "status", "readyToUse"); ready || snap.GetDeletionTimestamp() != nil {
		return 0, nil
	}
	claim, _, _ := unstructured.NestedString(snap.Object, "spec", "source", "persistentVolumeClaimName")
	if claim == "" {
		return 0, nil // pre-provisioned contents are not simulated
	}
	pvc := cached[*corev1.PersistentVolumeClaim](n.pvcs, snap.GetNamespace()+"/"+claim)
	if pvc == nil || pvc.Spec.VolumeName == "" {
		return 0, n.snapshotError(ctx, snap, fmt.Sprintf("failed to get input parameters to create snapshot %s: \"the PVC %s is not yet bound to a PV, will not attempt to take a snapshot\"", snap.GetName(), claim))
	}
	pv := cached[*corev1.PersistentVolume](n.pvs, pvc.Spec.VolumeName)
	if pv == nil {
		return 0, nil
	}
	driver := pv.Annotations[annProvisionedBy]
	className, _, _ := unstructured.NestedString(snap.Object, "spec", "volumeSnapshotClassName")
	class := n.snapshotClass(className, driver)
	if class == nil {
		return 0, n.snapshotError(ctx, snap, fmt.Sprintf("Failed to set default snapshot class with error cannot find default snapshot class for snapshot %s", snap.GetName()))
	}
	size := pv.Spec.Capacity[corev1.ResourceStorage]
	contentName := "snapcontent-" + string(snap.GetUID())
	policy, _, _ := unstructured.NestedString(class.Object, "deletionPolicy")
	now := time.Now()
	content := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotContent",
		"metadata": map[string]any{"name": contentName},
		"spec": map[string]any{
			"driver": driver, "deletionPolicy": policy, "volumeSnapshotClassName": class.GetName(),
			"source": map[string]any{"volumeHandle": volumeHandle(pv)},
			"volumeSnapshotRef": map[string]any{"kind": "VolumeSnapshot", "apiVersion": "snapshot.storage.k8s.io/v1",
				"namespace": snap.GetNamespace(), "name": snap.GetName(), "uid": string(snap.GetUID())},
		},
	}}
	contents := n.opts.Dynamic.Resource(volumeSnapshotContentGVR)
	created, err := contents.Create(ctx, content, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = contents.Get(ctx, contentName, metav1.GetOptions{})
	}
	if err != nil {
		return 0, err
	}
	if err := unstructured.SetNestedField(created.Object, map[string]any{
		"snapshotHandle": "snap-" + string(snap.GetUID()), "creationTime": now.UnixNano(),
		"readyToUse": true, "restoreSize": size.Value(),
	}, "status"); err != nil {
		return 0, err
	}
	if _, err := contents.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return 0, err
	}
	st := map[string]any{
		"boundVolumeSnapshotContentName": contentName,
		"creationTime":                   now.UTC().Format(time.RFC3339),
		"readyToUse":                     true,
		"restoreSize":                    size.String(),
	}
	return 0, n.writeSnapshotStatus(ctx, snap, st)
}

func (n *Nodes) snapshotError(ctx context.Context, snap *unstructured.Unstructured, msg string) error {
	if cur, _, _ := unstructured.NestedString(snap.Object, "status", "error", "message"); cur == msg {
		return nil
	}
	return n.writeSnapshotStatus(ctx, snap, map[string]any{
		"readyToUse": false,
		"error":      map[string]any{"message": msg, "time": time.Now().UTC().Format(time.RFC3339)},
	})
}

func (n *Nodes) writeSnapshotStatus(ctx context.Context, snap *unstructured.Unstructured, st map[string]any) error {
	cp := snap.DeepCopy()
	if err := unstructured.SetNestedField(cp.Object, st, "status"); err != nil {
		return err
	}
	_, err := n.opts.Dynamic.Resource(volumeSnapshotGVR).Namespace(snap.GetNamespace()).UpdateStatus(ctx, cp, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// snapshotClass is the VolumeSnapshotClass named, or the driver's default.
func (n *Nodes) snapshotClass(name, driver string) *unstructured.Unstructured {
	for _, o := range n.snapClass.GetStore().List() {
		c := o.(*unstructured.Unstructured)
		d, _, _ := unstructured.NestedString(c.Object, "driver")
		if d != driver {
			continue
		}
		if name != "" && c.GetName() == name {
			return c
		}
		if name == "" && c.GetAnnotations()[annDefaultSnapClass] == "true" {
			return c
		}
	}
	return nil
}

// dropContents deletes the contents (deletion policy Delete) of the
// VolumeSnapshot ns/name, which is gone.
func (n *Nodes) dropContents(ctx context.Context, key string) error {
	ns, name, _ := strings.Cut(key, "/")
	for _, o := range n.contents.GetStore().List() {
		c := o.(*unstructured.Unstructured)
		rns, _, _ := unstructured.NestedString(c.Object, "spec", "volumeSnapshotRef", "namespace")
		rname, _, _ := unstructured.NestedString(c.Object, "spec", "volumeSnapshotRef", "name")
		policy, _, _ := unstructured.NestedString(c.Object, "spec", "deletionPolicy")
		if rns != ns || rname != name || policy != "Delete" {
			continue
		}
		err := n.opts.Dynamic.Resource(volumeSnapshotContentGVR).Delete(ctx, c.GetName(), metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

func volumeHandle(pv *corev1.PersistentVolume) string {
	if pv.Spec.CSI != nil {
		return pv.Spec.CSI.VolumeHandle
	}
	return pv.Name
}

func snapshotContentIndex(obj any) ([]string, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, nil
	}
	if name, _, _ := unstructured.NestedString(u.Object, "status", "boundVolumeSnapshotContentName"); name != "" {
		return []string{name}, nil
	}
	return []string{"snapcontent-" + string(u.GetUID())}, nil
}
