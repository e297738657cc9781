package kube

import (
	"context"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// listWatchFuncs builds a ListWatch for one namespace ("" = all) of a typed
// client. Each kind gets one, because the KubeVirt clientset ships no
// informer factory of its own.
type listWatchFuncs struct {
	list  func(ctx context.Context, ns string, opts metav1.ListOptions) (runtime.Object, error)
	watch func(ctx context.Context, ns string, opts metav1.ListOptions) (watch.Interface, error)
}

// store is a read view over one or more namespaced informers of a kind, so
// that serving a list of namespaces needs no cluster-wide list/watch rights.
type store struct {
	byNS map[string]*informer // "" key = all namespaces
	// writes overlays each informer's store with the objects our own
	// writes returned (client-go's mutation cache), keyed as byNS: a read
	// returns the newer of the two by resourceVersion, so that a watch
	// event older than our write (a controller's earlier write, delivered
	// after our answer) cannot hide it. An entry goes once the informer
	// has caught up, or after mutationTTL.
	writes map[string]cache.MutationCache
	// written are the keys put lately (key → expiry, unix nanos): list
	// consults the overlay only for them.
	written sync.Map
	// deleted are the UIDs of objects deleted lately, for mutationTTL: put
	// refuses them, so that an answer read before a delete and stored
	// after its event cannot bring the object back as a ghost that only a
	// relist would remove.
	deleted *utilcache.Expiring
	// transform is what the informers apply to what they store; put
	// applies it too.
	transform cache.TransformFunc
	// onChange hears what the informers' handlers hear, and what put
	// stores.
	onChange changeFunc
}

// changeFunc hears about cache changes; old is nil for an add, new is nil
// for a delete.
type changeFunc func(old, new any)

func newStore(ctx context.Context, namespaces []string, obj runtime.Object, lw listWatchFuncs, resync time.Duration, indexers cache.Indexers, transform cache.TransformFunc, onChange changeFunc) *store {
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	s := &store{byNS: map[string]*informer{}, writes: map[string]cache.MutationCache{}, deleted: utilcache.NewExpiring(), transform: transform, onChange: onChange}
	// During an outage list and watch wait for the cluster to come back,
	// calls it cannot serve are retried soon (see callServed), and their
	// outcomes tell whether the cache is current.
	h := healthFrom(ctx)
	kind := reflect.TypeOf(obj).Elem().Name()
	for _, ns := range namespaces {
		ns := ns
		key := kind
		if ns != "" {
			key += " in " + ns
		}
		src := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return callServed(ctx, h, key, func(ctx context.Context) (runtime.Object, error) { return lw.list(ctx, ns, o) })
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return callServed(ctx, h, key, func(ctx context.Context) (watch.Interface, error) { return lw.watch(ctx, ns, o) })
			},
		}
		// A list, not a watch-list stream: the stream decodes each object as
		// an event of its own (framing, kind sniffing, the event wrapper),
		// which at 10,000 VMs cost the plugin twice the CPU of one list
		// answered from kube-apiserver's watch cache and delayed its start
		// by seconds (bench/scale). Watches follow the list as usual.
		var mc cache.MutationCache
		handler := cache.ResourceEventHandlerFuncs{
			AddFunc: func(o any) {
				caughtUp(mc, o)
				if onChange != nil {
					onChange(nil, o)
				}
			},
			UpdateFunc: func(o, n any) {
				caughtUp(mc, n)
				if onChange != nil {
					onChange(o, n)
				}
			},
			DeleteFunc: func(o any) {
				if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
					o = d.Obj
				}
				if ro, ok := o.(runtime.Object); ok {
					mc.OnDelete(ro)
				}
				s.noteDeleted(o)
				if onChange != nil {
					onChange(o, nil)
				}
			},
		}
		if indexers == nil {
			indexers = cache.Indexers{} // an Indexer, for the overlay
		}
		st, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
			ListerWatcher: cache.ToListWatcherWithWatchListSemantics(src, listThenWatch{}),
			ObjectType:    obj, Handler: handler, ResyncPeriod: resync, Indexers: indexers, Transform: transform,
		})
		inf := &informer{Controller: ctrl, indexer: st.(cache.Indexer)}
		mc = cache.NewIntegerResourceVersionMutationCacheWithOptions(klog.Background(), inf.indexer, cache.MutationCacheOptions{
			Indexer: inf.indexer, TTL: mutationTTL, MaxCacheSize: mutationMax,
		})
		s.writes[ns] = mc
		s.byNS[ns] = inf
	}
	return s
}

// informer is client-go's informer of one namespace without the sharing:
// its handlers are called in line as the objects are stored. A shared
// informer queues each notification for each handler in a ring buffer
// that grows to the initial list's size and never shrinks again, 16 bytes
// per object listed and 16 KiB per informer at least (bench CacheMemory),
// for handlers that here are cheap enough to run in line.
type informer struct {
	cache.Controller
	indexer cache.Indexer
}

