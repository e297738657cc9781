package kubevirtsim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubevirt"
)

// NodesOptions configure Nodes.
type NodesOptions struct {
	// Kube is the identity of the kubelets, the node-labeller, Multus and
	// the CSI driver stand-ins: it writes pod and node status, deletes
	// pods, creates PersistentVolumes and VolumeSnapshotContents.
	Kube kubernetes.Interface
	// KubeVirt is virt-handler's identity (the kubevirt-handler service
	// account): KubeVirt's webhooks let only KubeVirt's service accounts
	// change what virt-handler changes on a VMI.
	KubeVirt kubevirt.Interface
	// Dynamic reads NetworkAttachmentDefinitions and plays the external
	// snapshotter on VolumeSnapshots (snapshot.storage.k8s.io/v1).
	Dynamic dynamic.Interface
	// BootDelay is how long a guest takes from its virt-launcher pod
	// running to the VMI Running; AgentDelay how much longer its guest
	// agent takes to connect.
	BootDelay, AgentDelay time.Duration
	// StopDelay is how long a guest takes to shut down once asked (capped
	// by its grace period).
	StopDelay time.Duration
	// ImportDelay is how long CDI's importer, cloner and upload server
	// pods run before they complete.
	ImportDelay time.Duration
	// MigrationDelay is how long the memory transfer of a live migration
	// takes.
	MigrationDelay time.Duration
	// Logger receives the stand-ins' log; nil discards it.
	Logger *zap.Logger
}

// Nodes stands in for what runs on the nodes of a cluster whose control
// plane is real (KubeVirt's virt-controller and virt-api, CDI,
// kube-scheduler and kube-controller-manager), for every Node object:
//
//   - the kubelet (nodes_kubelet.go): pods bound to a node start once
//     their volumes can be mounted (claims Bound, secrets and config maps
//     present), get a pod IP and ready containers, and honour readiness
//     gates; CDI's importer, cloner and upload server pods complete with
//     the termination message CDI's own write; deleted pods stop (the VMI
//     in a virt-launcher pod shuts down first) and are removed; Multus
//     writes the network-status of pods that ask for secondary networks;
//   - virt-handler (nodes_handler.go): the VMIs virt-controller scheduled
//     on a node boot (Running, the domain's view of disks and NICs, the
//     guest agent, LiveMigratable with KubeVirt's own rules), shut down
//     when deleted, and live-migrate with both handlers' part of the
//     handshake;
//   - virt-handler's node-labeller and device plugins (nodes_labeller.go):
//     KubeVirt's scheduling labels and devices.kubevirt.io resources;
//   - the CSI driver sidecars (nodes_storage.go): the external
//     provisioner (dynamic PersistentVolumes for claims the
//     PersistentVolume controller hands to a StorageClass's provisioner,
//     clones and restores from snapshots included, but not claims a volume
//     populator fills), the external resizer, and the snapshot controller
//     and csi-snapshotter for VolumeSnapshots of classes that have a
//     VolumeSnapshotClass.
//
// Everything else, the VM, VMI, migration, snapshot, restore and clone
// controllers, DataVolumes, scheduling, garbage collection and volume
// binding, is the real components' work: Nodes only writes what those
// components read from a node.
type Nodes struct {
	opts NodesOptions
	log  *zap.Logger

	factory   informers.SharedInformerFactory
	dfactory  dynamicinformer.DynamicSharedInformerFactory
	nodes     cache.SharedIndexInformer
	pods      cache.SharedIndexInformer
	vmis      cache.SharedIndexInformer
	pvcs      cache.SharedIndexInformer
	pvs       cache.SharedIndexInformer
	classes   cache.SharedIndexInformer
	snapshots cache.SharedIndexInformer // nil without the snapshot CRDs
	contents  cache.SharedIndexInformer
	snapClass cache.SharedIndexInformer

	queue workqueue.TypedRateLimitingInterface[string]

	mu      sync.Mutex
	since   map[string]time.Time // first sight of a state, by key+state
	podIPs  map[string]string    // pod UID -> IP
	nextIP  map[string]int       // node -> last host number handed out
	agents  map[types.UID]bool   // VMI UID -> its guest runs an agent
	started sync.Once
}

// Queue key prefixes.
const (
	nodesKeyNode     = "node:"
	nodesKeyPod      = "pod:"
	nodesKeyVMI      = "vmi:"
	nodesKeyClaim    = "pvc:"
	nodesKeySnapshot = "volumesnapshot:"
)

// Index names of the Nodes informers.
const (
	nodesIndexClaim   = "claim"   // pods by "ns/claim" of their PVC volumes
	nodesIndexVMI     = "vmi"     // pods by "ns/vmi" they run
	nodesIndexContent = "content" // snapshots by content name
)

