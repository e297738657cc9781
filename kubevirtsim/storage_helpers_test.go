package kubevirtsim

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	clonev1 "kubevirt.io/api/clone/v1beta1"
	virtv1 "kubevirt.io/api/core/v1"
	snapshotv1 "kubevirt.io/api/snapshot/v1beta1"
	cdiclient "kubevirt.io/client-go/containerizeddataimporter"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// cdiEnv is env with a CDI clientset.
type cdiEnv struct {
	*env
	cdi cdiclient.Interface
}

// newCDIEnv returns fakes holding objs plus three ready nodes and the
// StorageClasses local-lvm (default) and ceph-rbd.
func newCDIEnv(t *testing.T, objs ...runtime.Object) *cdiEnv {
	t.Helper()
	objs = append([]runtime.Object{testNode("node-a"), testNode("node-b"), testNode("node-c"),
		testStorageClass("local-lvm", "topolvm.io", true), testStorageClass("ceph-rbd", "rbd.csi.ceph.com", false)}, objs...)
	k8s, kv, cdi := NewFakeClientsWithCDI(objs...)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &cdiEnv{env: &env{t: t, ctx: ctx, k8s: k8s, kv: kv, sub: &Subresources{KV: kv}}, cdi: cdi}
}

// run starts a controller with the CDI clientset (unless noCDI) and test
// delays; tweak may adjust it before it runs.
func (e *cdiEnv) run(opts Options, tweak ...func(*Controller)) *cdiEnv {
	e.t.Helper()
	if opts.CDI == nil {
		opts.CDI = e.cdi
	}
	if opts.StartDelay == 0 {
		opts.StartDelay = testStartDelay
	}
	if opts.StopDelay == 0 {
		opts.StopDelay = testStopDelay
	}
	e.c = NewController(e.kv, e.k8s, opts)
	for _, fn := range tweak {
		fn(e.c)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- e.c.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				e.t.Errorf("controller Run: %v", err)
			}
		case <-time.After(waitTimeout):
			e.t.Errorf("controller did not stop")
		}
	})
	return e
}

func testStorageClass(name, provisioner string, def bool) *storagev1.StorageClass {
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: provisioner}
	if def {
		sc.Annotations = map[string]string{annDefaultClass: "true"}
	}
	return sc
}

// testPVC is a bound PVC as a provisioner would leave it.
func testPVC(name, sc, size string) *corev1.PersistentVolumeClaim {
	fs := corev1.PersistentVolumeFilesystem
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
			StorageClassName: &sc,
			VolumeMode:       &fs,
			VolumeName:       "pv-" + name,
		},
		Status: corev1.PersistentVolumeClaimStatus{
			Phase:    corev1.ClaimBound,
			Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
		},
	}
}

// blankDVT is a dataVolumeTemplate for a blank disk.
func blankDVT(name, size string, sc *string) virtv1.DataVolumeTemplateSpec {
	return virtv1.DataVolumeTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"disk": name}},
		Spec: cdiv1.DataVolumeSpec{
			Source: &cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}},
			Storage: &cdiv1.StorageSpec{
				StorageClassName: sc,
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
			},
		},
	}
}

// withDataVolume adds a dataVolumeTemplate and a volume (disk) using it.
func withDataVolume(vm *virtv1.VirtualMachine, volume string, dvt virtv1.DataVolumeTemplateSpec) *virtv1.VirtualMachine {
	vm.Spec.DataVolumeTemplates = append(vm.Spec.DataVolumeTemplates, dvt)
	vm.Spec.Template.Spec.Volumes = append(vm.Spec.Template.Spec.Volumes, virtv1.Volume{Name: volume,
		VolumeSource: virtv1.VolumeSource{DataVolume: &virtv1.DataVolumeSource{Name: dvt.Name}}})
	return vm
}