// GetStore is the informer's cache.
func (i *informer) GetStore() cache.Store { return i.indexer }

// GetIndexer is the informer's cache with its indexes.
func (i *informer) GetIndexer() cache.Indexer { return i.indexer }

// listThenWatch tells client-go's reflector to list and then watch.
type listThenWatch struct{}

func (listThenWatch) IsWatchListSemanticsUnSupported() bool { return true }

const (
	// mutationTTL bounds how long a write of ours overrides the informer:
	// far longer than a watch event takes, short enough that an object
	// whose later events never come (a relist dropped it) is not shown
	// for long.
	mutationTTL = time.Minute
	// mutationMax bounds the overlay: the writes of one minute.
	mutationMax = 4096
)

// caughtUp tells the overlay what the informer stored, so that an entry
// the informer has caught up with goes at once.
func caughtUp(mc cache.MutationCache, o any) {
	if ro, ok := o.(runtime.Object); ok {
		mc.OnAddOrUpdate(ro)
	}
}

func (s *store) run(ctx context.Context) {
	for _, inf := range s.byNS {
		go inf.RunWithContext(ctx)
	}
}

func (s *store) hasSynced() bool {
	for _, inf := range s.byNS {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

func (s *store) informerFor(ns string) *informer {
	if inf, ok := s.byNS[metav1.NamespaceAll]; ok {
		return inf
	}
	return s.byNS[ns]
}

// put puts an object the apiserver just answered to a write into the
// cache, as the informers would store it, so that the client's next call
// reads its own write; created says the write made it. Like client-go's
// mutation cache it never goes back: an object older than the cached one
// (a watch event overtook the answer) is dropped, and so is an update of an
// object no longer cached (its deletion arrived first) or any answer about
// an object deleted since (its UID), which would leave a ghost until the
// next relist. Whoever listens to the store hears of it
// as of an informer event. A nil store (an API the cluster lacks) or an
// unwatched namespace takes nothing.
func (s *store) put(obj runtime.Object, created bool) {
	if s == nil {
		return
	}
	cp := obj.DeepCopyObject()
	m, ok := cp.(metav1.Object)
	if !ok {
		return
	}
	inf := s.informerFor(m.GetNamespace())
	if inf == nil {
		return
	}
	var o any = cp
	if s.transform != nil {
		var err error
		if o, err = s.transform(cp); err != nil {
			return
		}
	}
	st := inf.GetStore()
	old, exists, _ := st.Get(o)
	switch {
	case !exists && (!created || s.deletedLately(m.GetUID())):
		return
	case exists && olderThan(m, old):
		return
	}
	_ = st.Update(o)
	// The informer may still deliver an event older than this write and
	// overwrite the store with it; the overlay keeps the write visible.
	if mc, ok := s.writesFor(m.GetNamespace()).(cache.MutationCache); ok {
		mc.Mutation(o)
		if key, err := cache.MetaNamespaceKeyFunc(o); err == nil {
			s.written.Store(key, time.Now().Add(mutationTTL).UnixNano())
		}
	}
	if s.onChange != nil {
		s.onChange(old, o)
	}
}

// writesFor is the overlay of the informer serving ns, or (for a store
// built without one) that informer's store itself.
func (s *store) writesFor(ns string) interface {
	GetByKey(key string) (any, bool, error)
	ByIndex(index, value string) ([]any, error)
} {
	if mc, ok := s.writes[metav1.NamespaceAll]; ok {
		return mc
	}
	if mc, ok := s.writes[ns]; ok {
		return mc
	}
	if inf := s.informerFor(ns); inf != nil {
		return inf.GetIndexer()
	}
	return nil
}

// olderThan tells whether m's resourceVersion is below that of cached.
// resourceVersions are opaque to clients; like client-go's integer
// mutation cache this reads them as the integers kube-apiserver makes,
// and treats one it cannot read as not older.
func olderThan(m metav1.Object, cached any) bool {
	c, ok := cached.(metav1.Object)
	if !ok {
		return false
	}
	a, err1 := strconv.ParseUint(m.GetResourceVersion(), 10, 64)
	b, err2 := strconv.ParseUint(c.GetResourceVersion(), 10, 64)
	return err1 == nil && err2 == nil && a < b
}

// cached returns the object ns/name of s as a *T, or nil; a nil store (an
// API the cluster lacks) holds nothing.
func cached[T any](s *store, ns, name string) *T {
	if s == nil {
		return nil
	}
	o, _ := s.get(ns, name).(*T)
	return o
}

// get returns the cached object ns/name, or nil.
func (s *store) get(ns, name string) any {
	if ns == "" {
		return s.getKey(name)
	}
	return s.getKey(ns + "/" + name)
}

// getKey is get of a key (namespace/name, or name).
func (s *store) getKey(key string) any {
	ns, _, ok := strings.Cut(key, "/")
	if !ok {
		ns = ""
	}
	w := s.writesFor(ns)
	if w == nil {
		return nil
	}
	obj, ok, err := w.GetByKey(key)
	if err != nil || !ok {
		return nil
	}
	return obj
}

// list returns every cached object in no particular order; callers that
// answer with a list sort by what they show.
func (s *store) list() []any {
	var out []any
	if len(s.byNS) == 1 {
		for _, inf := range s.byNS {
			out = inf.GetStore().List()
		}
	} else {
		for _, inf := range s.byNS {
			out = append(out, inf.GetStore().List()...)
		}
	}
	return s.overlay(out)
}

// overlay replaces, in objs (a fresh list), the objects a write of ours
// has since superseded.
func (s *store) overlay(objs []any) []any {
	recent := s.recentWrites()
	if len(recent) == 0 {
		return objs
	}
	for i, o := range objs {
		m, ok := o.(metav1.Object)
		if !ok {
			continue
		}
		key := m.GetName()
		if m.GetNamespace() != "" {
			key = m.GetNamespace() + "/" + key
		}
		if !recent[key] {
			continue
		}
		if newer, ok, err := s.writesFor(m.GetNamespace()).GetByKey(key); err == nil && ok {
			objs[i] = newer
		}
	}
	return objs
}

// recentWrites are the keys put lately (nil when none), forgetting those
// put longer ago.
func (s *store) recentWrites() map[string]bool {
	now := time.Now().UnixNano()
	var recent map[string]bool
	s.written.Range(func(k, v any) bool {
		if v.(int64) < now {
			s.written.Delete(k)
			return true
		}
		if recent == nil {
			recent = map[string]bool{}
		}
		recent[k.(string)] = true
		return true
	})
	return recent
}

// listKeyed is list with each object's key, the very string its informer
// keeps: a caller that keeps keys (the vmid table) shares the informer's
// rather than making its own.
func (s *store) listKeyed() (keys []string, objs []any) {
	recent := s.recentWrites()
	for ns, inf := range s.byNS {
		st := inf.GetStore()
		for _, k := range st.ListKeys() {
			var o any
			var ok bool
			if recent[k] {
				o, ok, _ = s.writesFor(ns).GetByKey(k)
			} else {
				o, ok, _ = st.GetByKey(k)
			}
			if ok { // not deleted since ListKeys
				keys = append(keys, k)
				objs = append(objs, o)
			}
		}
	}
	return keys, objs
}

// getKeys returns the cached objects of keys (namespace/name, or name),
// nil for those not cached. Like list it asks the overlay only for the
// keys written lately.
func (s *store) getKeys(keys []string) []any {
	recent := s.recentWrites()
	out := make([]any, len(keys))
	for i, k := range keys {
		ns, _, ok := strings.Cut(k, "/")
		if !ok {
			ns = ""
		}
		if recent[k] {
			out[i], _, _ = s.writesFor(ns).GetByKey(k)
		} else if inf := s.informerFor(ns); inf != nil {
			out[i], _, _ = inf.GetStore().GetByKey(k)
		}
	}
	return out
}

// byIndex merges an index lookup over every informer.
func (s *store) byIndex(index, value string) []any {
	var out []any
	for ns, inf := range s.byNS {
		items, err := s.writesFor(ns).ByIndex(index, value)
		if err != nil {
			continue
		}
		// The overlay answers by the informer's index: a write of ours
		// may have moved an object out of value since.
		fn := inf.GetIndexer().GetIndexers()[index]
		for _, o := range items {
			if vals, err := fn(o); err == nil && slices.Contains(vals, value) {
				out = append(out, o)
			}
		}
	}
	return out
}

// drop takes an object the apiserver just deleted out of the cache, so
// that the client's next call does not find it; the informer's own delete
// event finds nothing left to remove.
func (s *store) drop(obj runtime.Object) {
	m, ok := obj.(metav1.Object)
	if s == nil || !ok {
		return
	}
	if inf := s.informerFor(m.GetNamespace()); inf != nil {
		_ = inf.GetStore().Delete(obj)
	}
	s.noteDeleted(obj)
}

// noteDeleted remembers the UID of a deleted object for mutationTTL: an
// answer read before the delete comes back within a request's life.
func (s *store) noteDeleted(obj any) {
	if m, ok := obj.(metav1.Object); ok && m.GetUID() != "" && s.deleted != nil {
		s.deleted.Set(m.GetUID(), struct{}{}, mutationTTL)
	}
}

// deletedLately tells whether the object of uid was deleted within
// mutationTTL.
func (s *store) deletedLately(uid types.UID) bool {
	if uid == "" || s.deleted == nil {
		return false
	}
	_, ok := s.deleted.Get(uid)
	return ok
}

// stripMeta drops what the API never reads from cached objects: managed
// fields and the kubectl last-applied copy are often larger than the spec.
func stripMeta(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
		if a := m.GetAnnotations(); a != nil {
			if _, has := a["kubectl.kubernetes.io/last-applied-configuration"]; has {
				delete(a, "kubectl.kubernetes.io/last-applied-configuration")
				m.SetAnnotations(a)
			}
		}
	}
	return obj, nil
}
