package kubevirtsim

import (
	"context"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/cache"
	clonev1 "kubevirt.io/api/clone/v1beta1"
	virtv1 "kubevirt.io/api/core/v1"
	snapshotv1 "kubevirt.io/api/snapshot/v1beta1"
	cdiclient "kubevirt.io/client-go/containerizeddataimporter"
	"kubevirt.io/client-go/kubevirt"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// The Controller's queue holds VM/VMI keys ("namespace/name") and, for the
// further reconcilers, keys with a kind prefix ("datavolume:namespace/name").
// Kubernetes names never contain ':', so the two cannot collide.
const (
	keyDataVolume = "datavolume:"
	keyPVC        = "pvc:"
	keySnapshot   = "vmsnapshot:"
	keyContent    = "vmsnapshotcontent:"
	keyRestore    = "vmrestore:"
	keyClone      = "vmclone:"
	keyMigration  = "vmim:"
)

type syncFunc func(ctx context.Context, key string) (time.Duration, error)

// extensions are the reconcilers beyond VMs and VMIs: CDI's DataVolume
// controller with PVC housekeeping (datavolume.go, when Options.CDI is set)
// and KubeVirt's snapshot, restore and clone controllers (snapshot.go,
// restore.go, clone.go, unless Options.DisableSnapshots).
type extensions struct {
	cdi       cdiclient.Interface
	snapshots bool // snapshot/restore/clone controllers enabled

	informers []cache.SharedIndexInformer // run by Controller.Run
	syncers   map[string]syncFunc         // by key prefix

	pvcInformer      cache.SharedIndexInformer
	dvInformer       cache.SharedIndexInformer
	snapshotInformer cache.SharedIndexInformer
	contentInformer  cache.SharedIndexInformer
	restoreInformer  cache.SharedIndexInformer
	cloneInformer    cache.SharedIndexInformer
	// migrationInformer watches VirtualMachineInstanceMigrations (always).
	migrationInformer cache.SharedIndexInformer

	// restoreGrace is how long a WaitGracePeriod restore waits for its
	// target to stop (KubeVirt's DefaultGracePeriod; tests shorten it).
	restoreGrace time.Duration

	seen firstSight // first sight of a DataVolume/snapshot/restore
}

// Index names of the extension informers.
const (
	// indexOwnerVM: objects by "namespace/name" of their controlling VM.
	indexOwnerVM = "ownerVM"
	// indexCloneSource: DataVolumes by "namespace/name" of the PVC they
	// clone.
	indexCloneSource = "cloneSource"
	// indexSource: snapshots and clones by "namespace/name" of their source
	// VM (clones also by source snapshot, prefixed "snapshot:").
	indexSource = "source"
	// indexSnapshot: restores by "namespace/name" of their snapshot.
	indexSnapshot = "snapshot"
	// indexTarget: restores and clones by "namespace/name" of their target
	// VM.
	indexTarget = "target"
	// indexClaim: VMIs by "namespace/claim" of the PVCs (and DataVolumes)
	// they use.
	indexClaim = "claim"
)

// initExtensions creates the informers and registers the reconcilers the
// options ask for. Called by NewController.
func (c *Controller) initExtensions() {
	e := &c.ext
	e.cdi = c.opts.CDI
	e.snapshots = !c.opts.DisableSnapshots
	e.syncers = map[string]syncFunc{}
	e.restoreGrace = snapshotv1.DefaultGracePeriod
	resync := c.opts.Resync

	// Live migrations are part of KubeVirt's core API: always simulated.
	e.migrationInformer = NewVirtualMachineInstanceMigrationInformer(c.kv, metav1.NamespaceAll, resync)
	mustAddIndexers(e.migrationInformer, cache.Indexers{indexVMIName: migrationVMIIndex})
	e.informers = append(e.informers, e.migrationInformer)
	mig := &migrations{c: c}
	e.syncers[keyMigration] = mig.sync
	mig.addHandlers()

	if e.cdi == nil && !e.snapshots {
		return
	}

	e.pvcInformer = coreinformers.NewPersistentVolumeClaimInformer(c.k8s, metav1.NamespaceAll, resync,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, indexOwnerVM: ownerVMIndex})
	e.informers = append(e.informers, e.pvcInformer)
	if err := c.vmiInformer.AddIndexers(cache.Indexers{indexClaim: vmiClaimIndex}); err != nil {
		panic("kubevirtsim: add VMI indexer: " + err.Error())
	}

	// PVC housekeeping (garbage collection of PVCs whose DataVolume or VM
	// is gone, the pvc-protection finalizer) runs without CDI as well.
	dv := &dataVolumes{c: c}
	e.syncers[keyPVC] = dv.syncPVC
	if e.cdi != nil {
		e.dvInformer = NewDataVolumeInformer(e.cdi, metav1.NamespaceAll, resync)
		mustAddIndexers(e.dvInformer, cache.Indexers{indexOwnerVM: ownerVMIndex, indexCloneSource: dvCloneSourceIndex})
		e.informers = append(e.informers, e.dvInformer)
		c.dependencies = append(c.dependencies, dv)
		e.syncers[keyDataVolume] = dv.sync
	}
	dv.addHandlers()

	if e.snapshots {
		e.snapshotInformer = NewVirtualMachineSnapshotInformer(c.kv, metav1.NamespaceAll, resync)
		mustAddIndexers(e.snapshotInformer, cache.Indexers{indexSource: snapshotSourceIndex})
		e.contentInformer = NewVirtualMachineSnapshotContentInformer(c.kv, metav1.NamespaceAll, resync)
		e.restoreInformer = NewVirtualMachineRestoreInformer(c.kv, metav1.NamespaceAll, resync)
		mustAddIndexers(e.restoreInformer, cache.Indexers{indexSnapshot: restoreSnapshotIndex, indexTarget: restoreTargetIndex})
		e.cloneInformer = NewVirtualMachineCloneInformer(c.kv, metav1.NamespaceAll, resync)
		mustAddIndexers(e.cloneInformer, cache.Indexers{indexSource: cloneSourceIndex, indexTarget: cloneTargetIndex})
		e.informers = append(e.informers, e.snapshotInformer, e.contentInformer, e.restoreInformer, e.cloneInformer)

		s := &snapshots{c: c}
		e.syncers[keySnapshot] = s.syncSnapshot
		e.syncers[keyContent] = s.syncContent
		s.addHandlers()
		r := &restores{c: c}
		c.dependencies = append(c.dependencies, r)
		e.syncers[keyRestore] = r.sync
		r.addHandlers()
		cl := &clones{c: c}
		e.syncers[keyClone] = cl.sync
		cl.addHandlers()
	}
}