var (
	volumeSnapshotGVR        = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshots"}
	volumeSnapshotContentGVR = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotcontents"}
	volumeSnapshotClassGVR   = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotclasses"}
	nadGVR                   = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions"}
)

// NewNodes creates the stand-ins; nothing runs until Run.
func NewNodes(opts NodesOptions) *Nodes {
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	n := &Nodes{opts: opts, log: log.Named("nodes"), since: map[string]time.Time{},
		podIPs: map[string]string{}, nextIP: map[string]int{}, agents: map[types.UID]bool{}}
	n.factory = informers.NewSharedInformerFactory(opts.Kube, 0)
	n.nodes = n.factory.Core().V1().Nodes().Informer()
	n.pods = n.factory.Core().V1().Pods().Informer()
	n.pvcs = n.factory.Core().V1().PersistentVolumeClaims().Informer()
	n.pvs = n.factory.Core().V1().PersistentVolumes().Informer()
	n.classes = n.factory.Storage().V1().StorageClasses().Informer()
	n.vmis = NewVirtualMachineInstanceInformer(opts.KubeVirt, metav1.NamespaceAll, 0)
	mustAddIndexers(n.pods, cache.Indexers{nodesIndexClaim: podClaimIndex, nodesIndexVMI: podVMIIndex})
	if opts.Dynamic != nil {
		n.dfactory = dynamicinformer.NewDynamicSharedInformerFactory(opts.Dynamic, 0)
		n.snapshots = n.dfactory.ForResource(volumeSnapshotGVR).Informer()
		n.contents = n.dfactory.ForResource(volumeSnapshotContentGVR).Informer()
		n.snapClass = n.dfactory.ForResource(volumeSnapshotClassGVR).Informer()
		mustAddIndexers(n.snapshots, cache.Indexers{nodesIndexContent: snapshotContentIndex})
	}
	return n
}

// Run runs the stand-ins until ctx ends. It returns an error if the
// informers cannot sync (e.g. the snapshot CRDs are missing while Dynamic
// is set).
func (n *Nodes) Run(ctx context.Context) error {
	first := false
	n.started.Do(func() { first = true })
	if !first {
		return errors.New("kubevirtsim: Nodes already started")
	}
	n.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](20*time.Millisecond, 5*time.Second),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "kubevirtsim-nodes"})
	if err := n.addHandlers(); err != nil {
		n.queue.ShutDown()
		return err
	}
	var wg sync.WaitGroup
	// Stop in order: the workers (the queue), then the informers.
	defer func() {
		n.queue.ShutDown()
		wg.Wait()
		n.factory.Shutdown()
		if n.dfactory != nil {
			n.dfactory.Shutdown()
		}
	}()
	n.factory.Start(ctx.Done())
	synced := []cache.InformerSynced{n.nodes.HasSynced, n.pods.HasSynced, n.pvcs.HasSynced, n.pvs.HasSynced, n.classes.HasSynced}
	wg.Go(func() { n.vmis.RunWithContext(ctx) })
	synced = append(synced, n.vmis.HasSynced)
	if n.dfactory != nil {
		n.dfactory.Start(ctx.Done())
		synced = append(synced, n.snapshots.HasSynced, n.contents.HasSynced, n.snapClass.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("kubevirtsim: Nodes informers did not sync")
	}
	n.log.Info("node stand-ins started")
	for range 2 {
		wg.Go(func() {
			for n.processNext(ctx) {
			}
		})
	}
	<-ctx.Done()
	return nil
}

