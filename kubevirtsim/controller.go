package kubevirtsim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	virtv1 "kubevirt.io/api/core/v1"
	cdiclient "kubevirt.io/client-go/containerizeddataimporter"
	"kubevirt.io/client-go/kubevirt"
)

// Options tune the simulated timing.
type Options struct {
	// StartDelay is how long a new VMI takes from creation to Running
	// (Pending → Scheduling → Scheduled → Running). Zero starts at once.
	StartDelay time.Duration
	// StopDelay is how long a guest takes to shut down after its VMI was
	// deleted. A VMI's spec.terminationGracePeriodSeconds caps it (0 stops
	// at once); the 30 s KubeVirt default is never waited for.
	StopDelay time.Duration
	// Logger receives the controller's log; nil discards it.
	Logger *zap.Logger
	// Resync is the informers' resync period; zero disables resyncs.
	Resync time.Duration

	// CDI is the CDI clientset (cdi.kubevirt.io). When set, the controller
	// also plays CDI's DataVolume controller and KubeVirt's handling of
	// spec.dataVolumeTemplates (see datavolume.go); nil leaves DataVolumes
	// alone and starts VMs without waiting for them. Use
	// containerizeddataimporter.NewForConfig on a real API server, or the
	// third clientset of NewFakeClientsWithCDI.
	CDI cdiclient.Interface
	// DataVolumeDelay is how long a DataVolume stays ImportInProgress or
	// CloneInProgress (reporting its progress) before it Succeeded. Zero
	// completes it at once, still passing every phase.
	DataVolumeDelay time.Duration
	// MigrationDelay is how long a VirtualMachineInstanceMigration stays
	// Running (the guest's memory being copied) before the guest runs on
	// the target. Zero completes it at once, still passing every phase.
	MigrationDelay time.Duration
	// SnapshotDelay is how long a VirtualMachineSnapshot stays InProgress.
	SnapshotDelay time.Duration
	// AgentDelay is how long a guest with a simulated agent (see
	// AnnotationAgent) runs before virt-handler's first poll of the agent
	// reports it: the AgentConnected condition, status.guestOSInfo and the
	// guest's interface names and addresses. Zero reports it at once.
	AgentDelay time.Duration
	// SnapshotUnsupported simulates storage without a VolumeSnapshotClass
	// (or KubeVirt without the Snapshot feature gate working for the VM's
	// disks): VirtualMachineSnapshots fail (and with them clones), and the
	// VMs report their volumes as not snapshot-capable in
	// status.volumeSnapshotStatuses.
	SnapshotUnsupported bool
	// Dynamic, when set, reads the VolumeSnapshotClasses
	// (snapshot.storage.k8s.io/v1), as KubeVirt's snapshot controller
	// does: a volume whose StorageClass's provisioner has none is not
	// snapshot-capable (status.volumeSnapshotStatuses says "No
	// VolumeSnapshotClass"), and a VirtualMachineSnapshot succeeds without
	// it (status.snapshotVolumes.excludedVolumes, no volume backup), so a
	// restore leaves it as it is. Nil: every StorageClass has one.
	Dynamic dynamic.Interface
	// DisableSnapshots turns off the VirtualMachineSnapshot, -Restore and
	// -Clone controllers, for API servers without the snapshot.kubevirt.io
	// and clone.kubevirt.io CRDs (their informers would never sync).
	DisableSnapshots bool
	// NetworkAttachmentDefinition tells whether the Multus network
	// namespace/name exists; a VMI on one that does not stays Pending
	// with virt-controller's FailedCreate, as KubeVirt leaves it. Nil:
	// every Multus network exists.
	NetworkAttachmentDefinition func(namespace, name string) bool
}

// workers is the number of concurrent reconcilers. Keys are VM/VMI names, so
// one object is never reconciled twice at the same time.
const workers = 2