// syncerFor returns the reconciler of a prefixed key and the key without
// its prefix.
func (e *extensions) syncerFor(key string) (syncFunc, string, bool) {
	i := strings.IndexByte(key, ':')
	if i < 0 {
		return nil, "", false
	}
	fn, ok := e.syncers[key[:i+1]]
	return fn, key[i+1:], ok
}

// enqueue adds a prefixed key. Event handlers only fire once Run has created
// the queue.
func (c *Controller) enqueue(prefix, ns, name string) {
	if c.queue != nil {
		c.queue.Add(prefix + ns + "/" + name)
	}
}

// handler returns event handlers that call fn with the object (the final
// state for deletions).
func handler(fn func(obj metav1.Object)) cache.ResourceEventHandler {
	call := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if m, ok := obj.(metav1.Object); ok {
			fn(m)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    call,
		UpdateFunc: func(_, obj any) { call(obj) },
		DeleteFunc: call,
	}
}

func mustAddHandler(inf cache.SharedIndexInformer, h cache.ResourceEventHandler) {
	if _, err := inf.AddEventHandler(h); err != nil {
		panic("kubevirtsim: add event handler: " + err.Error())
	}
}

func mustAddIndexers(inf cache.SharedIndexInformer, idx cache.Indexers) {
	if err := inf.AddIndexers(idx); err != nil {
		panic("kubevirtsim: add indexers: " + err.Error())
	}
}

