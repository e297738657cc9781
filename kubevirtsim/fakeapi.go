package kubevirtsim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/testing"
)

// apiServer adds to a client-go object tracker the kube-apiserver behaviour
// that KubeVirt clients depend on and the plain fake lacks:
//
//   - create assigns uid, creationTimestamp, generation and resourceVersion,
//     honours generateName and drops status of resources with a status
//     subresource;
//   - update and patch check metadata.resourceVersion (409 on a stale one),
//     keep immutable metadata, route status through the status subresource
//     (and ignore status changes on the main resource), bump generation on
//     spec changes and skip no-op writes;
//   - JSON patch "test" failures are 422 errors, strategic merge patch is
//     refused with 415 as for custom resources;
//   - delete honours preconditions and finalizers (an object with finalizers
//     only gets a deletionTimestamp and goes away when the last finalizer is
//     removed);
//   - list and watch honour label selectors and metadata.name/namespace
//     field selectors, and watches start at the requested resourceVersion
//     and never overflow (see watchHub).
//
// resourceVersion values equal the tracker's internal per-resource version,
// so a watch started from an object's resourceVersion delivers exactly the
// later changes. That holds as long as objects are written through the
// clientsets rather than directly into the tracker.
type apiServer struct {
	mu             sync.Mutex // serialises writes (and resourceVersion bookkeeping)
	tracker        testing.ObjectTracker
	scheme         *runtime.Scheme
	statusResource map[string]bool
	// rv mirrors the tracker's current resourceVersion per resource (the
	// tracker increments it on every stored write); stale marks resources
	// written past the bookkeeping, whose version is read back from the
	// tracker.
	rv    map[schema.GroupVersionResource]int64
	stale map[schema.GroupVersionResource]bool
	hub   *watchHub
	// admit, when set, plays the validating admission webhooks: it
	// judges every create and every update of a main resource (old is
	// nil on create) and refuses with its error.
	admit func(gvr schema.GroupVersionResource, old, obj runtime.Object) error
}

func newAPIServer(tracker testing.ObjectTracker, scheme *runtime.Scheme, statusResources ...string) *apiServer {
	a := &apiServer{
		tracker:        tracker,
		scheme:         scheme,
		statusResource: map[string]bool{},
		rv:             map[schema.GroupVersionResource]int64{},
		stale:          map[schema.GroupVersionResource]bool{},
	}
	a.hub = newWatchHub(tracker, scheme, &a.mu, true)
	for _, r := range statusResources {
		a.statusResource[r] = true
	}
	return a
}

// install replaces the reaction chains of f by the emulated API server.
func (a *apiServer) install(f *testing.Fake) {
	f.ReactionChain = nil
	f.WatchReactionChain = nil
	f.AddReactor("create", "*", a.create)
	f.AddReactor("update", "*", a.update)
	f.AddReactor("patch", "*", a.patch)
	f.AddReactor("delete", "*", a.delete)
	f.AddReactor("list", "*", a.list)
	def := testing.ObjectReaction(a.tracker)
	f.AddReactor("*", "*", func(action testing.Action) (bool, runtime.Object, error) {
		switch action.GetVerb() {
		case "create", "update", "patch":
			// Writes the reactors above pass on (subresource creates,
			// server-side apply) bump the tracker's version too.
			a.mu.Lock()
			defer a.mu.Unlock()
			a.hub.waitForRoom()
			a.stale[action.GetResource()] = true
		}
		return def(action)
	})
	f.AddWatchReactor("*", a.hub.watch)
}

