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
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return kv.KubevirtV1().VirtualMachines(ns).List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return kv.KubevirtV1().VirtualMachines(ns).Watch(ctx, opts)
		},
	}
	return cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, kv),
		&virtv1.VirtualMachine{}, resync, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
}

// NewVirtualMachineInstanceInformer is NewVirtualMachineInformer for
// VirtualMachineInstances.
func NewVirtualMachineInstanceInformer(kv kubevirt.Interface, ns string, resync time.Duration) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return kv.KubevirtV1().VirtualMachineInstances(ns).List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return kv.KubevirtV1().VirtualMachineInstances(ns).Watch(ctx, opts)
		},
	}
	return cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, kv),
		&virtv1.VirtualMachineInstance{}, resync, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
}