// Controller stands in for KubeVirt's virt-controller (VM and VMI
// controllers) and virt-handler. It watches VirtualMachines and
// VirtualMachineInstances in all namespaces and Nodes, and reconciles each
// namespace/name key (a VM and its VMI share the name):
//
//   - VMs: run strategies (Always, RerunOnFailure, Manual, Halted, Once, and
//     the deprecated spec.running), status.stateChangeRequests from the
//     start/stop/restart subresources, the controller finalizer, the
//     persisted firmware UUID and the VM status (printableStatus, ready,
//     created, runStrategy, conditions);
//   - VMIs: the phase lifecycle with node placement, the guest-visible
//     status of a running VMI, graceful shutdown on deletion and garbage
//     collection of VMIs whose VM is gone.
//
// Further reconcilers share its queue (reconcilers.go):
//
//   - with Options.CDI, CDI's DataVolume controller and the VM controller's
//     handling of spec.dataVolumeTemplates (datavolume.go): VMs wait in
//     Provisioning until their DataVolumes have Succeeded;
//   - unless Options.DisableSnapshots, KubeVirt's VirtualMachineSnapshot,
//     VirtualMachineRestore and VirtualMachineClone controllers
//     (snapshot.go, restore.go, clone.go) and VM
//     status.volumeSnapshotStatuses;
//   - always, KubeVirt's migration controller with the virt-handlers'
//     part of a live migration (migration.go);
//   - with either, PVC housekeeping that kube-controller-manager would do:
//     garbage collection of PVCs whose controlling DataVolume or VM is gone
//     and the pvc-protection finalizer.
//
// It only talks to the API through the clientsets, so it runs the same over a
// real API server (with the KubeVirt and CDI CRDs installed) and over
// NewFakeClients / NewFakeClientsWithCDI.
type Controller struct {
	kv   kubevirt.Interface
	k8s  kubernetes.Interface
	opts Options
	log  *zap.Logger

	vmInformer   cache.SharedIndexInformer
	vmiInformer  cache.SharedIndexInformer
	nodeInformer cache.SharedIndexInformer
	dependencies []vmDependency
	// ext holds the reconcilers beyond VMs and VMIs (DataVolumes and PVCs,
	// snapshots, restores, clones); see reconcilers.go.
	ext extensions

	queue   workqueue.TypedRateLimitingInterface[string]
	started atomic.Bool

	mu       sync.Mutex
	seen     firstSight           // first sight of a VMI (StartDelay base)
	stopping firstSight           // first sight of a VMI's deletion (StopDelay base)
	assumed  map[types.UID]string // node placements not yet seen in the cache
	snapCaps snapshotCapabilities // which StorageClasses can snapshot (Options.Dynamic)
}

// NewController creates a controller. Nothing runs until Run is called.
func NewController(kv kubevirt.Interface, k8s kubernetes.Interface, opts Options) *Controller {
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	c := &Controller{
		kv:           kv,
		k8s:          k8s,
		opts:         opts,
		log:          log.Named("kubevirtsim"),
		vmInformer:   NewVirtualMachineInformer(kv, metav1.NamespaceAll, opts.Resync),
		vmiInformer:  NewVirtualMachineInstanceInformer(kv, metav1.NamespaceAll, opts.Resync),
		nodeInformer: coreinformers.NewNodeInformer(k8s, opts.Resync, cache.Indexers{}),
		assumed:      map[types.UID]string{},
	}
	c.initExtensions()
	return c
}

// Run runs the informers and reconcilers until ctx is done, then stops them
// and waits for all of its goroutines. It returns nil after a normal
// shutdown and an error when it was already started or the caches could not
// sync. A Controller runs at most once.
func (c *Controller) Run(ctx context.Context) error {
	if !c.started.CompareAndSwap(false, true) {
		return errors.New("kubevirtsim: controller already started")
	}
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{})

	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	handlers := map[cache.SharedIndexInformer]cache.ResourceEventHandler{
		c.vmInformer: cache.ResourceEventHandlerFuncs{
			AddFunc:    enqueue,
			UpdateFunc: func(_, obj any) { enqueue(obj) },
			DeleteFunc: enqueue,
		},
		c.vmiInformer: cache.ResourceEventHandlerFuncs{
			AddFunc:    enqueue,
			UpdateFunc: func(_, obj any) { enqueue(obj) },
			DeleteFunc: func(obj any) {
				if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = tomb.Obj
				}
				if vmi, ok := obj.(*virtv1.VirtualMachineInstance); ok {
					c.forget(vmi.UID)
				}
				enqueue(obj)
			},
		},
		c.nodeInformer: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { c.enqueueUnscheduled() },
			UpdateFunc: func(any, any) { c.enqueueUnscheduled() },
			DeleteFunc: func(any) { c.enqueueUnscheduled() },
		},
	}
	informers := []cache.SharedIndexInformer{c.vmInformer, c.vmiInformer, c.nodeInformer}
	informers = append(informers, c.ext.informers...)
	for inf, h := range handlers {
		if _, err := inf.AddEventHandler(h); err != nil {
			c.queue.ShutDown()
			return fmt.Errorf("kubevirtsim: add event handler: %w", err)
		}
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	defer c.queue.ShutDown()
	synced := make([]cache.InformerSynced, 0, len(informers))
	for _, inf := range informers {
		wg.Go(func() { inf.RunWithContext(ctx) })
		synced = append(synced, inf.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("kubevirtsim: informer caches did not sync")
	}
	c.log.Info("controller started", zap.Duration("startDelay", c.opts.StartDelay), zap.Duration("stopDelay", c.opts.StopDelay))
	for range workers {
		wg.Go(func() {
			for c.processNext(ctx) {
			}
		})
	}
	<-ctx.Done()
	c.log.Info("controller stopping")
	return nil
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)
	after, err := c.sync(ctx, key)
	switch {
	case ctx.Err() != nil:
	case err != nil:
		if apierrors.IsConflict(err) {
			c.log.Debug("reconcile conflict, retrying", zap.String("key", key), zap.Error(err))
		} else {
			c.log.Warn("reconcile failed", zap.String("key", key), zap.Error(err))
		}
		c.queue.AddRateLimited(key)
	default:
		c.queue.Forget(key)
		if after > 0 {
			c.queue.AddAfter(key, after)
		}
	}
	return true
}

