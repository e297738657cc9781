package kube

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// CDIGroupVersion is CDI's API, which downloads and uploads need.
const CDIGroupVersion = "cdi.kubevirt.io/v1beta1"

// ErrNoCDI is returned by downloads and uploads on a cluster without CDI.
var ErrNoCDI = errors.New("downloads and uploads need CDI (" + CDIGroupVersion + "), which this cluster does not serve")

// FileExistsError is returned by CreateFile when the claim (or a
// DataVolume) of that name already exists in the namespace.
type FileExistsError struct{ Namespace, Name string }

func (e *FileExistsError) Error() string {
	return fmt.Sprintf("claim %s/%s already exists", e.Namespace, e.Name)
}

// startCDIStore watches DataVolumes when the cluster has a CDI client and
// serves CDI's API: downloads are DataVolumes, and their tasks and the
// storage listing read their state from the cache.
func (c *Cluster) startCDIStore(ctx context.Context) []*store {
	if c.own.cdi == nil {
		return nil
	}
	if !c.opts.AssumeKubeVirtAPIs {
		if _, err := c.own.kube.Discovery().ServerResourcesForGroupVersion(CDIGroupVersion); err != nil {
			c.logger.Info("CDI API not served; downloads and uploads will say so", zap.Error(err))
			return nil
		}
	}
	cdi := c.own.cdi.CdiV1beta1()
	c.dataVolumes = newStore(ctx, c.listScopes(), &cdiv1.DataVolume{}, listWatchFuncs{
		list: func(ctx context.Context, ns string, o metav1.ListOptions) (runtime.Object, error) {
			return listJSON(ctx, cdi.RESTClient(), "datavolumes", ns, o, cdi.DataVolumes(ns).List)
		},
		watch: func(ctx context.Context, ns string, o metav1.ListOptions) (watch.Interface, error) {
			return cdi.DataVolumes(ns).Watch(ctx, o)
		},
	}, c.opts.Resync, nil, packingDataVolumes(&specCodec{}), c.Tasks.touchBy(ownerKeys))
	return []*store{c.dataVolumes}
}

// ClaimPath is how a claim shows as a file path (in PVE's volume path and
// task logs).
func ClaimPath(ns, name string) string { return "/dev/pvc/" + ns + "/" + name }

// HasCDI tells whether DataVolumes can be made and watched.
func (c *Cluster) HasCDI() bool { return c.dataVolumes != nil }

// DataVolume returns a cached DataVolume (decoded from its record: read
// it, never modify it), or nil.
func (c *Cluster) DataVolume(ns, name string) *cdiv1.DataVolume {
	return c.cachedDataVolume(ns, name).dataVolume()
}

// ClaimPopulated tells whether a claim holds its data: false while the
// DataVolume that controls it has not succeeded (an import running or
// failed), true for claims made otherwise.
func (c *Cluster) ClaimPopulated(pvc *corev1.PersistentVolumeClaim) bool {
	ref := metav1.GetControllerOf(pvc)
	if ref == nil || ref.Kind != "DataVolume" {
		return true
	}
	// The record, not DataVolume: storage listings ask of every file.
	dv := c.cachedDataVolume(pvc.Namespace, ref.Name)
	if dv == nil || !dv.hasUID(ref.UID) {
		return true // collected after it succeeded: the claim is what is left
	}
	return dv.phase == cdiv1.Succeeded
}

