package kubevirtsim

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/testing"
)

// watchHub serves the watches of a fake clientset from its object tracker
// and keeps the tracker from panicking.
//
// The tracker pushes every event into a 100-element channel per watcher
// while holding its lock and panics ("channel full") when one is full: when
// a consumer is slow, when the Go scheduler does not run it for a while
// under load, or when a watch without a resourceVersion starts over more
// than 100 existing objects. The hub therefore
//
//   - relays each tracker watcher through an unbounded queue
//     (bufferedWatch) drained by its own goroutine,
//   - makes writers wait (backpressure) while any watcher's channel is
//     half full, and
//   - delivers the initial ADDED events of a new watch itself instead of
//     letting the tracker push them.
//
// Watches honour label selectors and metadata.name/namespace field
// selectors.
type watchHub struct {
	// lock, when set, serialises watch setup with writes (the KubeVirt
	// fake's two clientsets share the tracker but not their Fake locks);
	// nil when the Fake's own lock already does that.
	lock    *sync.Mutex
	tracker testing.ObjectTracker
	kinds   map[schema.GroupVersionResource]schema.GroupVersionKind
	// objectRVs: objects carry the tracker's resourceVersions, so a watch
	// from a resourceVersion can be served from a list.
	objectRVs bool

	mu      sync.Mutex
	watches map[*bufferedWatch]struct{}
}

func newWatchHub(tracker testing.ObjectTracker, scheme *runtime.Scheme, lock *sync.Mutex, objectRVs bool) *watchHub {
	h := &watchHub{lock: lock, tracker: tracker, objectRVs: objectRVs,
		kinds: map[schema.GroupVersionResource]schema.GroupVersionKind{}, watches: map[*bufferedWatch]struct{}{}}
	for gvk := range scheme.AllKnownTypes() {
		if gvk.Version == runtime.APIVersionInternal || strings.HasSuffix(gvk.Kind, "List") {
			continue
		}
		gvr, _ := meta.UnsafeGuessKindToResource(gvk)
		h.kinds[gvr] = gvk
	}
	return h
}

// waitForRoom blocks while a watcher's tracker channel is half full, so that
// the next write cannot overflow it. Writers call it (holding their write
// lock) before touching the tracker; the relay goroutines need no lock.
func (h *watchHub) waitForRoom() {
	for {
		full := false
		h.mu.Lock()
		for w := range h.watches {
			if len(w.in) > cap(w.in)/2 {
				full = true
				break
			}
		}
		h.mu.Unlock()
		if !full {
			return
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// writeGate is a reactor that applies backpressure before writes and lets
// the next reactor do the write.
func (h *watchHub) writeGate(action testing.Action) (bool, runtime.Object, error) {
	switch action.GetVerb() {
	case "create", "update", "patch", "delete", "delete-collection":
		h.waitForRoom()
	}
	return false, nil, nil
}

// watch is the watch reactor.
func (h *watchHub) watch(action testing.Action) (bool, watch.Interface, error) {
	var opts metav1.ListOptions
	if wa, ok := action.(testing.WatchActionImpl); ok {
		opts = wa.ListOptions
	}
	keep, err := objectFilter(opts)
	if err != nil {
		return true, nil, err
	}
	gvr, ns := action.GetResource(), action.GetNamespace()
	if h.lock != nil {
		h.lock.Lock()
		defer h.lock.Unlock()
	}
	var initial []watch.Event
	gvk, known := h.kinds[gvr]
	if rv := opts.ResourceVersion; known && (rv == "" || rv == "0" || h.objectRVs) {
		// Serve the existing objects from a list, then watch from the
		// list's resourceVersion.
		from := int64(-1)
		if rv != "" && rv != "0" {
			if from, err = strconv.ParseInt(rv, 10, 64); err != nil {
				return true, nil, apierrors.NewBadRequest(fmt.Sprintf("invalid resourceVersion %q", rv))
			}
		}
		list, err := h.tracker.List(gvr, gvk, ns)
		if err != nil {
			return true, nil, err
		}
		lm, err := meta.ListAccessor(list)
		if err != nil {
			return true, nil, err
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return true, nil, err
		}
		for _, obj := range items {
			if from >= 0 {
				m, err := meta.Accessor(obj)
				if err != nil {
					continue
				}
				if orv, err := strconv.ParseInt(m.GetResourceVersion(), 10, 64); err == nil && orv <= from {
					continue
				}
			}
			if keep == nil || keep(obj) {
				initial = append(initial, watch.Event{Type: watch.Added, Object: obj})
			}
		}
		opts.ResourceVersion = lm.GetResourceVersion()
	}
	src, err := h.tracker.Watch(gvr, ns, opts)
	if err != nil {
		return true, nil, err
	}
	return true, h.relay(src, keep, initial), nil
}

// bufferedWatch relays a tracker watcher through an unbounded queue,
// dropping events whose object does not pass keep (when set).
type bufferedWatch struct {
	hub  *watchHub
	src  watch.Interface
	in   <-chan watch.Event
	out  chan watch.Event
	done chan struct{}
	once sync.Once
}

func (h *watchHub) relay(src watch.Interface, keep func(runtime.Object) bool, initial []watch.Event) *bufferedWatch {
	w := &bufferedWatch{hub: h, src: src, in: src.ResultChan(), out: make(chan watch.Event), done: make(chan struct{})}
	h.mu.Lock()
	h.watches[w] = struct{}{}
	h.mu.Unlock()
	go w.run(keep, initial)
	return w
}

func (w *bufferedWatch) run(keep func(runtime.Object) bool, queue []watch.Event) {
	defer close(w.out)
	defer func() {
		w.hub.mu.Lock()
		delete(w.hub.watches, w)
		w.hub.mu.Unlock()
		w.src.Stop()
	}()
	in := w.in
	for in != nil || len(queue) > 0 {
		var out chan watch.Event
		var next watch.Event
		if len(queue) > 0 {
			out, next = w.out, queue[0]
		}
		select {
		case ev, ok := <-in:
			if !ok {
				in = nil
				continue
			}
			if keep == nil || keep(ev.Object) {
				queue = append(queue, ev)
			}
		case out <- next:
			queue[0] = watch.Event{}
			queue = queue[1:]
		case <-w.done:
			return
		}
	}
}

// Stop ends the watch; ResultChan is closed shortly after.
func (w *bufferedWatch) Stop() { w.once.Do(func() { close(w.done) }) }

// ResultChan delivers the events.
func (w *bufferedWatch) ResultChan() <-chan watch.Event { return w.out }

// objectFilter turns the label and field selectors of opts into a
// predicate (nil when there is nothing to filter). Only the metadata.name
// and metadata.namespace field selectors are supported, as for custom
// resources without selectable fields.
func objectFilter(opts metav1.ListOptions) (func(runtime.Object) bool, error) {
	if opts.LabelSelector == "" && opts.FieldSelector == "" {
		return nil, nil
	}
	ls, err := labels.Parse(opts.LabelSelector)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	fs, err := fields.ParseSelector(opts.FieldSelector)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	for _, r := range fs.Requirements() {
		if r.Field != "metadata.name" && r.Field != "metadata.namespace" {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("field label not supported: %s", r.Field))
		}
	}
	return func(obj runtime.Object) bool {
		m, err := meta.Accessor(obj)
		if err != nil {
			return false
		}
		return ls.Matches(labels.Set(m.GetLabels())) &&
			fs.Matches(fields.Set{"metadata.name": m.GetName(), "metadata.namespace": m.GetNamespace()})
	}, nil
}