// sync reconciles the VM and the VMI stored under key, or hands a key of
// another kind (see reconcilers.go) to its reconciler.
func (c *Controller) sync(ctx context.Context, key string) (time.Duration, error) {
	if fn, rest, ok := c.ext.syncerFor(key); ok {
		return fn(ctx, rest)
	}
	var vm *virtv1.VirtualMachine
	if obj, ok, err := c.vmInformer.GetStore().GetByKey(key); err != nil {
		return 0, err
	} else if ok {
		vm = obj.(*virtv1.VirtualMachine).DeepCopy()
	}
	var vmi *virtv1.VirtualMachineInstance
	if obj, ok, err := c.vmiInformer.GetStore().GetByKey(key); err != nil {
		return 0, err
	} else if ok {
		vmi = obj.(*virtv1.VirtualMachineInstance).DeepCopy()
	}

	var after time.Duration
	if vmi != nil {
		var err error
		if vmi, after, err = c.syncVMI(ctx, vm, vmi); err != nil {
			return 0, err
		}
	}
	if vm != nil {
		var (
			vmAfter time.Duration
			err     error
		)
		vmi, vmAfter, err = c.syncVM(ctx, vm, vmi)
		if err != nil {
			return 0, err
		}
		after = minPositive(after, vmAfter)
	}
	// The final state is on the VM now: let go of the VMI.
	if _, err := c.releaseVMI(ctx, vmi); err != nil && !apierrors.IsNotFound(err) {
		return 0, err
	}
	return after, nil
}

// enqueueUnscheduled requeues VMIs waiting for a node.
func (c *Controller) enqueueUnscheduled() {
	for _, obj := range c.vmiInformer.GetStore().List() {
		vmi, ok := obj.(*virtv1.VirtualMachineInstance)
		if ok && vmi.Status.NodeName == "" && !vmi.IsFinal() {
			if key, err := cache.MetaNamespaceKeyFunc(vmi); err == nil {
				c.queue.Add(key)
			}
		}
	}
}

// NodeCached reports whether the controller's node cache holds the node
// as cond wants it. A test that cordons or labels a node waits on it before
// asking for a placement, since the controller places from that cache as
// the scheduler does.
func (c *Controller) NodeCached(name string, cond func(*corev1.Node) bool) bool {
	obj, ok, err := c.nodeInformer.GetStore().GetByKey(name)
	if err != nil || !ok {
		return false
	}
	n, isNode := obj.(*corev1.Node)
	return isNode && cond(n)
}

// GuestShutdown simulates a shutdown from inside the guest (e.g. poweroff):
// the running VMI becomes Succeeded. The run strategy then decides what
// happens (Always restarts it, Manual keeps it stopped, RerunOnFailure stops
// it). It does not need the controller to be running.
func (c *Controller) GuestShutdown(ctx context.Context, ns, name string) error {
	return c.guestExit(ctx, ns, name, virtv1.Succeeded)
}

// GuestCrash simulates a guest crash: the running VMI becomes Failed
// (Always and RerunOnFailure restart it).
func (c *Controller) GuestCrash(ctx context.Context, ns, name string) error {
	return c.guestExit(ctx, ns, name, virtv1.Failed)
}

func (c *Controller) guestExit(ctx context.Context, ns, name string, phase virtv1.VirtualMachineInstancePhase) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		vmi, err := c.kv.KubevirtV1().VirtualMachineInstances(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			if apierrors.IsNotFound(err) {
				return apierrors.NewNotFound(vmiGroupResource, name)
			}
			return err
		}
		if vmi.Status.Phase != virtv1.Running {
			return apierrors.NewConflict(vmiGroupResource, name, errors.New(msgVMINotRunning))
		}
		if phase == virtv1.Succeeded && isPaused(vmi) {
			return apierrors.NewConflict(vmiGroupResource, name, errors.New(msgVMIPaused))
		}
		markFinal(vmi, phase, time.Now())
		_, err = c.kv.KubevirtV1().VirtualMachineInstances(ns).Update(ctx, vmi, metav1.UpdateOptions{})
		return err
	})
}

// writeStatusIfChanged writes obj's status through update unless status
// equals origStatus (semantically); an object deleted meanwhile is no error.
func writeStatusIfChanged[T any](ctx context.Context, origStatus, status any, obj T, update func(context.Context, T, metav1.UpdateOptions) (T, error)) error {
	if equality.Semantic.DeepEqual(origStatus, status) {
		return nil
	}
	_, err := update(ctx, obj, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func minPositive(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	case a < b:
		return a
	}
	return b
}

func zapKey(obj metav1.Object) zap.Field {
	return zap.String("key", obj.GetNamespace()+"/"+obj.GetName())
}
