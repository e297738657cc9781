package kube

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// Pools are records (ConfigMaps in the task namespace, written with the
// plugin's own account, like task records) plus, as before records
// existed, the served namespaces. A VM's membership is an annotation on
// the VM, written as the caller.

// NamespacePool is a served namespace as the pools API sees it.
type NamespacePool struct {
	Name string
	// Comment is the PVE comment of earlier versions (annotation), "" if
	// none.
	Comment string
	// Managed tells that the namespace was created through the pools API
	// of earlier versions (it carries translate.LabelPool), so the API may
	// delete it.
	Managed bool
}

// ErrPoolsFixed is returned by DeletePool when the served namespaces are
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

// ServesAll tells whether every namespace is served (no configured list).
func (c *Cluster) ServesAll() bool { return len(c.opts.Namespaces) == 0 }

// namespace returns the cached Namespace, in any phase, or nil.
func (c *Cluster) namespace(name string) *corev1.Namespace {
	return cached[corev1.Namespace](c.namespaces, "", name)
}

// NamespaceExists tells whether a Namespace object of that name is cached,
// even one being deleted (its name is still taken).
func (c *Cluster) NamespaceExists(name string) bool { return c.namespace(name) != nil }

// NamespacePool returns a served namespace as a pool. With a configured
// list only the name is known.
func (c *Cluster) NamespacePool(name string) (NamespacePool, bool) {
	if !c.Serves(name) {
		return NamespacePool{}, false
	}
	p := NamespacePool{Name: name}
	if n := c.namespace(name); n != nil {
		p.Comment = n.Annotations[translate.AnnotationPoolComment]
		p.Managed = n.Labels[translate.LabelPool] == "true"
	}
	return p, true
}

// PoolRecords lists the pool records, by id. A ConfigMap that does not
// read as a record (edited by hand) is left out and logged.
func (c *Cluster) PoolRecords() []translate.PoolRecord {
	var out []translate.PoolRecord
	for _, o := range c.poolRecords.list() {
		if r, ok := c.poolRecord(o.(*corev1.ConfigMap)); ok {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b translate.PoolRecord) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// PoolRecord returns the record of pool id.
func (c *Cluster) PoolRecord(id string) (translate.PoolRecord, bool) {
	cm := cached[corev1.ConfigMap](c.poolRecords, c.opts.TaskNamespace, translate.PoolRecordName(id))
	if cm == nil {
		return translate.PoolRecord{}, false
	}
	return c.poolRecord(cm)
}

func (c *Cluster) poolRecord(cm *corev1.ConfigMap) (translate.PoolRecord, bool) {
	r, err := translate.ParsePoolRecord(cm.Name, cm.Data)
	if err != nil {
		c.logger.Warn("ignoring a pool record", zap.String("configmap", cm.Namespace+"/"+cm.Name), zap.Error(err))
		return translate.PoolRecord{}, false
	}
	return r, true
}

// poolRecordObject is the ConfigMap that holds r.
func (c *Cluster) poolRecordObject(r translate.PoolRecord) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: translate.PoolRecordName(r.ID), Namespace: c.opts.TaskNamespace,
			Labels: map[string]string{translate.LabelPoolRecord: "true", "app.kubernetes.io/managed-by": "caddy-proxmox"},
		},
		Data: r.Data(),
	}
}

// CreatePoolRecord writes the record of a new pool. It fails with an
// AlreadyExists error when the pool has one.
func (c *Cluster) CreatePoolRecord(ctx context.Context, r translate.PoolRecord) error {
	out, err := c.own.kube.CoreV1().ConfigMaps(c.opts.TaskNamespace).Create(ctx, c.poolRecordObject(r), metav1.CreateOptions{})
	if err != nil {
		return err
	}
	c.poolRecords.put(out, true)
	return nil
}

