// Package kube is the plugin's access to one Kubernetes cluster running
// KubeVirt: informer caches for every read, typed clients for writes, and
// the lifecycle subresources (with a fallback when virt-api is absent).
// Nothing in this package knows about HTTP or Proxmox wire formats.
package kube

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiclient "kubevirt.io/client-go/containerizeddataimporter"
	"kubevirt.io/client-go/kubevirt"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// Options configures a Cluster.
type Options struct {
	// Namespaces limits what is served; empty means all namespaces.
	Namespaces []string
	// TaskNamespace holds the task records (ConfigMaps), so that any replica
	// can answer for a task and tasks survive restarts.
	TaskNamespace string
	// Resync is the informers' resync period; 0 disables resyncs.
	Resync time.Duration
	// AssumeKubeVirtAPIs skips probing for optional KubeVirt APIs
	// (snapshots): simulated clusters have them all.
	AssumeKubeVirtAPIs bool
	// SyncTimeout bounds the initial cache sync in Start.
	SyncTimeout time.Duration
	Logger      *zap.Logger
	// MetricsInterval is how often node and guest usage is polled
	// (default 15 s). Metrics, when set, is the source; otherwise a real
	// cluster reads metrics.k8s.io and a simulated one polls nothing.
	MetricsInterval time.Duration
	Metrics         MetricsSource
	// KubeVirtMetrics, when set, is polled every KubeVirtMetricsInterval
	// (default 15 s) next to Metrics; the fields its readings carry (see
	// Usage.Has) take precedence over those of Metrics.
	KubeVirtMetrics         MetricsSource
	KubeVirtMetricsInterval time.Duration
	// CDI is the plugin's own CDI client (DataVolumes); nil without CDI.
	// Connect builds it from the kubeconfig; callers' clients are built
	// from the rest config (see as).
	CDI cdiclient.Interface
	// UploadProxy is where uploads go (CDI's cdi-uploadproxy); nil: found
	// in the cluster when first needed (see Cluster.uploadProxy).
	UploadProxy *UploadProxyConfig
}

// Cluster is a cached, read-mostly view of a KubeVirt cluster.
type Cluster struct {
	// own are the plugin's own clients (its service account or kubeconfig
	// user): for the informers, the records it keeps (tasks, vmid and
	// console claims), API discovery and the checks it makes on the
	// caller's behalf. Whatever a request asks of the cluster goes through
	// as(ctx) instead, so that impersonation cannot be bypassed by a slip.
	own clients

	opts   Options
	logger *zap.Logger

	vms, vmis, nodes, storageClasses, namespaces, tasks, pvcs *store
	// freshLookups is GuestFresh's budget of calls to kube-apiserver.
	freshLookups *rate.Limiter
	// poolRecords are the ConfigMaps holding pools (task namespace).
	poolRecords *store
	// vmidClaims are the vmid claims (ConfigMaps, task namespace), for
	// /cluster/nextid: it must not offer an id a create holds, and must
	// not wait on the apiserver to know.
	vmidClaims *store
	// snapshots and restores are nil when the cluster lacks the API;
	// migrations when the plugin may not list them.
	snapshots, restores, migrations *store
	// dataVolumes is nil without CDI (no client, or the API is not served).
	dataVolumes *store

	vmidGen, nodeGen atomic.Uint64
	// guestGen counts changes to what Guests shows (VMs, their instances,
	// the node table, the pools); metricsGen counts usage readings published.
	guestGen, metricsGen atomic.Uint64
	// claimGen counts changes to the claims; diskUse is the space the disk
	// claims take per class (and the vmids with disk claims), as of a
	// claimGen.
	claimGen atomic.Uint64
	diskUse  atomic.Pointer[diskUse]
	mu       sync.Mutex // serialises table rebuilds
	vmidTab  atomic.Pointer[vmidTable]
	nextIDs  idHolds // ids /cluster/nextid handed out lately
	nodeTab  atomic.Pointer[nodeTable]

	optional []*store
	metrics  atomic.Pointer[metricsPoller]
	// kvMetrics polls Options.KubeVirtMetrics.
	kvMetrics atomic.Pointer[metricsPoller]

	power     *power
	health    *health
	idClients identityClients
	dialer    atomic.Pointer[consoleDialer] // consoles without a rest config
	upload    uploadProxy
	access    accessCache
	cancel    context.CancelFunc
	life      context.Context // done once Stop is called
	done      chan struct{}
	onStop    func() // ends what Simulate started next to the cluster
	memo      sync.Map
	stopOnce  sync.Once
	Tasks     *Tasks
	// ConsoleClaims makes console tickets single-use across replicas.
	ConsoleClaims *ConsoleClaims
}

