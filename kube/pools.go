package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// Pools are namespaces. Only when every namespace is served does the
// plugin watch Namespace objects, so only then can pools be made, deleted
// or carry a comment.

// Pool is a served namespace as the pools API sees it.
type Pool struct {
	Name string
	// Comment is the PVE comment (annotation), "" if none.
	Comment string
	// Managed tells that the namespace was created through the pools API
	// (it carries translate.LabelPool), so the API may delete it.
	Managed bool
}

// ErrPoolsFixed is returned by pool writes when the served namespaces are
// a configured list: the plugin does not watch Namespace objects then.
var ErrPoolsFixed = errors.New("the served namespaces are a configured list")

// ErrPoolNotManaged is returned by DeletePool for a namespace that was not
// created through the pools API.
var ErrPoolNotManaged = errors.New("namespace not created through the pools API")

// ErrPoolHoldsTasks is returned by DeletePool for the task namespace.
var ErrPoolHoldsTasks = errors.New("namespace holds the task records")

// PoolNotEmptyError names what keeps a namespace from being deleted.
type PoolNotEmptyError struct {
	Kind, Name string
	// Going tells that everything left is already being removed (deleted,
	// or owned by something deleted) but did not go in time.
	Going bool
}

func (e *PoolNotEmptyError) Error() string {
	s := fmt.Sprintf("namespace contains %s %q", e.Kind, e.Name)
	if e.Going {
		s += " (being removed)"
	}
	return s
}

// ServesAll tells whether every namespace is served (no configured list),
// i.e. whether pools can be created and deleted.
func (c *Cluster) ServesAll() bool { return len(c.opts.Namespaces) == 0 }

// namespace returns the cached Namespace, in any phase, or nil.
func (c *Cluster) namespace(name string) *corev1.Namespace {
	return cached[corev1.Namespace](c.namespaces, "", name)
}

// NamespaceExists tells whether a Namespace object of that name is cached,
// even one being deleted (its name is still taken).
func (c *Cluster) NamespaceExists(name string) bool { return c.namespace(name) != nil }

// Pool returns a served namespace as a pool. With a configured list only
// the name is known.
func (c *Cluster) Pool(name string) (Pool, bool) {
	if !c.Serves(name) {
		return Pool{}, false
	}
	p := Pool{Name: name}
	if n := c.namespace(name); n != nil {
		p.Comment = n.Annotations[translate.AnnotationPoolComment]
		p.Managed = n.Labels[translate.LabelPool] == "true"
	}
	return p, true
}

// CreatePool creates the namespace of a new pool, as the caller, labelled
// as made through the pools API, with the comment ("" for none).
func (c *Cluster) CreatePool(ctx context.Context, name, comment string) error {
	if !c.ServesAll() {
		return ErrPoolsFixed
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: name,
		Labels: map[string]string{
			translate.LabelPool:            "true",
			"app.kubernetes.io/managed-by": "caddy-proxmox",
		},
	}}
	if comment != "" {
		ns.Annotations = map[string]string{translate.AnnotationPoolComment: comment}
	}
	out, err := c.as(ctx).kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	c.namespaces.put(out, true)
	return nil
}

// SetPoolComment sets (or, with "", removes) a pool's comment, as the
// caller.
func (c *Cluster) SetPoolComment(ctx context.Context, name, comment string) error {
	if !c.ServesAll() {
		return ErrPoolsFixed
	}
	var v any
	if comment != "" {
		v = comment
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{translate.AnnotationPoolComment: v}}})
	if err != nil {
		return fmt.Errorf("encoding patch: %w", err)
	}
	out, err := c.as(ctx).kube.CoreV1().Namespaces().Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{})
	if err != nil {
		return err
	}
	c.namespaces.put(out, false)
	return nil
}

// poolDrainTimeout bounds how long DeletePool waits for contents that are
// already going (a VM's claims after the VM was deleted) to be gone.
var poolDrainTimeout = 10 * time.Second

// DeletePool deletes the namespace of a pool made through the pools API,
// as the caller, if nothing is in it: no VirtualMachine, instance,
// PersistentVolumeClaim or DataVolume, checked on the apiserver itself (with
// the plugin's own account) right before the delete, which is guarded by
// the namespace's UID and resourceVersion. Contents that are already being
// removed are waited for a few seconds. It returns ErrPoolNotManaged,
// ErrPoolHoldsTasks, a *PoolNotEmptyError, or a NotFound error.
func (c *Cluster) DeletePool(ctx context.Context, name string) error {
	if !c.ServesAll() {
		return ErrPoolsFixed
	}
	if name == c.opts.TaskNamespace {
		return ErrPoolHoldsTasks
	}
	ns, err := c.own.kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if ns.DeletionTimestamp != nil {
		return apierrors.NewNotFound(corev1.Resource("namespaces"), name)
	}
	if ns.Labels[translate.LabelPool] != "true" {
		return ErrPoolNotManaged
	}
	deadline := time.Now().Add(poolDrainTimeout)
	for {
		left, err := c.poolContents(ctx, name)
		if err != nil {
			return err
		}
		if left == nil {
			break
		}
		if !left.Going || time.Now().After(deadline) {
			return left
		}
		select {
		case <-ctx.Done():
			return left
		case <-time.After(250 * time.Millisecond):
		}
	}
	uid, rv := ns.UID, ns.ResourceVersion
	bg := metav1.DeletePropagationBackground
	if err := c.as(ctx).kube.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{
		Preconditions:     &metav1.Preconditions{UID: &uid, ResourceVersion: &rv},
		PropagationPolicy: &bg,
	}); err != nil {
		return err
	}
	// Read-your-writes: the pool is gone for the client's next call, even
	// while the namespace is still terminating.
	gone := ns.DeepCopy()
	now := metav1.Now()
	gone.DeletionTimestamp = &now
	gone.Status.Phase = corev1.NamespaceTerminating
	c.namespaces.put(gone, false)
	return nil
}