// seed stores an initial object like an earlier create would have.
func (a *apiServer) seed(obj runtime.Object) error {
	obj = obj.DeepCopyObject()
	m, err := meta.Accessor(obj)
	if err != nil {
		return err
	}
	gvk, err := a.kindOf(obj)
	if err != nil {
		return err
	}
	gvr, _ := meta.UnsafeGuessKindToResource(gvk)
	if m.GetUID() == "" {
		m.SetUID(types.UID(uuid.NewString()))
	}
	if ts := m.GetCreationTimestamp(); ts.IsZero() {
		m.SetCreationTimestamp(metav1.NewTime(time.Now().Truncate(time.Second)))
	}
	if m.GetGeneration() == 0 {
		m.SetGeneration(1)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	rv, err := a.nextRV(gvr, gvk)
	if err != nil {
		return err
	}
	m.SetResourceVersion(strconv.FormatInt(rv, 10))
	if err := a.tracker.Add(obj); err != nil {
		return err
	}
	a.rv[gvr] = rv
	return nil
}

func (a *apiServer) create(action testing.Action) (bool, runtime.Object, error) {
	ca, ok := action.(testing.CreateActionImpl)
	if !ok || ca.GetSubresource() != "" {
		return false, nil, nil
	}
	gvr, ns := ca.GetResource(), ca.GetNamespace()
	obj := ca.GetObject().DeepCopyObject()
	m, err := meta.Accessor(obj)
	if err != nil {
		return true, nil, err
	}
	gvk, err := a.kindOf(obj)
	if err != nil {
		return true, nil, err
	}
	if m.GetName() == "" {
		if m.GetGenerateName() == "" {
			return true, nil, apierrors.NewInvalid(gvk.GroupKind(), "", field.ErrorList{
				field.Required(field.NewPath("metadata", "name"), "name or generateName is required")})
		}
		m.SetName(m.GetGenerateName() + utilrand.String(5))
	}
	if m.GetNamespace() == "" {
		m.SetNamespace(ns)
	}
	if a.statusResource[gvr.Resource] {
		setField(obj, "Status", nil)
	}
	m.SetUID(types.UID(uuid.NewString()))
	m.SetCreationTimestamp(metav1.NewTime(time.Now().Truncate(time.Second)))
	m.SetGeneration(1)
	m.SetDeletionTimestamp(nil)
	m.SetDeletionGracePeriodSeconds(nil)
	if a.admit != nil {
		if err := a.admit(gvr, nil, obj); err != nil {
			return true, nil, err
		}
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	a.hub.waitForRoom()
	rv, err := a.nextRV(gvr, gvk)
	if err != nil {
		return true, nil, err
	}
	m.SetResourceVersion(strconv.FormatInt(rv, 10))
	if err := a.tracker.Create(gvr, obj, ns); err != nil {
		return true, nil, err
	}
	a.rv[gvr] = rv
	stored, err := a.tracker.Get(gvr, ns, m.GetName())
	return true, stored, err
}

func (a *apiServer) update(action testing.Action) (bool, runtime.Object, error) {
	ua, ok := action.(testing.UpdateActionImpl)
	if !ok {
		return false, nil, nil
	}
	gvr, ns := ua.GetResource(), ua.GetNamespace()
	obj := ua.GetObject().DeepCopyObject()
	m, err := meta.Accessor(obj)
	if err != nil {
		return true, nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.hub.waitForRoom()
	old, err := a.tracker.Get(gvr, ns, m.GetName())
	if err != nil {
		return true, nil, err
	}
	result, err := a.merge(gvr, old, obj, ua.GetSubresource())
	if err != nil {
		return true, nil, err
	}
	if err := a.admitUpdate(gvr, ua.GetSubresource(), old, result); err != nil {
		return true, nil, err
	}
	return a.write(gvr, ns, old, result)
}

// admitUpdate runs admit on a changing write of a main resource.
func (a *apiServer) admitUpdate(gvr schema.GroupVersionResource, subresource string, old, result runtime.Object) error {
	if a.admit == nil || subresource != "" || equality.Semantic.DeepEqual(old, result) {
		return nil
	}
	return a.admit(gvr, old, result)
}

func (a *apiServer) patch(action testing.Action) (bool, runtime.Object, error) {
	pa, ok := action.(testing.PatchActionImpl)
	if !ok {
		return false, nil, nil
	}
	gvr, ns := pa.GetResource(), pa.GetNamespace()
	var patchFn func([]byte) ([]byte, error)
	switch pa.GetPatchType() {
	case types.JSONPatchType:
		p, err := jsonpatch.DecodePatch(pa.GetPatch())
		if err != nil {
			return true, nil, apierrors.NewBadRequest(fmt.Sprintf("error decoding patch: %v", err))
		}
		patchFn = func(doc []byte) ([]byte, error) {
			out, err := p.Apply(doc)
			if err != nil {
				return nil, apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "", schema.GroupResource{}, "", err.Error(), 0, false)
			}
			return out, nil
		}
	case types.MergePatchType:
		patchFn = func(doc []byte) ([]byte, error) {
			out, err := jsonpatch.MergePatch(doc, pa.GetPatch())
			if err != nil {
				return nil, apierrors.NewBadRequest(err.Error())
			}
			return out, nil
		}
	case types.StrategicMergePatchType:
		return true, nil, &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusUnsupportedMediaType, Reason: metav1.StatusReasonUnsupportedMediaType,
			Message: "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
		}}
	default:
		// Server-side apply: the tracker's own implementation.
		return false, nil, nil
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	a.hub.waitForRoom()
	old, err := a.tracker.Get(gvr, ns, pa.GetName())
	if err != nil {
		return true, nil, err
	}
	doc, err := json.Marshal(old)
	if err != nil {
		return true, nil, err
	}
	patched, err := patchFn(doc)
	if err != nil {
		return true, nil, err
	}
	obj := reflect.New(reflect.TypeOf(old).Elem()).Interface().(runtime.Object)
	if err := json.Unmarshal(patched, obj); err != nil {
		return true, nil, apierrors.NewBadRequest(err.Error())
	}
	result, err := a.merge(gvr, old, obj, pa.GetSubresource())
	if err != nil {
		return true, nil, err
	}
	if err := a.admitUpdate(gvr, pa.GetSubresource(), old, result); err != nil {
		return true, nil, err
	}
	return a.write(gvr, ns, old, result)
}

func (a *apiServer) delete(action testing.Action) (bool, runtime.Object, error) {
	da, ok := action.(testing.DeleteActionImpl)
	if !ok {
		return false, nil, nil
	}
	gvr, ns, name := da.GetResource(), da.GetNamespace(), da.GetName()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.hub.waitForRoom()
	old, err := a.tracker.Get(gvr, ns, name)
	if err != nil {
		return true, nil, err
	}
	m, err := meta.Accessor(old)
	if err != nil {
		return true, nil, err
	}
	if p := da.DeleteOptions.Preconditions; p != nil {
		if p.UID != nil && *p.UID != m.GetUID() {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), name, fmt.Errorf(
				"Precondition failed: UID in precondition: %v, UID in object meta: %v", *p.UID, m.GetUID()))
		}
		if p.ResourceVersion != nil && *p.ResourceVersion != m.GetResourceVersion() {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), name, fmt.Errorf(
				"Precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", *p.ResourceVersion, m.GetResourceVersion()))
		}
	}
	if len(m.GetFinalizers()) > 0 {
		if m.GetDeletionTimestamp() == nil {
			now := metav1.NewTime(time.Now().Truncate(time.Second))
			m.SetDeletionTimestamp(&now)
			m.SetDeletionGracePeriodSeconds(ptr(int64(0)))
			gvk, err := a.kindOf(old)
			if err != nil {
				return true, nil, err
			}
			rv, err := a.nextRV(gvr, gvk)
			if err != nil {
				return true, nil, err
			}
			m.SetResourceVersion(strconv.FormatInt(rv, 10))
			if err := a.tracker.Update(gvr, old, ns); err != nil {
				return true, nil, err
			}
			a.rv[gvr] = rv
		}
		return true, nil, nil
	}
	return true, nil, a.tracker.Delete(gvr, ns, name)
}