// CreateFile creates the DataVolume of a file download or upload, as the
// caller, unless a claim or DataVolume of its name exists in its namespace
// (asked of the apiserver, not the cache: PVE checks the file right before
// the download), which is a *FileExistsError.
func (c *Cluster) CreateFile(ctx context.Context, dv *cdiv1.DataVolume) (*cdiv1.DataVolume, error) {
	if !c.HasCDI() {
		return nil, ErrNoCDI
	}
	if !c.Serves(dv.Namespace) {
		return nil, fmt.Errorf("namespace %q is not served", dv.Namespace)
	}
	exists := &FileExistsError{Namespace: dv.Namespace, Name: dv.Name}
	// The existence checks read as the plugin, so that a file the caller
	// cannot see is still refused as PVE refuses it; the create is the
	// caller's.
	pvc, err := c.own.kube.CoreV1().PersistentVolumeClaims(dv.Namespace).Get(ctx, dv.Name, metav1.GetOptions{})
	switch {
	case err == nil && pvc.DeletionTimestamp != nil:
		// A file deleted a moment ago whose claim is still going (its
		// protection finalizer): PVE's file is gone once deleted, and a
		// client replacing it downloads again at once.
		if err := c.waitFileGoneFor(ctx, dv.Namespace, dv.Name); err != nil {
			return nil, exists
		}
	case err == nil:
		return nil, exists
	case !apierrors.IsNotFound(err):
		return nil, err
	}
	old, err := c.own.cdi.CdiV1beta1().DataVolumes(dv.Namespace).Get(ctx, dv.Name, metav1.GetOptions{})
	switch {
	case err == nil && old.DeletionTimestamp != nil:
		if err := c.waitFileGoneFor(ctx, dv.Namespace, dv.Name); err != nil {
			return nil, exists
		}
	case err == nil:
		return nil, exists
	case !apierrors.IsNotFound(err):
		return nil, err
	}
	out, err := c.as(ctx).cdi.CdiV1beta1().DataVolumes(dv.Namespace).Create(ctx, dv, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil, exists
	}
	if err != nil {
		return nil, err
	}
	// Read-your-writes: the download's task finds it at once.
	c.dataVolumes.put(out, true)
	return out, nil
}

// DeleteFile deletes the claim of a file, as the caller: through the
// DataVolume that controls it (the garbage collector then removes the
// claim), else the claim itself; either guarded by its UID.
func (c *Cluster) DeleteFile(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	bg := metav1.DeletePropagationBackground
	if ref := metav1.GetControllerOf(pvc); ref != nil && ref.Kind == "DataVolume" && c.as(ctx).cdi != nil {
		uid := ref.UID
		err := c.as(ctx).cdi.CdiV1beta1().DataVolumes(pvc.Namespace).Delete(ctx, ref.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &uid}, PropagationPolicy: &bg,
		})
		if !apierrors.IsNotFound(err) {
			return err
		}
		// The DataVolume is gone already, and the collector takes the claim.
		return nil
	}
	uid := pvc.UID
	return c.as(ctx).kube.CoreV1().PersistentVolumeClaims(pvc.Namespace).Delete(ctx, pvc.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uid}, PropagationPolicy: &bg,
	})
}

// FileUsers lists, in vmid order, the VMs of the claim's namespace that use
// it (ClaimUsers), as guests so that refusals can name their vmids.
func (c *Cluster) FileUsers(ns, claim string) []Guest {
	users := c.claimUsers(ns, claim, "")
	if len(users) == 0 {
		return nil
	}
	t, nt := c.table(), c.nodeTable()
	var out []Guest
	for _, vm := range users {
		// As Guests: a VM added after the table was built shows next time.
		if id, ok := t.idOf(vm.Namespace, vm.Name); ok {
			out = append(out, c.guest(id, vm, nt))
		}
	}
	sortGuests(out)
	return out
}