// poolContents finds what is in a namespace that keeps it from being
// deleted; nil if nothing. The *PoolNotEmptyError is Going when every
// object found is being deleted or owned by an object that is gone.
func (c *Cluster) poolContents(ctx context.Context, ns string) (*PoolNotEmptyError, error) {
	// As the plugin (see DeletePool): objects the caller cannot see keep
	// the namespace too.
	list := metav1.ListOptions{Limit: 100}
	var found []*PoolNotEmptyError
	// The UIDs of the owners asked for, "" for one that is gone: the
	// objects of one VM name it once each, and it is asked for once.
	owners := map[string]types.UID{}
	note := func(kind string, m metav1.Object) error {
		going, err := c.going(ctx, ns, m, owners)
		if err != nil {
			return err
		}
		found = append(found, &PoolNotEmptyError{Kind: kind, Name: m.GetName(), Going: going})
		return nil
	}
	vms, err := c.own.kv.KubevirtV1().VirtualMachines(ns).List(ctx, list)
	if err != nil {
		return nil, fmt.Errorf("listing virtual machines in %s: %w", ns, err)
	}
	for i := range vms.Items {
		if err := note("VirtualMachine", &vms.Items[i]); err != nil {
			return nil, err
		}
	}
	vmis, err := c.own.kv.KubevirtV1().VirtualMachineInstances(ns).List(ctx, list)
	if err != nil {
		return nil, fmt.Errorf("listing virtual machine instances in %s: %w", ns, err)
	}
	for i := range vmis.Items {
		if err := note("VirtualMachineInstance", &vmis.Items[i]); err != nil {
			return nil, err
		}
	}
	if c.own.cdi != nil {
		dvs, err := c.own.cdi.CdiV1beta1().DataVolumes(ns).List(ctx, list)
		switch {
		case apierrors.IsNotFound(err):
			// CDI is not installed: there are no DataVolumes.
		case err != nil:
			return nil, fmt.Errorf("listing data volumes in %s: %w", ns, err)
		default:
			for i := range dvs.Items {
				if err := note("DataVolume", &dvs.Items[i]); err != nil {
					return nil, err
				}
			}
		}
	}
	pvcs, err := c.own.kube.CoreV1().PersistentVolumeClaims(ns).List(ctx, list)
	if err != nil {
		return nil, fmt.Errorf("listing persistent volume claims in %s: %w", ns, err)
	}
	for i := range pvcs.Items {
		if err := note("PersistentVolumeClaim", &pvcs.Items[i]); err != nil {
			return nil, err
		}
	}
	if len(found) == 0 {
		return nil, nil
	}
	for _, f := range found {
		if !f.Going {
			return f, nil
		}
	}
	return found[0], nil
}

// going tells whether an object is on its way out: being deleted, or
// controlled by a VirtualMachine or DataVolume that no longer exists (the
// garbage collector removes it next). owners remembers the owners read.
func (c *Cluster) going(ctx context.Context, ns string, m metav1.Object, owners map[string]types.UID) (bool, error) {
	if m.GetDeletionTimestamp() != nil {
		return true, nil
	}
	ref := metav1.GetControllerOf(m)
	if ref == nil {
		return false, nil
	}
	key := ref.APIVersion + "/" + ref.Kind + "/" + ref.Name
	if uid, ok := owners[key]; ok {
		return uid != ref.UID, nil
	}
	var uid types.UID
	var err error
	switch {
	case ref.Kind == "VirtualMachine" && ref.APIVersion == "kubevirt.io/v1":
		vm, e := c.own.kv.KubevirtV1().VirtualMachines(ns).Get(ctx, ref.Name, metav1.GetOptions{})
		if err = e; e == nil {
			uid = vm.UID
		}
	case ref.Kind == "DataVolume" && c.own.cdi != nil:
		dv, e := c.own.cdi.CdiV1beta1().DataVolumes(ns).Get(ctx, ref.Name, metav1.GetOptions{})
		if err = e; e == nil {
			uid = dv.UID
		}
	default:
		return false, nil
	}
	switch {
	case apierrors.IsNotFound(err):
		owners[key] = ""
		return true, nil
	case err != nil:
		return false, err
	}
	owners[key] = uid
	return uid != ref.UID, nil
}