// New builds a Cluster; call Start before use.
func New(kube kubernetes.Interface, kv kubevirt.Interface, cfg *rest.Config, opts Options) *Cluster {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.TaskNamespace == "" {
		opts.TaskNamespace = "default"
		if len(opts.Namespaces) > 0 {
			opts.TaskNamespace = opts.Namespaces[0]
		}
	}
	if opts.SyncTimeout == 0 {
		opts.SyncTimeout = 60 * time.Second
	}
	c := &Cluster{own: clients{kube: kube, kv: kv, cdi: opts.CDI, cfg: cfg}, opts: opts, logger: opts.Logger, freshLookups: newFreshLimiter()}
	c.power = newPower(c)
	var probe func(context.Context) error
	if cfg != nil {
		var err error
		if probe, err = readyzProbe(cfg); err != nil {
			opts.Logger.Warn("no kubernetes health probe", zap.Error(err))
		}
	}
	c.health = newHealth(probe, opts.Logger)
	c.Tasks = newTasks(c)
	c.ConsoleClaims = NewConsoleClaims(kube, opts.TaskNamespace, opts.Logger)
	return c
}

// Start runs the informers and waits for the first sync.
func (c *Cluster) Start(ctx context.Context) error {
	runCtx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.life = runCtx
	runCtx = withHealth(runCtx, c.health)
	go c.health.run(runCtx)
	c.done = make(chan struct{})
	ns := c.listScopes()
	// Tasks wait on VMs and their instances by the VM's namespace/name.
	vmTasks := c.Tasks.touchBy(ownKey)
	// The vmid table depends only on which VMs exist and their vmid
	// labels; status churn must not force a rebuild.
	vmChanged := func(old, new any) {
		o, _ := old.(*packedVM)
		n, _ := new.(*packedVM)
		if o == nil || n == nil || o.label(translate.LabelVMID) != n.label(translate.LabelVMID) {
			c.vmidGen.Add(1)
		}
		c.guestGen.Add(1)
		vmTasks(old, new)
	}
	vmiChanged := func(old, new any) {
		c.guestGen.Add(1)
		vmTasks(old, new)
	}
	// Which pool a guest shows depends on the pools that exist (records,
	// and earlier versions' namespaces).
	poolsChanged := func(old, new any) { c.guestGen.Add(1) }
	nodeChanged := func(old, new any) {
		o, _ := old.(*corev1.Node)
		n, _ := new.(*corev1.Node)
		if o == nil || n == nil || nodeReady(o) != nodeReady(n) {
			c.nodeGen.Add(1)
			c.guestGen.Add(1)
		}
	}

	// The informers read as the plugin: one cache serves every caller, and
	// what each caller may see is decided per object (access.go).
	c.vms = newStore(runCtx, ns, &kubevirtv1.VirtualMachine{}, listWatchFuncs{
		list: func(ctx context.Context, ns string, o metav1.ListOptions) (runtime.Object, error) {
			return listJSON(ctx, c.own.kv.KubevirtV1().RESTClient(), "virtualmachines", ns, o, c.own.kv.KubevirtV1().VirtualMachines(ns).List)
		},
		watch: func(ctx context.Context, ns string, o metav1.ListOptions) (watch.Interface, error) {
			return c.own.kv.KubevirtV1().VirtualMachines(ns).Watch(ctx, o)
		},
	}, c.opts.Resync, nil, packingVMs(vmCodec()), vmChanged)
	c.vmis = newStore(runCtx, ns, &kubevirtv1.VirtualMachineInstance{}, listWatchFuncs{
		list: func(ctx context.Context, ns string, o metav1.ListOptions) (runtime.Object, error) {
			return listJSON(ctx, c.own.kv.KubevirtV1().RESTClient(), "virtualmachineinstances", ns, o, c.own.kv.KubevirtV1().VirtualMachineInstances(ns).List)
		},
		watch: func(ctx context.Context, ns string, o metav1.ListOptions) (watch.Interface, error) {
			return c.own.kv.KubevirtV1().VirtualMachineInstances(ns).Watch(ctx, o)
		},
	}, c.opts.Resync, nil, packingVMIs(&specCodec{}), vmiChanged)
	c.nodes = newStore(runCtx, nil, &corev1.Node{}, listWatchFuncs{
		list: func(ctx context.Context, _ string, o metav1.ListOptions) (runtime.Object, error) {
			return c.own.kube.CoreV1().Nodes().List(ctx, o)
		},
		watch: func(ctx context.Context, _ string, o metav1.ListOptions) (watch.Interface, error) {
			return c.own.kube.CoreV1().Nodes().Watch(ctx, o)
		},
	}, c.opts.Resync, nil, stripNode, nodeChanged)
	c.storageClasses = newStore(runCtx, nil, &storagev1.StorageClass{}, listWatchFuncs{
		list: func(ctx context.Context, _ string, o metav1.ListOptions) (runtime.Object, error) {
			return c.own.kube.StorageV1().StorageClasses().List(ctx, o)
		},
		watch: func(ctx context.Context, _ string, o metav1.ListOptions) (watch.Interface, error) {
			return c.own.kube.StorageV1().StorageClasses().Watch(ctx, o)
		},
	}, c.opts.Resync, nil, stripMeta, nil)
	if c.ServesAll() {
		c.namespaces = newStore(runCtx, nil, &corev1.Namespace{}, listWatchFuncs{
			list: func(ctx context.Context, _ string, o metav1.ListOptions) (runtime.Object, error) {
				return c.own.kube.CoreV1().Namespaces().List(ctx, o)
			},
			watch: func(ctx context.Context, _ string, o metav1.ListOptions) (watch.Interface, error) {
				return c.own.kube.CoreV1().Namespaces().Watch(ctx, o)
			},
		}, c.opts.Resync, nil, stripMeta, poolsChanged)
	}
	c.tasks = newStore(runCtx, []string{c.opts.TaskNamespace}, &corev1.ConfigMap{}, c.labelledConfigMaps(taskLabel), c.opts.Resync, cache.Indexers{taskStatusIndex: taskStatusIndexFunc, taskVMIndex: taskVMIndexFunc}, stripMeta, nil)
	c.poolRecords = newStore(runCtx, []string{c.opts.TaskNamespace}, &corev1.ConfigMap{}, c.labelledConfigMaps(translate.LabelPoolRecord), c.opts.Resync, nil, stripMeta, poolsChanged)

	c.vmidClaims = newStore(runCtx, []string{c.opts.TaskNamespace}, &corev1.ConfigMap{}, c.labelledConfigMaps(claimLabel), c.opts.Resync, nil, stripMeta, nil)

	c.pvcs = newStore(runCtx, ns, &corev1.PersistentVolumeClaim{}, listWatchFuncs{
		list: func(ctx context.Context, ns string, o metav1.ListOptions) (runtime.Object, error) {
			return c.own.kube.CoreV1().PersistentVolumeClaims(ns).List(ctx, o)
		},
		watch: func(ctx context.Context, ns string, o metav1.ListOptions) (watch.Interface, error) {
			return c.own.kube.CoreV1().PersistentVolumeClaims(ns).Watch(ctx, o)
		},
	}, c.opts.Resync, cache.Indexers{pvcStorageIndex: pvcStorageIndexFunc, pvcFileIndex: pvcFileIndexFunc}, packingClaims, c.claimChanged())
	c.optional = c.startOptionalStores(ctx, runCtx)
	stores := c.allStores()
	for _, s := range stores {
		s.run(runCtx)
	}
	syncCtx, cancelSync := context.WithTimeout(ctx, c.opts.SyncTimeout)
	defer cancelSync()
	for _, s := range stores {
		for _, inf := range s.byNS {
			if !cache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced) {
				cancel()
				close(c.done) // no task worker runs; Stop must not wait for one
				return fmt.Errorf("waiting for the cluster caches to sync: %w", errors.Join(syncCtx.Err(), errors.New("informers did not sync (check the kubeconfig and RBAC)")))
			}
		}
	}
	c.startMetrics(runCtx)
	go func() {
		defer close(c.done)
		c.Tasks.run(runCtx)
	}()
	return nil
}