// withPVC adds a volume using a PVC.
func withPVC(vm *virtv1.VirtualMachine, volume, claim string) *virtv1.VirtualMachine {
	vm.Spec.Template.Spec.Volumes = append(vm.Spec.Template.Spec.Volumes, virtv1.Volume{Name: volume,
		VolumeSource: virtv1.VolumeSource{PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{
			PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}})
	return vm
}

func (e *cdiEnv) getDV(name string) *cdiv1.DataVolume {
	e.t.Helper()
	dv, err := e.cdi.CdiV1beta1().DataVolumes(testNS).Get(e.ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		e.t.Fatalf("get DataVolume %s: %v", name, err)
	}
	return dv
}

func describeDV(dv *cdiv1.DataVolume) string {
	if dv == nil {
		return "no DataVolume"
	}
	var conds []string
	for _, c := range dv.Status.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s(%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	return fmt.Sprintf("phase=%s progress=%s claim=%s conds=%v", dv.Status.Phase, dv.Status.Progress, dv.Status.ClaimName, conds)
}

func (e *cdiEnv) waitDV(name, what string, cond func(*cdiv1.DataVolume) bool) *cdiv1.DataVolume {
	e.t.Helper()
	var dv *cdiv1.DataVolume
	eventually(e.t, "DataVolume "+name+": "+what, func() (bool, string) {
		dv = e.getDV(name)
		return dv != nil && cond(dv), describeDV(dv)
	})
	return dv
}

// syncedDV waits until the DataVolume controller has reconciled the
// DataVolume after every write made so far, and returns it as that
// reconcile left it: it overwrites status.progress with a value no
// controller writes and waits for the controller to put its own back (as
// SyncBarrier does for VMs).
func (e *cdiEnv) syncedDV(name string) *cdiv1.DataVolume {
	e.t.Helper()
	const barrier = cdiv1.DataVolumeProgress("SyncBarrier")
	dvs := e.cdi.CdiV1beta1().DataVolumes(testNS)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		dv, err := dvs.Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		dv.Status.Progress = barrier
		_, err = dvs.UpdateStatus(e.ctx, dv, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatalf("sync barrier on DataVolume %s: %v", name, err)
	}
	return e.waitDV(name, "a reconcile after the barrier", func(dv *cdiv1.DataVolume) bool { return dv.Status.Progress != barrier })
}

func (e *cdiEnv) waitDVPhase(name string, phase cdiv1.DataVolumePhase) *cdiv1.DataVolume {
	e.t.Helper()
	return e.waitDV(name, "phase "+string(phase), func(dv *cdiv1.DataVolume) bool { return dv.Status.Phase == phase })
}

func (e *env) getPVC(name string) *corev1.PersistentVolumeClaim {
	e.t.Helper()
	pvc, err := e.k8s.CoreV1().PersistentVolumeClaims(testNS).Get(e.ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		e.t.Fatalf("get PVC %s: %v", name, err)
	}
	return pvc
}

func (e *env) waitPVC(name string) *corev1.PersistentVolumeClaim {
	e.t.Helper()
	var pvc *corev1.PersistentVolumeClaim
	eventually(e.t, "PVC "+name+" bound", func() (bool, string) {
		pvc = e.getPVC(name)
		if pvc == nil {
			return false, "no PVC"
		}
		return pvc.Status.Phase == corev1.ClaimBound, string(pvc.Status.Phase)
	})
	return pvc
}

// waitGone waits until get reports the object absent.
func waitGone(t *testing.T, what string, exists func() bool) {
	t.Helper()
	eventually(t, what+" gone", func() (bool, string) { return !exists(), "still there" })
}

func (e *env) getSnapshot(name string) *snapshotv1.VirtualMachineSnapshot {
	e.t.Helper()
	s, err := e.kv.SnapshotV1beta1().VirtualMachineSnapshots(testNS).Get(e.ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		e.t.Fatalf("get snapshot %s: %v", name, err)
	}
	return s
}

func describeSnapshot(s *snapshotv1.VirtualMachineSnapshot) string {
	if s == nil {
		return "no snapshot"
	}
	if s.Status == nil {
		return fmt.Sprintf("finalizers=%v no status", s.Finalizers)
	}
	var conds []string
	for _, c := range s.Status.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s(%s)", c.Type, c.Status, c.Reason))
	}
	return fmt.Sprintf("phase=%s ready=%v conds=%v", s.Status.Phase, s.Status.ReadyToUse != nil && *s.Status.ReadyToUse, conds)
}

func (e *env) waitSnapshot(name string, phase snapshotv1.VirtualMachineSnapshotPhase) *snapshotv1.VirtualMachineSnapshot {
	e.t.Helper()
	var s *snapshotv1.VirtualMachineSnapshot
	eventually(e.t, "snapshot "+name+" "+string(phase), func() (bool, string) {
		s = e.getSnapshot(name)
		return s != nil && s.Status != nil && s.Status.Phase == phase, describeSnapshot(s)
	})
	return s
}

func (e *env) createSnapshot(name, vm string, mutate ...func(*snapshotv1.VirtualMachineSnapshot)) {
	e.t.Helper()
	s := &snapshotv1.VirtualMachineSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS},
		Spec: snapshotv1.VirtualMachineSnapshotSpec{Source: corev1.TypedLocalObjectReference{
			APIGroup: ptr("kubevirt.io"), Kind: "VirtualMachine", Name: vm}},
	}
	for _, m := range mutate {
		m(s)
	}
	if _, err := e.kv.SnapshotV1beta1().VirtualMachineSnapshots(testNS).Create(e.ctx, s, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create snapshot: %v", err)
	}
}

func (e *env) getContent(name string) *snapshotv1.VirtualMachineSnapshotContent {
	e.t.Helper()
	c, err := e.kv.SnapshotV1beta1().VirtualMachineSnapshotContents(testNS).Get(e.ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		e.t.Fatalf("get content %s: %v", name, err)
	}
	return c
}