func (a *apiServer) list(action testing.Action) (bool, runtime.Object, error) {
	la, ok := action.(testing.ListActionImpl)
	if !ok {
		return false, nil, nil
	}
	sel, err := objectFilter(la.ListOptions)
	if err != nil {
		return true, nil, err
	}
	list, err := a.tracker.List(la.GetResource(), la.GetKind(), la.GetNamespace(), la.ListOptions)
	if err != nil || sel == nil {
		return true, list, err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return true, nil, err
	}
	var keep []runtime.Object
	for _, it := range items {
		if sel(it) {
			keep = append(keep, it)
		}
	}
	if err := meta.SetList(list, keep); err != nil {
		return true, nil, err
	}
	return true, list, nil
}

// merge computes the object an update (or patch) of old to obj stores.
func (a *apiServer) merge(gvr schema.GroupVersionResource, old, obj runtime.Object, subresource string) (runtime.Object, error) {
	om, err := meta.Accessor(old)
	if err != nil {
		return nil, err
	}
	nm, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	gvk, err := a.kindOf(old)
	if err != nil {
		return nil, err
	}
	switch rv := nm.GetResourceVersion(); {
	case rv == "":
		return nil, apierrors.NewInvalid(gvk.GroupKind(), om.GetName(), field.ErrorList{
			field.Invalid(field.NewPath("metadata", "resourceVersion"), 0, "must be specified for an update")})
	case rv != om.GetResourceVersion():
		return nil, apierrors.NewConflict(gvr.GroupResource(), om.GetName(),
			fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
	}

	var result runtime.Object
	switch {
	case subresource == "status":
		// Only the status stanza changes through /status.
		result = old.DeepCopyObject()
		setField(result, "Status", obj)
	case subresource == "" && a.statusResource[gvr.Resource]:
		// The main resource ignores status changes.
		result = obj
		setField(result, "Status", old)
	default:
		result = obj
	}
	rm, err := meta.Accessor(result)
	if err != nil {
		return nil, err
	}
	rm.SetName(om.GetName())
	rm.SetNamespace(om.GetNamespace())
	rm.SetUID(om.GetUID())
	rm.SetCreationTimestamp(om.GetCreationTimestamp())
	rm.SetDeletionTimestamp(om.GetDeletionTimestamp())
	rm.SetDeletionGracePeriodSeconds(om.GetDeletionGracePeriodSeconds())
	rm.SetGeneration(om.GetGeneration())
	if a.statusResource[gvr.Resource] {
		if !equality.Semantic.DeepEqual(fieldOf(old, "Spec"), fieldOf(result, "Spec")) {
			rm.SetGeneration(om.GetGeneration() + 1)
		}
	} else if !equality.Semantic.DeepEqual(fieldOf(old, "Spec"), fieldOf(result, "Spec")) ||
		!equality.Semantic.DeepEqual(fieldOf(old, "Status"), fieldOf(result, "Status")) {
		rm.SetGeneration(om.GetGeneration() + 1)
	}
	return result, nil
}

// write stores result (already merged from old) unless nothing changed. An
// object that is being deleted and has no finalizers left is removed.
func (a *apiServer) write(gvr schema.GroupVersionResource, ns string, old, result runtime.Object) (bool, runtime.Object, error) {
	if equality.Semantic.DeepEqual(old, result) {
		return true, old, nil
	}

	rm, _ := meta.Accessor(result)
	gvk, err := a.kindOf(old)
	if err != nil {
		return true, nil, err
	}
	rv, err := a.nextRV(gvr, gvk)
	if err != nil {
		return true, nil, err
	}
	rm.SetResourceVersion(strconv.FormatInt(rv, 10))
	if err := a.tracker.Update(gvr, result, ns); err != nil {
		return true, nil, err
	}
	a.rv[gvr] = rv
	if rm.GetDeletionTimestamp() != nil && len(rm.GetFinalizers()) == 0 {
		// The last finalizer is gone: the object is deleted (watchers see
		// its final state in the DELETED event).
		if err := a.tracker.Delete(gvr, ns, rm.GetName()); err != nil {
			return true, nil, err
		}
		return true, result, nil
	}
	stored, err := a.tracker.Get(gvr, ns, rm.GetName())
	return true, stored, err
}

// nextRV returns the resourceVersion the tracker will assign to the next
// stored write of gvr; the caller records it in a.rv once the write
// succeeded. a.mu must be held.
func (a *apiServer) nextRV(gvr schema.GroupVersionResource, gvk schema.GroupVersionKind) (int64, error) {
	cur, ok := a.rv[gvr]
	if !ok || a.stale[gvr] {
		// The tracker reports its current version as the list version.
		list, err := a.tracker.List(gvr, gvk, metav1.NamespaceAll)
		if err != nil {
			return 0, err
		}
		lm, err := meta.ListAccessor(list)
		if err != nil {
			return 0, err
		}
		if cur, err = strconv.ParseInt(lm.GetResourceVersion(), 10, 64); err != nil {
			return 0, err
		}
		a.rv[gvr] = cur
		delete(a.stale, gvr)
	}
	return cur + 1, nil
}

func (a *apiServer) kindOf(obj runtime.Object) (schema.GroupVersionKind, error) {
	gvks, _, err := a.scheme.ObjectKinds(obj)
	if err != nil {
		return schema.GroupVersionKind{}, err
	}
	return gvks[0], nil
}

// fieldOf returns the named top-level struct field of a typed object (nil
// when it has none).
func fieldOf(obj runtime.Object, name string) any {
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil
	}
	f := v.Elem().FieldByName(name)
	if !f.IsValid() {
		return nil
	}
	return f.Interface()
}

// setField copies the named top-level struct field from src to dst, or
// zeroes it when src is nil.
func setField(dst runtime.Object, name string, src runtime.Object) {
	d := reflect.ValueOf(dst)
	if d.Kind() != reflect.Pointer || d.Elem().Kind() != reflect.Struct {
		return
	}
	f := d.Elem().FieldByName(name)
	if !f.IsValid() || !f.CanSet() {
		return
	}
	if src == nil {
		f.Set(reflect.Zero(f.Type()))
		return
	}
	s := reflect.ValueOf(src)
	if s.Kind() != reflect.Pointer || s.Elem().Type() != d.Elem().Type() {
		return
	}
	f.Set(s.Elem().FieldByName(name))
}