// startOptionalStores probes for the APIs a cluster may lack (snapshots,
// CDI, migrations the plugin may list, virt-api's lifecycle subresources)
// and returns the stores of those it has, not yet running. The probes are
// round trips that hold up the start: they go out side by side. The
// stores run only after, because the other stores' handlers read these
// fields (claimKeys reads dataVolumes).
func (c *Cluster) startOptionalStores(ctx, runCtx context.Context) []*store {
	var snaps, cdi []*store
	var wg sync.WaitGroup
	wg.Go(func() { snaps = c.startSnapshotStores(runCtx) })
	wg.Go(func() { cdi = c.startCDIStore(runCtx) })
	wg.Go(func() { c.migrations = c.startMigrationStore(runCtx) })
	wg.Go(func() { c.power.detect(ctx) })
	wg.Wait()
	out := append(snaps, cdi...)
	if c.migrations != nil {
		out = append(out, c.migrations)
	}
	return out
}

// Stop ends the informers and task workers (and a simulator).
func (c *Cluster) Stop() {
	if c.cancel != nil {
		c.cancel()
		<-c.done
	}
	if c.onStop != nil {
		c.stopOnce.Do(c.onStop)
	}
}

// Synced tells whether every cache is in sync with the apiserver.
func (c *Cluster) Synced() bool {
	for _, s := range c.allStores() {
		if !s.hasSynced() {
			return false
		}
	}
	return true
}