// enqueueIndexed enqueues prefix+key of every object of inf whose index
// value is val.
func (c *Controller) enqueueIndexed(inf cache.SharedIndexInformer, index, val, prefix string) {
	objs, err := inf.GetIndexer().ByIndex(index, val)
	if err != nil {
		return
	}
	for _, o := range objs {
		if m, ok := o.(metav1.Object); ok {
			c.enqueue(prefix, m.GetNamespace(), m.GetName())
		}
	}
}

func ownerVMIndex(obj any) ([]string, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, nil
	}
	if ref := metav1.GetControllerOf(m); ref != nil && ref.Kind == virtv1.VirtualMachineGroupVersionKind.Kind {
		return []string{m.GetNamespace() + "/" + ref.Name}, nil
	}
	return nil, nil
}

func vmiClaimIndex(obj any) ([]string, error) {
	vmi, ok := obj.(*virtv1.VirtualMachineInstance)
	if !ok {
		return nil, nil
	}
	var out []string
	for _, v := range vmi.Spec.Volumes {
		if name := claimOf(v); name != "" {
			out = append(out, vmi.Namespace+"/"+name)
		}
	}
	return out, nil
}

// claimOf returns the PVC a volume uses ("" for volumes without one).
func claimOf(v virtv1.Volume) string {
	switch {
	case v.PersistentVolumeClaim != nil:
		return v.PersistentVolumeClaim.ClaimName
	case v.DataVolume != nil:
		return v.DataVolume.Name
	}
	return ""
}

// getCachedKey returns a copy of the cached object under a store key
// (namespace/name, which is also a queue key), or the zero value.
func getCachedKey[T runtime.Object](inf cache.SharedIndexInformer, key string) T {
	var zero T
	if inf == nil {
		return zero
	}
	obj, ok, err := inf.GetStore().GetByKey(key)
	if err != nil || !ok {
		return zero
	}
	t, ok := obj.(T)
	if !ok {
		return zero
	}
	return t.DeepCopyObject().(T)
}

// getCached returns a copy of the object stored under ns/name in inf (nil
// when absent).
func getCached[T runtime.Object](inf cache.SharedIndexInformer, ns, name string) T {
	key := name
	if ns != "" {
		key = ns + "/" + name
	}
	return getCachedKey[T](inf, key)
}

// vmGone reports whether the VM a controller reference points to is gone:
// absent from the cache and, to be sure, from the API server too (or present
// with another UID).
func (c *Controller) vmGone(ctx context.Context, ns string, ref *metav1.OwnerReference) (bool, error) {
	if vm := getCached[*virtv1.VirtualMachine](c.vmInformer, ns, ref.Name); vm != nil && vm.UID == ref.UID {
		return false, nil
	}
	return c.ownerGone(ctx, ns, ref)
}

func ownedBy(obj metav1.Object, uid types.UID) bool {
	ref := metav1.GetControllerOf(obj)
	return ref != nil && ref.UID == uid
}

// preconditionDelete deletes an object of the given UID; NotFound and
// Conflict (someone else's object by now) count as done.
func preconditionDelete(uid types.UID, del func(metav1.DeleteOptions) error) error {
	err := del(metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return err
	}
	return nil
}

// finalizerPatch is a test-guarded JSON patch setting metadata.finalizers
// from have to want.
func finalizerPatch(have, want []string) []byte {
	var old any
	if have != nil {
		old = have
	}
	var value any = []string{}
	if want != nil {
		value = want
	}
	return mustJSONPatch(
		patchOp{Op: "test", Path: "/metadata/finalizers", Value: old},
		patchOp{Op: "replace", Path: "/metadata/finalizers", Value: value},
	)
}

// Informer constructors for the kinds the extensions watch. Like
// NewVirtualMachineInformer they work against a real API server and against
// the fakes (NewFakeClients, NewFakeClientsWithCDI).