func (n *Nodes) addHandlers() error {
	add := func(inf cache.SharedIndexInformer, fn func(obj any)) error {
		_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    fn,
			UpdateFunc: func(_, obj any) { fn(obj) },
			DeleteFunc: func(obj any) {
				if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = tomb.Obj
				}
				fn(obj)
			},
		})
		return err
	}
	errs := []error{
		add(n.nodes, func(obj any) { n.enqueueObj(nodesKeyNode, obj) }),
		add(n.pods, func(obj any) {
			n.enqueueObj(nodesKeyPod, obj)
			if pod, ok := obj.(*corev1.Pod); ok {
				if vmi := podVMIName(pod); vmi != "" {
					n.queue.Add(nodesKeyVMI + pod.Namespace + "/" + vmi)
				}
			}
		}),
		add(n.vmis, func(obj any) {
			n.enqueueObj(nodesKeyVMI, obj)
			if m, ok := obj.(metav1.Object); ok {
				n.enqueueIndexed(n.pods, nodesIndexVMI, m.GetNamespace()+"/"+m.GetName(), nodesKeyPod)
			}
		}),
		add(n.pvcs, func(obj any) {
			n.enqueueObj(nodesKeyClaim, obj)
			if m, ok := obj.(metav1.Object); ok {
				n.enqueueIndexed(n.pods, nodesIndexClaim, m.GetNamespace()+"/"+m.GetName(), nodesKeyPod)
			}
		}),
		add(n.pvs, func(obj any) {
			if pv, ok := obj.(*corev1.PersistentVolume); ok && pv.Spec.ClaimRef != nil {
				n.queue.Add(nodesKeyClaim + pv.Spec.ClaimRef.Namespace + "/" + pv.Spec.ClaimRef.Name)
			}
		}),
		add(n.classes, func(any) {}),
	}
	if n.snapshots != nil {
		errs = append(errs,
			add(n.snapshots, func(obj any) { n.enqueueObj(nodesKeySnapshot, obj) }),
			add(n.contents, func(obj any) {
				if m, ok := obj.(metav1.Object); ok {
					n.enqueueIndexed(n.snapshots, nodesIndexContent, m.GetName(), nodesKeySnapshot)
				}
			}),
			add(n.snapClass, func(any) {}))
	}
	return errors.Join(errs...)
}

func (n *Nodes) enqueueObj(prefix string, obj any) {
	if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
		n.queue.Add(prefix + key)
	}
}

func (n *Nodes) enqueueIndexed(inf cache.SharedIndexInformer, index, value, prefix string) {
	objs, err := inf.GetIndexer().ByIndex(index, value)
	if err != nil {
		return
	}
	for _, o := range objs {
		n.enqueueObj(prefix, o)
	}
}

func (n *Nodes) processNext(ctx context.Context) bool {
	key, shutdown := n.queue.Get()
	if shutdown {
		return false
	}
	defer n.queue.Done(key)
	after, err := n.sync(ctx, key)
	switch {
	case ctx.Err() != nil:
	case err != nil:
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			n.log.Debug("sync conflict, retrying", zap.String("key", key), zap.Error(err))
		} else {
			n.log.Warn("sync failed", zap.String("key", key), zap.Error(err))
		}
		n.queue.AddRateLimited(key)
	default:
		n.queue.Forget(key)
		if after > 0 {
			n.queue.AddAfter(key, after)
		}
	}
	return true
}

func (n *Nodes) sync(ctx context.Context, key string) (time.Duration, error) {
	prefix, rest, _ := strings.Cut(key, ":")
	switch prefix + ":" {
	case nodesKeyNode:
		return n.syncNode(ctx, rest)
	case nodesKeyPod:
		return n.syncPod(ctx, rest)
	case nodesKeyVMI:
		return n.syncVMI(ctx, rest)
	case nodesKeyClaim:
		return n.syncClaim(ctx, rest)
	case nodesKeySnapshot:
		return n.syncSnapshot(ctx, rest)
	}
	return 0, fmt.Errorf("kubevirtsim: unknown key %q", key)
}

// waited returns how long is left of d since the first call for key (and
// state), and forgets the key once nothing is left.
func (n *Nodes) waited(key string, d time.Duration) time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	t, ok := n.since[key]
	if !ok {
		t = time.Now()
		n.since[key] = t
	}
	left := time.Until(t.Add(d))
	if left <= 0 {
		return 0
	}
	return left
}

// forgetWait drops the first-sight times recorded under prefix.
func (n *Nodes) forgetWait(prefix string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for k := range n.since {
		if strings.HasPrefix(k, prefix) {
			delete(n.since, k)
		}
	}
}

// cached returns the object under key in inf, or nil.
func cached[T any](inf cache.SharedIndexInformer, key string) T {
	var zero T
	obj, ok, err := inf.GetStore().GetByKey(key)
	if err != nil || !ok {
		return zero
	}
	t, ok := obj.(T)
	if !ok {
		return zero
	}
	return t
}

func podClaimIndex(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	var out []string
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			out = append(out, pod.Namespace+"/"+v.PersistentVolumeClaim.ClaimName)
		}
	}
	return out, nil
}

func podVMIIndex(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	if name := podVMIName(pod); name != "" {
		return []string{pod.Namespace + "/" + name}, nil
	}
	return nil, nil
}

// podVMIName is the VMI a virt-launcher pod runs (its controller
// reference), or "".
func podVMIName(pod *corev1.Pod) string {
	if ref := metav1.GetControllerOf(pod); ref != nil && ref.Kind == virtv1.VirtualMachineInstanceGroupVersionKind.Kind {
		return ref.Name
	}
	return ""
}