func (c *Cluster) allStores() []*store {
	out := []*store{c.vms, c.vmis, c.nodes, c.storageClasses, c.tasks, c.pvcs, c.poolRecords, c.vmidClaims}
	if c.namespaces != nil {
		out = append(out, c.namespaces)
	}
	return append(out, c.optional...)
}

// Memo returns what is kept under key, made by mk on first use. It is for
// views callers derive from the caches (the API's encoded rows), which
// then live as long as the caches they follow; key should be a type of
// the caller's own, as with context values.
func (c *Cluster) Memo(key any, mk func() any) any {
	if v, ok := c.memo.Load(key); ok {
		return v
	}
	v, _ := c.memo.LoadOrStore(key, mk())
	return v
}

// Logger returns the cluster's logger.
func (c *Cluster) Logger() *zap.Logger { return c.logger }

// TaskNamespace is where task records are kept.
func (c *Cluster) TaskNamespace() string { return c.opts.TaskNamespace }

// Namespaces lists the namespaces served.
func (c *Cluster) Namespaces() []string {
	if len(c.opts.Namespaces) > 0 {
		return append([]string(nil), c.opts.Namespaces...)
	}
	var out []string
	for _, o := range c.namespaces.list() {
		n := o.(*corev1.Namespace)
		if terminating(n) {
			continue
		}
		out = append(out, n.Name)
	}
	sort.Strings(out)
	return out
}

// listScopes are the namespaces the plugin lists and watches in: the
// served ones when configured, else all of them in one cluster-wide call.
func (c *Cluster) listScopes() []string {
	if len(c.opts.Namespaces) > 0 {
		return c.opts.Namespaces
	}
	return []string{metav1.NamespaceAll}
}

// Serves tells whether namespace ns is served. When every namespace is,
// a namespace being deleted no longer is (nor is it listed by Namespaces).
func (c *Cluster) Serves(ns string) bool {
	if len(c.opts.Namespaces) == 0 {
		n := c.namespace(ns)
		return n != nil && !terminating(n)
	}
	for _, n := range c.opts.Namespaces {
		if n == ns {
			return true
		}
	}
	return false
}

// terminating tells whether a namespace is being deleted.
func terminating(n *corev1.Namespace) bool {
	return n.Status.Phase == corev1.NamespaceTerminating || n.DeletionTimestamp != nil
}