// NewDataVolumeInformer returns a shared index informer for the CDI
// DataVolumes in namespace ns (metav1.NamespaceAll for all), indexed by
// namespace.
func NewDataVolumeInformer(cdi cdiclient.Interface, ns string, resync time.Duration) cache.SharedIndexInformer {
	return newInformer(cdi, &cdiv1.DataVolume{}, resync,
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return cdi.CdiV1beta1().DataVolumes(ns).List(ctx, o)
		},
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cdi.CdiV1beta1().DataVolumes(ns).Watch(ctx, o)
		})
}

// NewVirtualMachineInstanceMigrationInformer is NewDataVolumeInformer for
// VirtualMachineInstanceMigrations (kubevirt.io/v1).
func NewVirtualMachineInstanceMigrationInformer(kv kubevirt.Interface, ns string, resync time.Duration) cache.SharedIndexInformer {
	return newInformer(kv, &virtv1.VirtualMachineInstanceMigration{}, resync,
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return kv.KubevirtV1().VirtualMachineInstanceMigrations(ns).List(ctx, o)
		},
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return kv.KubevirtV1().VirtualMachineInstanceMigrations(ns).Watch(ctx, o)
		})
}

// NewVirtualMachineSnapshotInformer is NewDataVolumeInformer for
// VirtualMachineSnapshots (snapshot.kubevirt.io/v1beta1).
func NewVirtualMachineSnapshotInformer(kv kubevirt.Interface, ns string, resync time.Duration) cache.SharedIndexInformer {
	return newInformer(kv, &snapshotv1.VirtualMachineSnapshot{}, resync,
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return kv.SnapshotV1beta1().VirtualMachineSnapshots(ns).List(ctx, o)
		},
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return kv.SnapshotV1beta1().VirtualMachineSnapshots(ns).Watch(ctx, o)
		})
}

// NewVirtualMachineSnapshotContentInformer is NewDataVolumeInformer for
// VirtualMachineSnapshotContents.
func NewVirtualMachineSnapshotContentInformer(kv kubevirt.Interface, ns string, resync time.Duration) cache.SharedIndexInformer {
	return newInformer(kv, &snapshotv1.VirtualMachineSnapshotContent{}, resync,
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return kv.SnapshotV1beta1().VirtualMachineSnapshotContents(ns).List(ctx, o)
		},
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return kv.SnapshotV1beta1().VirtualMachineSnapshotContents(ns).Watch(ctx, o)
		})
}

// NewVirtualMachineRestoreInformer is NewDataVolumeInformer for
// VirtualMachineRestores.
func NewVirtualMachineRestoreInformer(kv kubevirt.Interface, ns string, resync time.Duration) cache.SharedIndexInformer {
	return newInformer(kv, &snapshotv1.VirtualMachineRestore{}, resync,
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return kv.SnapshotV1beta1().VirtualMachineRestores(ns).List(ctx, o)
		},
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return kv.SnapshotV1beta1().VirtualMachineRestores(ns).Watch(ctx, o)
		})
}

// NewVirtualMachineCloneInformer is NewDataVolumeInformer for
// VirtualMachineClones (clone.kubevirt.io/v1beta1).
func NewVirtualMachineCloneInformer(kv kubevirt.Interface, ns string, resync time.Duration) cache.SharedIndexInformer {
	return newInformer(kv, &clonev1.VirtualMachineClone{}, resync,
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return kv.CloneV1beta1().VirtualMachineClones(ns).List(ctx, o)
		},
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return kv.CloneV1beta1().VirtualMachineClones(ns).Watch(ctx, o)
		})
}

// pvcStorageClass returns the StorageClass name of a PVC ("" when unset).
func pvcStorageClass(pvc *corev1.PersistentVolumeClaim) string {
	if pvc == nil || pvc.Spec.StorageClassName == nil {
		return ""
	}
	return *pvc.Spec.StorageClassName
}