// importFailure is why dv's copy failed for good, in CDI's words, or ""
// while it may still finish (see importRetrying): a Failed DataVolume
// (CDI's only terminal phase for it), a claim CDI cannot render
// (ErrClaimNotValid: CDI retries until an admin acts), an image that
// cannot be pulled, or a worker pod (importer, cloner, upload server) that
// stopped on an error again after its kubelet restarted it. PVE's download
// and clone workers fail on their first error; CDI retries, so an error
// counts once CDI's own retry has met it too.
func importFailure(dv *cdiv1.DataVolume) string {
	running, ready := dataVolumeConditions(dv)
	if dv.Status.Phase == cdiv1.Failed {
		for _, c := range []*cdiv1.DataVolumeCondition{running, ready} {
			if c != nil && c.Message != "" {
				return c.Message
			}
		}
		return "DataVolume " + dv.Namespace + "/" + dv.Name + " failed"
	}
	for _, c := range dv.Status.Conditions {
		// CDI cannot make the claim (a StorageProfile without access or
		// volume modes, …) and retries for ever.
		if claimNotValidForGood(c) {
			return cmp.Or(c.Message, c.Reason)
		}
	}
	if running == nil || running.Status != corev1.ConditionFalse {
		return ""
	}
	switch {
	case running.Reason == cdiReasonImagePullFailed,
		// The worker pods run with restartPolicy OnFailure and CDI counts
		// their restarts (status.restartCount, from the claim's
		// cdi.kubevirt.io/storage.pod.restarts): Running=False/Error with
		// a restart counted is a worker that failed, was restarted and
		// failed again.
		running.Reason == cdiReasonError && dv.Status.RestartCount > 0:
		return cmp.Or(running.Message, running.Reason)
	}
	return ""
}

// importRetrying is CDI's message while dv reports an error it retries
// (Running=False, reason Error, and no failure by importFailure; or its
// StorageProfile not made yet: profileMissing), or "".
// KubeVirt already shows the VM as DataVolumeError then (pkg/storage/types
// HasDataVolumeErrors), but the error need not last: a worker pod's first
// failure is restarted by its kubelet, and CDI's clone populator writes
// every error of a reconcile as clone phase Error (Running=False, reason
// Error; populators/clone-populator.go updateClonePhaseError) and tries
// again: e.g. a progress poll of the worker pod's /metrics that timed out.
// CDI deliberately does not make that DataVolume Failed
// (clone-controller-base.go updateStatusPhaseForPopulator), and the clone
// goes on.
func importRetrying(dv *cdiv1.DataVolume) string {
	for _, c := range dv.Status.Conditions {
		if profileMissing(c) {
			return c.Message
		}
	}
	running, _ := dataVolumeConditions(dv)
	if running == nil || running.Status != corev1.ConditionFalse || running.Reason != cdiReasonError || importFailure(dv) != "" {
		return ""
	}
	return cmp.Or(running.Message, running.Reason)
}

// CDI's reasons of a DataVolume's Running condition (pkg/controller).
const (
	cdiReasonError           = "Error"
	cdiReasonImagePullFailed = "ImagePullFailed"
)

// dataVolumeConditions returns dv's Running and Ready conditions, or nil.
func dataVolumeConditions(dv *cdiv1.DataVolume) (running, ready *cdiv1.DataVolumeCondition) {
	for i := range dv.Status.Conditions {
		switch c := &dv.Status.Conditions[i]; c.Type {
		case cdiv1.DataVolumeRunning:
			running = c
		case cdiv1.DataVolumeReady:
			ready = c
		}
	}
	return running, ready
}

const pvcFileIndex = "file"

// pvcFileIndexFunc indexes claims holding a file of a directory storage
// by its content type.
func pvcFileIndexFunc(obj any) ([]string, error) {
	if pvc, ok := obj.(*packedClaim); ok {
		if content := pvc.file(); content != "" {
			return []string{content}, nil
		}
	}
	return nil, nil
}

// FileClaims lists the cached claims holding files of content type content
// (translate.FileOf; every type when ""), by namespace and name.
func (c *Cluster) FileClaims(content string) []*corev1.PersistentVolumeClaim {
	var out []*corev1.PersistentVolumeClaim
	for _, t := range []string{translate.ContentISO, translate.ContentImport, translate.ContentSnippets} {
		if content != "" && t != content {
			continue
		}
		for _, o := range c.pvcs.byIndex(pvcFileIndex, t) {
			out = append(out, o.(*packedClaim).claim())
		}
	}
	sortClaims(out)
	return out
}