// UpdatePoolRecord changes the record of pool id with change, writing it
// only if change reports a difference; a pool without a record (a
// namespace's) gets one. Concurrent writers are serialised by the
// resourceVersion: on a conflict the record is read again and change is
// run on what the apiserver holds.
func (c *Cluster) UpdatePoolRecord(ctx context.Context, id string, change func(*translate.PoolRecord) bool) error {
	name := translate.PoolRecordName(id)
	cms := c.own.kube.CoreV1().ConfigMaps(c.opts.TaskNamespace)
	cur := cached[corev1.ConfigMap](c.poolRecords, c.opts.TaskNamespace, name)
	for attempt := 0; ; attempt++ {
		r := translate.PoolRecord{ID: id}
		if cur != nil {
			var err error
			if r, err = translate.ParsePoolRecord(cur.Name, cur.Data); err != nil {
				return err
			}
		}
		if !change(&r) {
			return nil
		}
		var out *corev1.ConfigMap
		var err error
		if cur == nil {
			out, err = cms.Create(ctx, c.poolRecordObject(r), metav1.CreateOptions{})
		} else {
			next := cur.DeepCopy()
			next.Data = r.Data()
			out, err = cms.Update(ctx, next, metav1.UpdateOptions{})
		}
		if err == nil {
			c.poolRecords.put(out, cur == nil)
			return nil
		}
		if !(apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)) || attempt == 4 {
			return err
		}
		switch cur, err = cms.Get(ctx, name, metav1.GetOptions{}); {
		case apierrors.IsNotFound(err):
			cur = nil
		case err != nil:
			return err
		}
	}
}

// DeletePoolRecord deletes the record of pool id, guarded by the UID and
// resourceVersion it was read with from the cache: a record changed
// meanwhile (a storage joined) is not deleted (a Conflict error).
func (c *Cluster) DeletePoolRecord(ctx context.Context, id string) error {
	cm := cached[corev1.ConfigMap](c.poolRecords, c.opts.TaskNamespace, translate.PoolRecordName(id))
	if cm == nil {
		return apierrors.NewNotFound(corev1.Resource("configmaps"), translate.PoolRecordName(id))
	}
	uid, rv := cm.UID, cm.ResourceVersion
	err := c.own.kube.CoreV1().ConfigMaps(cm.Namespace).Delete(ctx, cm.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv},
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	c.poolRecords.drop(cm)
	return nil
}

// SetGuestPool writes a VM's pool annotation as the caller: pool names
// the pool ("" none); nil removes the annotation, so that the VM's
// namespace decides. The write is guarded by the UID and resourceVersion
// of the VM as read; when something else changed the VM meanwhile (its
// status, KubeVirt's controllers) it is read again and written if its
// pool annotation is still the one g has. A VM whose pool changed
// meanwhile is not written (ErrModified).
func (c *Cluster) SetGuestPool(ctx context.Context, g Guest, pool *string) error {
	was, wasSet := g.PoolAnnotation()
	for attempt := 0; ; attempt++ {
		out, err := c.patchGuestPool(ctx, g, pool)
		if err == nil {
			if out != nil {
				c.cacheVM(out)
			}
			return nil
		}
		if !apierrors.IsInvalid(err) && !apierrors.IsConflict(err) {
			return err
		}
		fresh, gerr := c.as(ctx).kv.KubevirtV1().VirtualMachines(g.Namespace()).Get(ctx, g.Name(), metav1.GetOptions{})
		if gerr != nil || attempt == 4 || fresh.UID != g.Meta().UID {
			return fmt.Errorf("%w: %v", ErrModified, err)
		}
		g = g.WithVM(fresh)
		if now, set := g.PoolAnnotation(); now != was || set != wasSet {
			return fmt.Errorf("%w: its pool changed", ErrModified)
		}
	}
}

// patchGuestPool is one guarded write of SetGuestPool; nil, nil when
// there is nothing to write.
func (c *Cluster) patchGuestPool(ctx context.Context, g Guest, pool *string) (*kubevirtv1.VirtualMachine, error) {
	key := "/metadata/annotations/" + jsonPointerEscape(translate.AnnotationPool)
	ops := []patchOp{
		{Op: "test", Path: "/metadata/uid", Value: string(g.Meta().UID)},
		{Op: "test", Path: "/metadata/resourceVersion", Value: g.Meta().ResourceVersion},
	}
	_, had := g.PoolAnnotation()
	switch {
	case pool == nil && !had:
		return nil, nil
	case pool == nil:
		ops = append(ops, patchOp{Op: "remove", Path: key})
	default:
		// An empty map is not in the JSON the patch applies to either.
		if len(g.Meta().Annotations) == 0 {
			ops = append(ops, patchOp{Op: "add", Path: "/metadata/annotations", Value: map[string]string{}})
		}
		ops = append(ops, patchOp{Op: "add", Path: key, Value: *pool})
	}
	return c.jsonPatchVM(ctx, g, ops)
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
