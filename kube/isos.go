package kube

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// CDIGroupVersion is CDI's API, which ISO downloads need.
const CDIGroupVersion = "cdi.kubevirt.io/v1beta1"

// ErrNoCDI is returned by ISO downloads on a cluster without CDI.
var ErrNoCDI = errors.New("ISO downloads need CDI (" + CDIGroupVersion + "), which this cluster does not serve")

// ISOExistsError is returned by CreateISO when the claim (or a DataVolume)
// of that name already exists in the namespace.
type ISOExistsError struct{ Namespace, Name string }

func (e *ISOExistsError) Error() string {
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
			c.logger.Info("CDI API not served; ISO downloads will say so", zap.Error(err))
			return nil
		}
	}
	cdi := c.own.cdi.CdiV1beta1()
	c.dataVolumes = newStore(ctx, c.own.kube, c.opts.Namespaces, &cdiv1.DataVolume{}, listWatchFuncs{
		list: func(ctx context.Context, ns string, o metav1.ListOptions) (runtime.Object, error) {
			return cdi.DataVolumes(ns).List(ctx, o)
		},
		watch: func(ctx context.Context, ns string, o metav1.ListOptions) (watch.Interface, error) {
			return cdi.DataVolumes(ns).Watch(ctx, o)
		},
	}, c.opts.Resync, nil, stripStorage, c.Tasks.touchBy(ownerKeys))
	return []*store{c.dataVolumes}
}

// ClaimPath is how a claim shows as a file path (in PVE's volume path and
// task logs).
func ClaimPath(ns, name string) string { return "/dev/pvc/" + ns + "/" + name }

// HasCDI tells whether DataVolumes can be made and watched.
func (c *Cluster) HasCDI() bool { return c.dataVolumes != nil }

// DataVolume returns a cached DataVolume, or nil.
func (c *Cluster) DataVolume(ns, name string) *cdiv1.DataVolume {
	return cached[cdiv1.DataVolume](c.dataVolumes, ns, name)
}

// ClaimPopulated tells whether a claim holds its data: false while the
// DataVolume that controls it has not succeeded (an import running or
// failed), true for claims made otherwise.
func (c *Cluster) ClaimPopulated(pvc *corev1.PersistentVolumeClaim) bool {
	ref := metav1.GetControllerOf(pvc)
	if ref == nil || ref.Kind != "DataVolume" {
		return true
	}
	dv := c.DataVolume(pvc.Namespace, ref.Name)
	if dv == nil || dv.UID != ref.UID {
		return true // collected after it succeeded: the claim is what is left
	}
	return dv.Status.Phase == cdiv1.Succeeded
}

// CreateISO creates the DataVolume of an ISO download, as the caller,
// unless a claim or DataVolume of its name exists in its namespace (asked
// of the apiserver, not the cache: PVE checks the file right before the
// download), which is an *ISOExistsError.
func (c *Cluster) CreateISO(ctx context.Context, dv *cdiv1.DataVolume) (*cdiv1.DataVolume, error) {
	if !c.HasCDI() {
		return nil, ErrNoCDI
	}
	if !c.Serves(dv.Namespace) {
		return nil, fmt.Errorf("namespace %q is not served", dv.Namespace)
	}
	exists := &ISOExistsError{Namespace: dv.Namespace, Name: dv.Name}
	// The existence checks read as the plugin, so that a file the caller
	// cannot see is still refused as PVE refuses it; the create is the
	// caller's.
	_, err := c.own.kube.CoreV1().PersistentVolumeClaims(dv.Namespace).Get(ctx, dv.Name, metav1.GetOptions{})
	switch {
	case err == nil:
		return nil, exists
	case !apierrors.IsNotFound(err):
		return nil, err
	}
	_, err = c.own.cdi.CdiV1beta1().DataVolumes(dv.Namespace).Get(ctx, dv.Name, metav1.GetOptions{})
	switch {
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

// DeleteISO deletes the claim of an ISO image, as the caller: through the
// DataVolume that controls it (the garbage collector then removes the
// claim), else the claim itself; either guarded by its UID.
func (c *Cluster) DeleteISO(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
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

// ISOUsers lists, in vmid order, the VMs of the claim's namespace that use
// it (ClaimUsers), as guests so that refusals can name their vmids.
func (c *Cluster) ISOUsers(ns, claim string) []Guest {
	users := c.ClaimUsers(ns, claim, "")
	if len(users) == 0 {
		return nil
	}
	t, nt := c.table(), c.nodeTable()
	var out []Guest
	for _, vm := range users {
		// As Guests: a VM added after the table was built shows next time.
		if id, ok := t.byKey[vm.Namespace+"/"+vm.Name]; ok {
			out = append(out, c.guest(id, vm, nt))
		}
	}
	sortGuests(out)
	return out
}

// importFailure is why an import failed, "" while it has not: a Failed
// DataVolume, or an importer that stopped on an error (CDI restarts it,
// but KubeVirt already reports the DataVolume in error, and so does PVE's
// download task when wget fails).
func importFailure(dv *cdiv1.DataVolume) string {
	var running, ready *cdiv1.DataVolumeCondition
	for i := range dv.Status.Conditions {
		switch c := &dv.Status.Conditions[i]; c.Type {
		case cdiv1.DataVolumeRunning:
			running = c
		case cdiv1.DataVolumeReady:
			ready = c
		}
	}
	if dv.Status.Phase == cdiv1.Failed {
		for _, c := range []*cdiv1.DataVolumeCondition{running, ready} {
			if c != nil && c.Message != "" {
				return c.Message
			}
		}
		return "DataVolume " + dv.Namespace + "/" + dv.Name + " failed"
	}
	if running != nil && running.Status == corev1.ConditionFalse && (running.Reason == "Error" || running.Reason == "ImagePullFailed") {
		if running.Message != "" {
			return running.Message
		}
		return running.Reason
	}
	return ""
}
