package kubevirtsim

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubevirt"
)

// kubevirt.io/client-go v1.8.0 ships no informer factory, so informers are
// built from the typed client here. The ListerWatcher is wrapped with
// cache.ToListWatcherWithWatchListSemantics so that the reflector does not
// try the streaming WatchList protocol against clients that do not support it
// (the fake clientset from NewFakeClients reports that it does not).

// NewVirtualMachineInformer returns a shared index informer for the
// VirtualMachines in namespace ns (metav1.NamespaceAll for all namespaces),
// indexed by namespace. It works against a real API server and against the
// clientset returned by NewFakeClients.
func NewVirtualMachineInformer(kv kubevirt.Interface, ns string, resync time.Duration) cache.SharedIndexInformer {
	return newInformer(kv, &virtv1.VirtualMachine{}, resync,
		func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return kv.KubevirtV1().VirtualMachines(ns).List(ctx, opts)
		},
		func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return kv.KubevirtV1().VirtualMachines(ns).Watch(ctx, opts)
		})
}

// NewVirtualMachineInstanceInformer is NewVirtualMachineInformer for
// VirtualMachineInstances.
func NewVirtualMachineInstanceInformer(kv kubevirt.Interface, ns string, resync time.Duration) cache.SharedIndexInformer {
	return newInformer(kv, &virtv1.VirtualMachineInstance{}, resync,
		func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return kv.KubevirtV1().VirtualMachineInstances(ns).List(ctx, opts)
		},
		func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return kv.KubevirtV1().VirtualMachineInstances(ns).Watch(ctx, opts)
		})
}

// newInformer is a namespace-indexed informer over list and watch, with
// watch-list semantics where the client supports them.
func newInformer(client any, obj runtime.Object, resync time.Duration,
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) cache.SharedIndexInformer {
	lw := &cache.ListWatch{ListWithContextFunc: list, WatchFuncWithContext: watchFn}
	return cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, client), obj, resync,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
}