// claimsOf builds the claims of records, by namespace and name.
func claimsOf(objs []any) []*corev1.PersistentVolumeClaim {
	out := make([]*corev1.PersistentVolumeClaim, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*packedClaim).claim())
	}
	sortClaims(out)
	return out
}

func sortClaims(out []*corev1.PersistentVolumeClaim) {
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
}

// Annotations that make a StorageClass the default of KubeVirt's disks and
// of the cluster.
const (
	annDefaultVirtClass = "storageclass.kubevirt.io/is-default-virt-class"
	annDefaultClass     = "storageclass.kubernetes.io/is-default-class"
)

// DefaultStorageClass is the StorageClass CDI would pick for a DataVolume
// that names none: KubeVirt's default virt class, else the cluster's
// default class ("" when there is neither; by name when several claim it).
func (c *Cluster) DefaultStorageClass() string {
	virt, def := "", ""
	for _, sc := range c.StorageClasses() {
		if sc.Annotations[annDefaultVirtClass] == "true" && virt == "" {
			virt = sc.Name
		}
		if sc.Annotations[annDefaultClass] == "true" && def == "" {
			def = sc.Name
		}
	}
	if virt != "" {
		return virt
	}
	return def
}

// FileTransferred records on a file's claim and the DataVolume that made
// it what the plugin's transfer found (the file's size when size > 0, its
// checksum "<algorithm>:<hex>" when set) and removes
// AnnotationFilePending, so that it is listed: the plugin's own record of
// a transfer it made and checked (like a task's), written as the plugin.
func (c *Cluster) FileTransferred(ctx context.Context, ns, name string, size int64, checksum string) error {
	ann := map[string]any{translate.AnnotationFilePending: nil}
	if size > 0 {
		ann[translate.AnnotationFileSize] = strconv.FormatInt(size, 10)
	}
	if checksum != "" {
		ann[translate.AnnotationChecksum] = checksum
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		return err
	}
	pvc, err := c.own.kube.CoreV1().PersistentVolumeClaims(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return err
	}
	c.pvcs.put(pvc, false) // listed at once on this replica
	if c.own.cdi != nil {
		if _, err := c.own.cdi.CdiV1beta1().DataVolumes(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// DropFile deletes the DataVolume of a file whose transfer failed (its
// claim follows), as the plugin: the cleanup of a transfer it made, which
// the caller may not be allowed to delete.
func (c *Cluster) DropFile(ctx context.Context, ns, name string) error {
	if c.own.cdi == nil {
		return ErrNoCDI
	}
	bg := metav1.DeletePropagationBackground
	err := c.own.cdi.CdiV1beta1().DataVolumes(ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &bg})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// fileGoneWait bounds how long a new file waits for a deleted one of its
// name to go.
const fileGoneWait = 30 * time.Second

// waitFileGoneFor is WaitFileGone for at most fileGoneWait.
func (c *Cluster) waitFileGoneFor(ctx context.Context, ns, name string) error {
	ctx, cancel := context.WithTimeout(ctx, fileGoneWait)
	defer cancel()
	return c.WaitFileGone(ctx, ns, name)
}

// WaitFileGone waits until neither the claim nor the DataVolume ns/name
// exists any more, asked of the apiserver (a file being replaced).
func (c *Cluster) WaitFileGone(ctx context.Context, ns, name string) error {
	for {
		_, perr := c.own.kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		var derr error = apierrors.NewNotFound(cdiv1.Resource("datavolumes"), name)
		if c.own.cdi != nil {
			_, derr = c.own.cdi.CdiV1beta1().DataVolumes(ns).Get(ctx, name, metav1.GetOptions{})
		}
		switch {
		case apierrors.IsNotFound(perr) && apierrors.IsNotFound(derr):
			return nil
		case perr != nil && !apierrors.IsNotFound(perr):
			return perr
		case derr != nil && !apierrors.IsNotFound(derr):
			return derr
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("claim %s/%s is still being deleted", ns, name)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