func (e *env) createRestore(name, vm, snapshot string, mutate ...func(*snapshotv1.VirtualMachineRestore)) {
	e.t.Helper()
	r := &snapshotv1.VirtualMachineRestore{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS},
		Spec: snapshotv1.VirtualMachineRestoreSpec{
			Target:                     corev1.TypedLocalObjectReference{APIGroup: ptr("kubevirt.io"), Kind: "VirtualMachine", Name: vm},
			VirtualMachineSnapshotName: snapshot,
		},
	}
	for _, m := range mutate {
		m(r)
	}
	if _, err := e.kv.SnapshotV1beta1().VirtualMachineRestores(testNS).Create(e.ctx, r, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create restore: %v", err)
	}
}

func (e *env) getRestore(name string) *snapshotv1.VirtualMachineRestore {
	e.t.Helper()
	r, err := e.kv.SnapshotV1beta1().VirtualMachineRestores(testNS).Get(e.ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		e.t.Fatalf("get restore %s: %v", name, err)
	}
	return r
}

func describeRestore(r *snapshotv1.VirtualMachineRestore) string {
	if r == nil {
		return "no restore"
	}
	if r.Status == nil {
		return fmt.Sprintf("finalizers=%v no status", r.Finalizers)
	}
	var conds []string
	for _, c := range r.Status.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s(%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	return fmt.Sprintf("complete=%v conds=%v", r.Status.Complete != nil && *r.Status.Complete, conds)
}

func (e *env) waitRestore(name, what string, cond func(*snapshotv1.VirtualMachineRestore) bool) *snapshotv1.VirtualMachineRestore {
	e.t.Helper()
	var r *snapshotv1.VirtualMachineRestore
	eventually(e.t, "restore "+name+": "+what, func() (bool, string) {
		r = e.getRestore(name)
		return r != nil && r.Status != nil && cond(r), describeRestore(r)
	})
	return r
}

func restoreCond(r *snapshotv1.VirtualMachineRestore, t snapshotv1.ConditionType) snapshotv1.Condition {
	if r.Status == nil {
		return snapshotv1.Condition{}
	}
	if c := findSnapshotCondition(r.Status.Conditions, t); c != nil {
		return *c
	}
	return snapshotv1.Condition{}
}

func (e *env) createClone(name string, spec clonev1.VirtualMachineCloneSpec) {
	e.t.Helper()
	cl := &clonev1.VirtualMachineClone{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS}, Spec: spec}
	if _, err := e.kv.CloneV1beta1().VirtualMachineClones(testNS).Create(e.ctx, cl, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create clone: %v", err)
	}
}

func (e *env) getClone(name string) *clonev1.VirtualMachineClone {
	e.t.Helper()
	cl, err := e.kv.CloneV1beta1().VirtualMachineClones(testNS).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("get clone %s: %v", name, err)
	}
	return cl
}

func describeClone(cl *clonev1.VirtualMachineClone) string {
	var conds []string
	for _, c := range cl.Status.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s(%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	target := ""
	if cl.Status.TargetName != nil {
		target = *cl.Status.TargetName
	}
	return fmt.Sprintf("phase=%s target=%s conds=%v", cl.Status.Phase, target, conds)
}

func (e *env) waitClone(name string, phase clonev1.VirtualMachineClonePhase) *clonev1.VirtualMachineClone {
	e.t.Helper()
	var cl *clonev1.VirtualMachineClone
	eventually(e.t, "clone "+name+" "+string(phase), func() (bool, string) {
		cl = e.getClone(name)
		return cl.Status.Phase == phase, describeClone(cl)
	})
	return cl
}

// phaseRecorder records the distinct successive values an informer sees for
// each object (e.g. phases).
type phaseRecorder struct {
	mu   sync.Mutex
	seen map[string][]string
}

func recordPhases(t *testing.T, ctx context.Context, inf cache.SharedIndexInformer, value func(obj any) (string, string)) *phaseRecorder {
	t.Helper()
	r := &phaseRecorder{seen: map[string][]string{}}
	rec := func(obj any) {
		name, v := value(obj)
		r.mu.Lock()
		defer r.mu.Unlock()
		s := r.seen[name]
		if len(s) == 0 || s[len(s)-1] != v {
			r.seen[name] = append(s, v)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: rec, UpdateFunc: func(_, o any) { rec(o) }}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { inf.RunWithContext(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("recorder cache did not sync")
	}
	return r
}

func (r *phaseRecorder) values(name string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen[name]...)
}

// requireSequence asserts want appears in order (not necessarily adjacent).
func (r *phaseRecorder) requireSequence(t *testing.T, name string, want ...string) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s sequence %v", name, want), func() (bool, string) {
		got := r.values(name)
		i := 0
		for _, s := range got {
			if i < len(want) && s == want[i] {
				i++
			}
		}
		return i == len(want), fmt.Sprint(got)
	})
}