// StorageClasses lists the cached StorageClasses.
func (c *Cluster) StorageClasses() []*storagev1.StorageClass {
	var out []*storagev1.StorageClass
	for _, o := range c.storageClasses.list() {
		out = append(out, o.(*storagev1.StorageClass))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// The transforms below decide what the informer caches hold: what the
// API reads, not what the cluster stores. No write is ever built from a
// cached object as a whole: VMs are changed by JSON patches of the parts
// the API owns (ReplaceVM: the template spec, the DataVolume templates,
// its own labels and annotations, guarded by resourceVersion), claims and
// DataVolumes by merge patches, instances never. So a VM keeps its whole
// spec (ReplaceVM writes back an edited copy of the cached template spec,
// and clones copy it), while metadata and statuses lose what no reader
// reads. A map the cluster had stays non-nil, even emptied: ReplaceVM
// creates the annotation and label maps when the cached VM has none, which
// would replace the cluster's.

// stripVM keeps of a VM's annotations only the plugin's own (the stored
// PVE config and friends; KubeVirt's bookkeeping is never read) and drops
// its finalizers. Its spec is packed (packVM): the maps in it are not
// shared (intern.go), which would only fill the intern table with the
// template labels of every VM (each names its vmid).
func stripVM(obj any) (any, error) {
	if vm, ok := obj.(*kubevirtv1.VirtualMachine); ok {
		vm.Annotations = keepOwn(vm.Annotations)
		vm.Finalizers = nil
	}
	return stripMeta(obj)
}

// internDataVolumeSpec shares the maps of a DataVolume's storage request.
func internDataVolumeSpec(s *cdiv1.DataVolumeSpec) {
	if s.Storage != nil {
		internVolumeRequirements(&s.Storage.Resources)
	}
	if s.PVC != nil {
		internVolumeRequirements(&s.PVC.Resources)
	}
}

// stripVMI keeps of an instance what the API reads: its spec but for its
// volumes, affinity and tolerations, and its status but for the volume,
// boot and pod bookkeeping; of its migration state the uid and failure
// reason (migrationFailure).
func stripVMI(obj any) (any, error) {
	if vmi, ok := obj.(*kubevirtv1.VirtualMachineInstance); ok {
		// The API reads only domain sizing and status; volumes and the rest of
		// the domain are dead weight in the cache.
		vmi.Spec.Volumes = nil
		vmi.Spec.Affinity = nil
		vmi.Spec.Tolerations = nil
		vmi.Status.VolumeStatus = nil
		vmi.Status.KernelBootStatus = nil
		if m := vmi.Status.MigrationState; m != nil {
			vmi.Status.MigrationState = &kubevirtv1.VirtualMachineInstanceMigrationState{
				MigrationUID: m.MigrationUID, FailureReason: m.FailureReason,
				Completed: m.Completed, Failed: m.Failed,
			}
		}
		// Bookkeeping of virt-controller and virt-handler no answer shows.
		vmi.Status.ActivePods = nil
		vmi.Status.LauncherContainerImageVersion = ""
		vmi.Status.QOSClass = nil
		vmi.Status.MigrationMethod = ""
		vmi.Status.MigrationTransport = ""
		vmi.Status.SelinuxContext = ""
		vmi.Status.VirtualMachineRevisionName = ""
		for i := range vmi.Status.Interfaces {
			vmi.Status.Interfaces[i].InfoSource = ""
			vmi.Status.Interfaces[i].PodInterfaceName = ""
		}
		// Of its metadata an instance's owner is read (is it the VM's)
		// and one label of KubeVirt's (translate.AutomaticMigration); its
		// annotations are alike on every instance (shared).
		vmi.Labels = internStrings(instanceLabels(vmi.Labels))
		vmi.Annotations = internStrings(vmi.Annotations)
		vmi.Finalizers = nil
	}
	return stripMeta(obj)
}

// stripStorage keeps of a claim's or DataVolume's labels and annotations
// only the plugin's own (and, on a claim, KubeVirt's naming the VM whose
// EFI/TPM state it holds): CDI and the volume controllers leave a dozen on
// each claim (binding, populator progress, provisioner), none read here.
// Of a claim's spec and status it keeps what sizes, places and binds it;
// of a DataVolume's spec its source and storage. Both are only ever
// merge-patched.
func stripStorage(obj any) (any, error) {
	var stateOwner string
	if pvc, ok := obj.(*corev1.PersistentVolumeClaim); ok {
		stateOwner = pvc.Labels[translate.StateClaimLabel]
	}
	if m, ok := obj.(metav1.Object); ok {
		m.SetLabels(ownKeys(m.GetLabels()))
		m.SetAnnotations(ownKeys(m.GetAnnotations()))
		m.SetFinalizers(nil)
	}
	switch o := obj.(type) {
	case *corev1.PersistentVolumeClaim:
		keepStateLabel(o, stateOwner)
		o.Spec.VolumeName = ""
		o.Spec.Selector = nil
		o.Spec.DataSource = nil
		o.Spec.DataSourceRef = nil
		o.Status = corev1.PersistentVolumeClaimStatus{Phase: o.Status.Phase, Capacity: internQuantities(o.Status.Capacity)}
		internVolumeRequirements(&o.Spec.Resources)
	case *cdiv1.DataVolume:
		// Of its spec the source is read (what a download or upload task
		// reports; of an http source the URL, not its headers or secrets)
		// and the storage (a disk's size net of CDI's overhead).
		src := o.Spec.Source
		if src != nil && src.HTTP != nil {
			src.HTTP = &cdiv1.DataVolumeSourceHTTP{URL: src.HTTP.URL}
		}
		o.Spec = cdiv1.DataVolumeSpec{Source: src, Storage: o.Spec.Storage, PVC: o.Spec.PVC}
		internDataVolumeSpec(&o.Spec)
		o.Status.ClaimName = ""
		for i := range o.Status.Conditions {
			o.Status.Conditions[i].LastHeartbeatTime = metav1.Time{}
		}
	}
	return stripMeta(obj)
}

// keepStateLabel puts back KubeVirt's label naming the VM whose EFI/TPM
// state pvc holds (translate.StateClaimOwner): listings show the claim as
// that VM's volumes.
func keepStateLabel(pvc *corev1.PersistentVolumeClaim, vm string) {
	if vm == "" {
		return
	}
	if pvc.Labels == nil {
		pvc.Labels = map[string]string{}
	}
	pvc.Labels[translate.StateClaimLabel] = vm
}

// instanceLabels are the labels of an instance the API reads: KubeVirt's
// outdated-launcher mark (its vmid and node labels repeat the VM's and
// the status's).
func instanceLabels(in map[string]string) map[string]string {
	if v, ok := in[kubevirtv1.OutdatedLauncherImageLabel]; ok {
		return map[string]string{kubevirtv1.OutdatedLauncherImageLabel: v}
	}
	return nil
}

// keepOwn is ownKeys for a map the cluster sets: nil stays nil, and a map
// left without keys stays a map.
func keepOwn(in map[string]string) map[string]string {
	if in == nil {
		return nil
	}
	if out := ownKeys(in); out != nil {
		return out
	}
	return map[string]string{}
}

// ownKeys is the part of a label or annotation map under the plugin's
// prefix, nil if none.
func ownKeys(in map[string]string) map[string]string {
	var out map[string]string
	for k, v := range in {
		if strings.HasPrefix(k, translate.KeyPrefix) {
			if out == nil {
				out = make(map[string]string, 1)
			}
			out[k] = v
		}
	}
	return out
}

func stripNode(obj any) (any, error) {
	if n, ok := obj.(*corev1.Node); ok {
		n.Status.Images = nil
		n.Status.VolumesAttached = nil
		n.Status.VolumesInUse = nil
	}
	return stripMeta(obj)
}

// StorageClassExists tells whether a StorageClass (a PVE storage) exists.
func (c *Cluster) StorageClassExists(name string) bool { return c.storageClasses.get("", name) != nil }

// labelledConfigMaps lists and watches the ConfigMaps that carry label=true:
// the plugin's own records (tasks, pools, vmid claims) among the others of
// its namespace.
func (c *Cluster) labelledConfigMaps(label string) listWatchFuncs {
	selector := label + "=true"
	return listWatchFuncs{
		list: func(ctx context.Context, ns string, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return c.own.kube.CoreV1().ConfigMaps(ns).List(ctx, o)
		},
		watch: func(ctx context.Context, ns string, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return c.own.kube.CoreV1().ConfigMaps(ns).Watch(ctx, o)
		},
	}
}
