package kubevirtsim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// Annotations, labels and finalizers CDI and Kubernetes use on DataVolumes,
// PVCs and StorageClasses.
const (
	// AnnotationPrePopulated on a DataVolume makes CDI adopt an existing
	// PVC of the same name instead of populating a new one.
	AnnotationPrePopulated = "cdi.kubevirt.io/storage.prePopulated"
	// AnnotationPopulatedFor on a PVC names the DataVolume that may adopt it
	// (KubeVirt's restore puts it on the PVCs it restores).
	AnnotationPopulatedFor = "cdi.kubevirt.io/storage.populatedFor"
	// AnnotationAllowClaimAdoption "true" on a DataVolume lets it adopt any
	// unowned PVC of its name.
	AnnotationAllowClaimAdoption = "cdi.kubevirt.io/allowClaimAdoption"

	annContentType      = "cdi.kubevirt.io/storage.contentType"
	annPodPhase         = "cdi.kubevirt.io/storage.pod.phase"
	annCreatedForDV     = "cdi.kubevirt.io/createdForDataVolume"
	annDefaultVirtClass = "storageclass.kubevirt.io/is-default-virt-class"
	annDefaultClass     = "storageclass.kubernetes.io/is-default-class"
	annBindCompleted    = "pv.kubernetes.io/bind-completed"
	annBoundByCtrl      = "pv.kubernetes.io/bound-by-controller"
	annProvisioner      = "volume.kubernetes.io/storage-provisioner"
	annBetaProvisioner  = "volume.beta.kubernetes.io/storage-provisioner"

	pvcProtectionFinalizer = "kubernetes.io/pvc-protection"
)

// DataVolume progress values and condition reasons as CDI v1.64 reports them.
const (
	progressNA   = cdiv1.DataVolumeProgress("N/A")
	progressDone = cdiv1.DataVolumeProgress("100.0%")

	reasonDVBound             = "Bound"
	reasonDVPending           = "Pending"
	reasonDVCompleted         = "Completed"
	reasonDVRunning           = "Pod is running"
	reasonDVError             = "Error"
	reasonCloneWithoutSource  = "CloneWithoutSource"
	reasonResourceExists      = "ErrResourceExists"
	reasonDataSourceNotFound  = "DataSourceNotFound"
	reasonSourceNotSimulated  = "SourceNotSimulated"
	msgMissingStorageSize     = "DataVolume has no storage size (spec.storage.resources.requests.storage or spec.pvc.resources.requests.storage)"
	dataVolumeProgressMinStep = 100 * time.Millisecond
)

var dataVolumeGVK = cdiv1.SchemeGroupVersion.WithKind("DataVolume")

// dataVolumes plays CDI's DataVolume controller and the part of KubeVirt's
// VM controller that handles spec.dataVolumeTemplates:
//
//   - the VM controller creates a missing DataVolume for every
//     dataVolumeTemplate (owned by the VM, labelled kubevirt.io/created-by)
//     and does not start a VMI before all DataVolumes the VM uses have
//     Succeeded; until then the VM is Provisioning (DataVolumeError when one
//     failed);
//   - a DataVolume goes Pending → ImportScheduled/CloneScheduled/
//     UploadScheduled → ImportInProgress/CloneInProgress (progress "N.NN%")
//     → Succeeded over Options.DataVolumeDelay, with a PVC of its name (owned
//     by the DataVolume; size, StorageClass, access and volume mode from
//     spec.storage or spec.pvc) that is Bound at once; the PVC carries the
//     DataVolume's labels and annotations, as CDI copies them. Sources: blank,
//     http, s3, gcs, registry, imageio, vddk (imports), pvc (clone; the
//     source PVC must exist, otherwise the DataVolume waits in
//     CloneScheduled with a CloneWithoutSource condition), sourceRef to a
//     DataSource with a pvc source (clone), upload (UploadReady with the
//     claim marked ready for UploadProxy, Succeeded once it took the data);
//     snapshot sources are not simulated;
//   - an http import from a host under ".invalid" (RFC 6761: it never
//     resolves) fails the way CDI reports an importer that cannot reach its
//     source: the DataVolume stays ImportInProgress with a Running condition
//     False, reason "Error", the importer's message, and a restart counted;
//   - an existing PVC of the DataVolume's name is adopted when the PVC is
//     annotated AnnotationPopulatedFor=<dv> or the DataVolume carries
//     AnnotationPrePopulated or AnnotationAllowClaimAdoption; otherwise the
//     DataVolume stays Pending with an ErrResourceExists condition;
//   - garbage collection (there is no kube-controller-manager in the test
//     cluster): DataVolumes controlled by a VM that is gone are deleted, and
//     PVCs controlled by a DataVolume or a VM that is gone;
//   - the pvc-protection controller: a deleted PVC keeps its
//     kubernetes.io/pvc-protection finalizer only while a VMI that is not
//     final uses it.
type dataVolumes struct{ c *Controller }

func (d *dataVolumes) addHandlers() {
	c := d.c
	e := &c.ext
	if e.dvInformer != nil {
		mustAddHandler(e.dvInformer, handlerD(func(m metav1.Object, deleted bool) {
			c.enqueue(keyDataVolume, m.GetNamespace(), m.GetName())
			// The VMs using it: their readiness and printableStatus.
			c.enqueueIndexed(c.vmInformer, indexClaim, m.GetNamespace()+"/"+m.GetName(), "")
			if ref := metav1.GetControllerOf(m); ref != nil && ref.Kind == virtv1.VirtualMachineGroupVersionKind.Kind {
				c.enqueue("", m.GetNamespace(), ref.Name)
			}
			if deleted {
				c.ext.seen.forget(m.GetUID())
				c.enqueue(keyPVC, m.GetNamespace(), m.GetName())
			}
		}))
	}
	mustAddHandler(e.pvcInformer, handler(func(m metav1.Object) {
		ns, name := m.GetNamespace(), m.GetName()
		c.enqueue(keyPVC, ns, name)
		if e.dvInformer != nil {
			c.enqueue(keyDataVolume, ns, name)
			c.enqueueIndexed(e.dvInformer, indexCloneSource, ns+"/"+name, keyDataVolume)
		}
		if e.snapshots {
			// status.volumeSnapshotStatuses names the StorageClass.
			c.enqueueIndexed(c.vmInformer, indexClaim, ns+"/"+name, "")
		}
	}))
	if err := c.vmInformer.AddIndexers(cache.Indexers{indexClaim: vmClaimIndex}); err != nil {
		panic("kubevirtsim: add VM indexer: " + err.Error())
	}
	mustAddHandler(c.vmInformer, cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		vm, ok := obj.(*virtv1.VirtualMachine)
		if !ok {
			return
		}
		key := vm.Namespace + "/" + vm.Name
		if e.dvInformer != nil {
			c.enqueueIndexed(e.dvInformer, indexOwnerVM, key, keyDataVolume)
		}
		c.enqueueIndexed(e.pvcInformer, indexOwnerVM, key, keyPVC)
	}})
	// A VMI that ends or goes away may release a PVC being deleted.
	mustAddHandler(c.vmiInformer, handlerD(func(m metav1.Object, deleted bool) {
		vmi, ok := m.(*virtv1.VirtualMachineInstance)
		if !ok || (!deleted && !vmi.IsFinal()) {
			return
		}
		for _, v := range vmi.Spec.Volumes {
			if claim := claimOf(v); claim != "" {
				c.enqueue(keyPVC, vmi.Namespace, claim)
			}
		}
	}))
}

// handlerD is handler with a flag for deletions.
func handlerD(fn func(obj metav1.Object, deleted bool)) cache.ResourceEventHandler {
	call := func(obj any, deleted bool) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if m, ok := obj.(metav1.Object); ok {
			fn(m, deleted)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { call(obj, false) },
		UpdateFunc: func(_, obj any) { call(obj, false) },
		DeleteFunc: func(obj any) { call(obj, true) },
	}
}

// vmClaimIndex indexes VMs by the PVCs and DataVolumes their template uses
// and by their dataVolumeTemplates.
func vmClaimIndex(obj any) ([]string, error) {
	vm, ok := obj.(*virtv1.VirtualMachine)
	if !ok {
		return nil, nil
	}
	seen := map[string]bool{}
	var out []string
	add := func(name string) {
		if name != "" && !seen[name] {
			seen[name] = true
			out = append(out, vm.Namespace+"/"+name)
		}
	}
	for _, t := range vm.Spec.DataVolumeTemplates {
		add(t.Name)
	}
	if vm.Spec.Template != nil {
		for _, v := range vm.Spec.Template.Spec.Volumes {
			add(claimOf(v))
		}
	}
	return out, nil
}

func dvCloneSourceIndex(obj any) ([]string, error) {
	dv, ok := obj.(*cdiv1.DataVolume)
	if !ok || dv.Spec.Source == nil || dv.Spec.Source.PVC == nil {
		return nil, nil
	}
	ns := dv.Spec.Source.PVC.Namespace
	if ns == "" {
		ns = dv.Namespace
	}
	return []string{ns + "/" + dv.Spec.Source.PVC.Name}, nil
}

// ready creates the VM's missing DataVolumes and reports whether all
// DataVolumes the VM uses have Succeeded (vmDependency).
func (d *dataVolumes) ready(ctx context.Context, vm *virtv1.VirtualMachine) (bool, error) {
	if vm.Status.RestoreInProgress != nil {
		// A restore is rewriting the VM's disks: create nothing now.
		return false, nil
	}
	ready := true
	for i := range vm.Spec.DataVolumeTemplates {
		t := &vm.Spec.DataVolumeTemplates[i]
		dv := getCached[*cdiv1.DataVolume](d.c.ext.dvInformer, vm.Namespace, t.Name)
		if dv == nil {
			ready = false
			if err := d.authorize(ctx, vm, t); err != nil {
				return false, fmt.Errorf("Error encountered while creating DataVolumes: %w", err)
			}
			if err := d.createFromTemplate(ctx, vm, t); err != nil {
				return false, err
			}
			continue
		}
		if dv.Status.Phase != cdiv1.Succeeded {
			ready = false
		}
	}
	for _, dv := range d.standalone(vm) {
		if dv.Status.Phase != cdiv1.Succeeded {
			ready = false
		}
	}
	return ready, nil
}

// authorize is KubeVirt's authorizeDataVolume (handleCloneDataVolume): a
// DataVolume template cloning a claim of another namespace needs the VM's
// ServiceAccount (default, unless a serviceAccount volume names one) to
// be allowed to clone from there (CDI's CanServiceAccountClonePVC: create
// on datavolumes/source, or on pods, in the source namespace), asked
// with SubjectAccessReviews; a denial is the VM's Failure condition.
func (d *dataVolumes) authorize(ctx context.Context, vm *virtv1.VirtualMachine, t *virtv1.DataVolumeTemplateSpec) error {
	src := t.Spec.Source
	if src == nil || src.PVC == nil || src.PVC.Namespace == "" || src.PVC.Namespace == vm.Namespace {
		return nil
	}
	sa := "default"
	if vm.Spec.Template != nil {
		for _, v := range vm.Spec.Template.Spec.Volumes {
			if v.ServiceAccount != nil {
				sa = v.ServiceAccount.ServiceAccountName
			}
		}
	}
	createSar := func(sar *authorizationv1.SubjectAccessReview) (*authorizationv1.SubjectAccessReview, error) {
		return d.c.k8s.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	}
	allowed, reason, err := cdiv1.CanServiceAccountClonePVC(createSar, src.PVC.Namespace, src.PVC.Name, vm.Namespace, sa)
	if err != nil {
		return err
	}
	if !allowed {
		return fmt.Errorf("not authorized to create DataVolume: %s", reason)
	}
	return nil
}

// printableStatus reports Provisioning while a DataVolume the VM uses is not
// ready and DataVolumeError when one failed (vmDependency).
func (d *dataVolumes) printableStatus(vm *virtv1.VirtualMachine, _ *virtv1.VirtualMachineInstance) (virtv1.VirtualMachinePrintableStatus, bool) {
	failed, pending := false, false
	check := func(dv *cdiv1.DataVolume) {
		switch {
		case dv == nil:
			pending = true
		case dv.Status.Phase == cdiv1.Failed:
			failed = true
		case dv.Status.Phase != cdiv1.Succeeded:
			pending = true
		}
	}
	for _, t := range vm.Spec.DataVolumeTemplates {
		check(getCached[*cdiv1.DataVolume](d.c.ext.dvInformer, vm.Namespace, t.Name))
	}
	for _, dv := range d.standalone(vm) {
		check(dv)
	}
	switch {
	case failed:
		return virtv1.VirtualMachineStatusDataVolumeError, true
	case pending:
		return virtv1.VirtualMachineStatusProvisioning, true
	}
	return "", false
}

// standalone returns the existing DataVolumes the VM's volumes use that do
// not come from its dataVolumeTemplates. (A dataVolume volume without a
// DataVolume may point at a plain PVC; it does not hold the VM back.)
func (d *dataVolumes) standalone(vm *virtv1.VirtualMachine) []*cdiv1.DataVolume {
	if vm.Spec.Template == nil {
		return nil
	}
	templated := map[string]bool{}
	for _, t := range vm.Spec.DataVolumeTemplates {
		templated[t.Name] = true
	}
	var out []*cdiv1.DataVolume
	for _, v := range vm.Spec.Template.Spec.Volumes {
		if v.DataVolume == nil || templated[v.DataVolume.Name] {
			continue
		}
		if dv := getCached[*cdiv1.DataVolume](d.c.ext.dvInformer, vm.Namespace, v.DataVolume.Name); dv != nil {
			out = append(out, dv)
		}
	}
	return out
}

// createFromTemplate creates a DataVolume from a dataVolumeTemplate the way
// KubeVirt's VM controller does.
func (d *dataVolumes) createFromTemplate(ctx context.Context, vm *virtv1.VirtualMachine, t *virtv1.DataVolumeTemplateSpec) error {
	if t.Name == "" {
		return errors.New("dataVolumeTemplate without a name")
	}
	// The cached VM may be older than the DataVolume cache (e.g. a restore
	// just dropped this template and deleted its DataVolume): check the
	// current VM before creating anything.
	cur, err := d.c.kv.KubevirtV1().VirtualMachines(vm.Namespace).Get(ctx, vm.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if cur.UID != vm.UID || cur.DeletionTimestamp != nil || cur.Status.RestoreInProgress != nil ||
		!slices.ContainsFunc(cur.Spec.DataVolumeTemplates, func(o virtv1.DataVolumeTemplateSpec) bool { return o.Name == t.Name }) {
		return nil
	}
	dv := &cdiv1.DataVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:            t.Name,
			Namespace:       vm.Namespace,
			Labels:          maps.Clone(t.Labels),
			Annotations:     maps.Clone(t.Annotations),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm, virtv1.VirtualMachineGroupVersionKind)},
		},
		Spec: *t.Spec.DeepCopy(),
	}
	if dv.Labels == nil {
		dv.Labels = map[string]string{}
	}
	dv.Labels[virtv1.CreatedByLabel] = string(vm.UID)
	_, err = d.c.ext.cdi.CdiV1beta1().DataVolumes(vm.Namespace).Create(ctx, dv, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		return nil // the cache has not seen it yet
	case err != nil:
		return fmt.Errorf("failed to create DataVolume %s: %w", t.Name, err)
	}
	d.c.log.Info("created DataVolume for VM", zapKey(dv), zap.String("vm", vm.Name))
	return nil
}

// dvSource classifies a DataVolume's population.
type dvSource int

const (
	dvImport dvSource = iota
	dvClone
	dvUpload
)

// sync reconciles one DataVolume (key "namespace/name").
func (d *dataVolumes) sync(ctx context.Context, key string) (time.Duration, error) {
	c := d.c
	dv := getCachedKey[*cdiv1.DataVolume](c.ext.dvInformer, key)
	if dv == nil {
		return 0, nil // its PVC is garbage collected under the pvc key
	}
	ns, name := dv.Namespace, dv.Name
	var err error
	if ref := metav1.GetControllerOf(dv); ref != nil && ref.Kind == virtv1.VirtualMachineGroupVersionKind.Kind && dv.DeletionTimestamp == nil {
		gone, err := c.vmGone(ctx, ns, ref)
		if err != nil {
			return 0, err
		}
		if gone {
			c.log.Info("deleting DataVolume whose VM is gone", zapKey(dv))
			return 0, preconditionDelete(dv.UID, func(o metav1.DeleteOptions) error {
				return c.ext.cdi.CdiV1beta1().DataVolumes(ns).Delete(ctx, name, o)
			})
		}
	}
	if dv.DeletionTimestamp != nil {
		return 0, nil
	}
	switch dv.Status.Phase {
	case cdiv1.Succeeded, cdiv1.Failed:
		c.ext.seen.forget(dv.UID)
		return 0, nil
	case cdiv1.UploadReady:
		return d.uploadDone(ctx, dv)
	}

	now := time.Now()
	orig := dv.DeepCopy()
	if dv.Status.Phase == cdiv1.PhaseUnset {
		c.ext.seen.since(dv.UID, now)
		dv.Status.Phase = cdiv1.Pending
		dv.Status.ClaimName = dv.Name
		dv.Status.Progress = progressNA
		setDVCondition(dv, cdiv1.DataVolumeBound, corev1.ConditionUnknown, "", "No PVC found", now)
		setDVCondition(dv, cdiv1.DataVolumeReady, corev1.ConditionFalse, "", "", now)
		setDVCondition(dv, cdiv1.DataVolumeRunning, corev1.ConditionFalse, "", "", now)
		return d.writeStatus(ctx, orig, dv, time.Millisecond)
	}

	kind, src, requeue, err := d.resolveSource(ctx, dv, now)
	if err != nil || requeue != 0 || (kind == dvClone && src == nil) {
		if err != nil {
			return 0, err
		}
		return d.writeStatus(ctx, orig, dv, requeue)
	}

	pvc := getCached[*corev1.PersistentVolumeClaim](c.ext.pvcInformer, ns, name)
	if pvc != nil && !ownedBy(pvc, dv.UID) {
		if !adoptable(dv, pvc) {
			dv.Status.Phase = cdiv1.Pending
			setDVCondition(dv, cdiv1.DataVolumeBound, corev1.ConditionFalse, reasonResourceExists,
				fmt.Sprintf("Resource %q already exists and is not managed by DataVolume", name), now)
			return d.writeStatus(ctx, orig, dv, 0)
		}
		if err := d.adopt(ctx, dv, pvc); err != nil {
			return 0, err
		}
		c.log.Info("DataVolume adopted its PVC", zapKey(dv))
		d.succeed(dv, pvc, now)
		return d.writeStatus(ctx, orig, dv, 0)
	}
	if pvc == nil {
		spec, err := d.claimSpec(ctx, dv, src)
		if err != nil {
			dv.Status.Phase = cdiv1.Failed
			setDVCondition(dv, cdiv1.DataVolumeRunning, corev1.ConditionFalse, reasonDVError, err.Error(), now)
			setDVCondition(dv, cdiv1.DataVolumeReady, corev1.ConditionFalse, reasonDVError, err.Error(), now)
			return d.writeStatus(ctx, orig, dv, 0)
		}
		pvc, err = d.createPVC(ctx, dv, spec)
		if err != nil {
			return 0, err
		}
		if pvc == nil {
			return 50 * time.Millisecond, nil // created meanwhile; wait for the cache
		}
	} else if err := d.bind(ctx, pvc); err != nil {
		return 0, err
	}

	// The PVC is there and bound: move through the population phases.
	bound := fmt.Sprintf("PVC %s Bound", pvc.Name)
	setDVCondition(dv, cdiv1.DataVolumeBound, corev1.ConditionTrue, reasonDVBound, bound, now)
	switch dv.Status.Phase {
	case cdiv1.Pending, cdiv1.PVCBound:
		switch kind {
		case dvClone:
			dv.Status.Phase = cdiv1.CloneScheduled
		case dvUpload:
			dv.Status.Phase = cdiv1.UploadScheduled
		default:
			dv.Status.Phase = cdiv1.ImportScheduled
		}
		setDVCondition(dv, cdiv1.DataVolumeRunning, corev1.ConditionFalse, reasonDVPending, "", now)
		return d.writeStatus(ctx, orig, dv, time.Millisecond)
	case cdiv1.CloneScheduled, cdiv1.ImportScheduled:
		// DataVolumeDelay counts from here (a clone may have waited for
		// its source).
		dv.Status.Phase = cdiv1.ImportInProgress
		if kind == dvClone {
			dv.Status.Phase = cdiv1.CloneInProgress
		}
		c.ext.seen.forget(dv.UID)
		c.ext.seen.since(dv.UID, now)
		dv.Status.Progress = "0.00%"
		setDVCondition(dv, cdiv1.DataVolumeRunning, corev1.ConditionTrue, "", "", now)
		return d.writeStatus(ctx, orig, dv, time.Millisecond)
	case cdiv1.UploadScheduled:
		// The upload server pod is up: UploadProxy takes the data.
		if err := d.annotatePVC(ctx, pvc, map[string]string{AnnotationPodReady: "true", annPodPhase: string(corev1.PodRunning)}); err != nil {
			return 0, err
		}
		dv.Status.Phase = cdiv1.UploadReady
		setDVCondition(dv, cdiv1.DataVolumeRunning, corev1.ConditionTrue, reasonDVRunning, "Upload pod is ready", now)
		return d.writeStatus(ctx, orig, dv, 0)
	case cdiv1.ImportInProgress, cdiv1.CloneInProgress:
		if msg := unreachableSource(dv); msg != "" {
			return d.importerFailed(ctx, orig, dv, msg, now)
		}
		return d.progress(ctx, orig, dv, now)
	}
	return d.writeStatus(ctx, orig, dv, 0)
}

// progress reports the import/clone progress and completes the DataVolume
// after DataVolumeDelay.
func (d *dataVolumes) progress(ctx context.Context, orig, dv *cdiv1.DataVolume, now time.Time) (time.Duration, error) {
	delay := d.c.opts.DataVolumeDelay
	elapsed := now.Sub(d.c.ext.seen.since(dv.UID, now))
	if delay <= 0 || elapsed >= delay {
		pvc := getCached[*corev1.PersistentVolumeClaim](d.c.ext.pvcInformer, dv.Namespace, dv.Name)
		d.succeed(dv, pvc, now)
		d.c.log.Info("DataVolume succeeded", zapKey(dv))
		return d.writeStatus(ctx, orig, dv, 0)
	}
	pct := float64(elapsed) / float64(delay) * 100
	dv.Status.Progress = cdiv1.DataVolumeProgress(fmt.Sprintf("%.2f%%", pct))
	setDVCondition(dv, cdiv1.DataVolumeRunning, corev1.ConditionTrue, "", "", now)
	step := max(delay/20, dataVolumeProgressMinStep)
	return d.writeStatus(ctx, orig, dv, min(step, delay-elapsed))
}

// unreachableSource returns the importer's error for an http source whose
// host cannot resolve (one under ".invalid"), "" for any other source.
func unreachableSource(dv *cdiv1.DataVolume) string {
	if dv.Spec.Source == nil || dv.Spec.Source.HTTP == nil {
		return ""
	}
	raw := dv.Spec.Source.HTTP.URL
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Sprintf("Unable to connect to http data source: %v", err)
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if host != "invalid" && !strings.HasSuffix(host, ".invalid") {
		return ""
	}
	return fmt.Sprintf("Unable to connect to http data source: HTTP request errored: Get %q: dial tcp: lookup %s: no such host", raw, u.Hostname())
}

// importerFailed reports an importer pod that failed, as CDI does: the
// phase stays ImportInProgress (CDI restarts the pod), the Running condition
// turns False with reason Error and the pod's message, and the restart is
// counted. The simulated importer is not restarted.
func (d *dataVolumes) importerFailed(ctx context.Context, orig, dv *cdiv1.DataVolume, msg string, now time.Time) (time.Duration, error) {
	if c := findDVCondition(dv, cdiv1.DataVolumeRunning); c == nil || c.Reason != reasonDVError {
		dv.Status.RestartCount++
		d.c.log.Info("DataVolume import failed", zapKey(dv), zap.String("reason", msg))
	}
	dv.Status.Progress = progressNA
	setDVCondition(dv, cdiv1.DataVolumeRunning, corev1.ConditionFalse, reasonDVError, msg, now)
	setDVCondition(dv, cdiv1.DataVolumeReady, corev1.ConditionFalse, reasonDVError, msg, now)
	d.c.ext.seen.forget(dv.UID)
	return d.writeStatus(ctx, orig, dv, 0)
}

// uploadDone completes an UploadReady DataVolume once UploadProxy marked
// its claim's upload Succeeded, as CDI does when the upload pod ends.
func (d *dataVolumes) uploadDone(ctx context.Context, dv *cdiv1.DataVolume) (time.Duration, error) {
	pvc := getCached[*corev1.PersistentVolumeClaim](d.c.ext.pvcInformer, dv.Namespace, dv.Name)
	if pvc == nil || pvc.Annotations[annPodPhase] != string(corev1.PodSucceeded) {
		return 0, nil // the claim's change requeues it
	}
	orig := dv.DeepCopy()
	d.succeed(dv, pvc, time.Now())
	d.c.log.Info("DataVolume upload succeeded", zapKey(dv))
	return d.writeStatus(ctx, orig, dv, 0)
}

// annotatePVC merges annotations into a claim.
func (d *dataVolumes) annotatePVC(ctx context.Context, pvc *corev1.PersistentVolumeClaim, ann map[string]string) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	_, err := d.c.k8s.CoreV1().PersistentVolumeClaims(pvc.Namespace).Patch(ctx, pvc.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// findDVCondition returns the DataVolume's condition of type t, or nil.
func findDVCondition(dv *cdiv1.DataVolume, t cdiv1.DataVolumeConditionType) *cdiv1.DataVolumeCondition {
	for i := range dv.Status.Conditions {
		if dv.Status.Conditions[i].Type == t {
			return &dv.Status.Conditions[i]
		}
	}
	return nil
}

func (d *dataVolumes) succeed(dv *cdiv1.DataVolume, pvc *corev1.PersistentVolumeClaim, now time.Time) {
	dv.Status.Phase = cdiv1.Succeeded
	dv.Status.Progress = progressDone
	dv.Status.ClaimName = dv.Name
	bound := fmt.Sprintf("PVC %s Bound", dv.Name)
	if pvc != nil {
		bound = fmt.Sprintf("PVC %s Bound", pvc.Name)
	}
	setDVCondition(dv, cdiv1.DataVolumeBound, corev1.ConditionTrue, reasonDVBound, bound, now)
	setDVCondition(dv, cdiv1.DataVolumeRunning, corev1.ConditionFalse, reasonDVCompleted, "", now)
	setDVCondition(dv, cdiv1.DataVolumeReady, corev1.ConditionTrue, "", "", now)
	d.c.ext.seen.forget(dv.UID)
}

// resolveSource classifies the DataVolume and, for clones, returns the
// source PVC. When the DataVolume has to wait (a clone source or DataSource
// is missing) it records why in dv and returns a nil source; requeue is then
// the polling interval for sources that are not watched.
func (d *dataVolumes) resolveSource(ctx context.Context, dv *cdiv1.DataVolume, now time.Time) (dvSource, *corev1.PersistentVolumeClaim, time.Duration, error) {
	var ref *cdiv1.DataVolumeSourcePVC
	switch s := dv.Spec.Source; {
	case dv.Spec.SourceRef != nil:
		sr := dv.Spec.SourceRef
		ns := dv.Namespace
		if sr.Namespace != nil && *sr.Namespace != "" {
			ns = *sr.Namespace
		}
		ds, err := d.c.ext.cdi.CdiV1beta1().DataSources(ns).Get(ctx, sr.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && ds.Spec.Source.PVC == nil) {
			dv.Status.Phase = cdiv1.Pending
			setDVCondition(dv, cdiv1.DataVolumeBound, corev1.ConditionFalse, reasonDataSourceNotFound,
				fmt.Sprintf("DataSource %s/%s not found or without a pvc source", ns, sr.Name), now)
			return dvClone, nil, 2 * time.Second, nil
		}
		if err != nil {
			return dvClone, nil, 0, err
		}
		ref = &cdiv1.DataVolumeSourcePVC{Namespace: ds.Spec.Source.PVC.Namespace, Name: ds.Spec.Source.PVC.Name}
		if ref.Namespace == "" {
			ref.Namespace = ns
		}
	case s == nil:
		return dvImport, nil, 0, nil // treated as blank
	case s.PVC != nil:
		ref = s.PVC.DeepCopy()
		if ref.Namespace == "" {
			ref.Namespace = dv.Namespace
		}
	case s.Upload != nil:
		return dvUpload, nil, 0, nil
	case s.Snapshot != nil:
		dv.Status.Phase = cdiv1.Pending
		setDVCondition(dv, cdiv1.DataVolumeBound, corev1.ConditionFalse, reasonSourceNotSimulated,
			"kubevirtsim does not simulate VolumeSnapshot sources", now)
		return dvClone, nil, 0, nil
	default:
		return dvImport, nil, 0, nil
	}
	src := getCached[*corev1.PersistentVolumeClaim](d.c.ext.pvcInformer, ref.Namespace, ref.Name)
	target := getCached[*corev1.PersistentVolumeClaim](d.c.ext.pvcInformer, dv.Namespace, dv.Name)
	if src != nil && src.DeletionTimestamp == nil && target == nil {
		if user := d.sourceUser(src); user != "" {
			// CDI clones a claim only while no pod writes to it
			// (IsSourceClaimReady, isSourceReadyToClone: event
			// CloneSourceInUse, requeued every 5 seconds).
			dv.Status.Phase = cdiv1.CloneScheduled
			setDVCondition(dv, cdiv1.DataVolumeReady, corev1.ConditionFalse, "", "", now)
			return dvClone, nil, 5 * time.Second, nil
		}
	}
	if src != nil && src.DeletionTimestamp == nil {
		return dvClone, src, 0, nil
	}
	// No target PVC yet: wait for the source (PVC events requeue us).
	if target == nil {
		dv.Status.Phase = cdiv1.CloneScheduled
		msg := fmt.Sprintf("The source pvc %s/%s doesn't exist", ref.Namespace, ref.Name)
		setDVCondition(dv, cdiv1.DataVolumeBound, corev1.ConditionFalse, reasonCloneWithoutSource, msg, now)
		setDVCondition(dv, cdiv1.DataVolumeRunning, corev1.ConditionFalse, reasonCloneWithoutSource, msg, now)
		setDVCondition(dv, cdiv1.DataVolumeReady, corev1.ConditionFalse, "", "", now)
		return dvClone, nil, 0, nil
	}
	// The clone already started; the source going away does not matter.
	return dvClone, &corev1.PersistentVolumeClaim{}, 0, nil
}

// sourceUser names the VMI whose running (not final) guest uses claim
// src read-write, or "".
func (d *dataVolumes) sourceUser(src *corev1.PersistentVolumeClaim) string {
	objs, _ := d.c.vmiInformer.GetIndexer().ByIndex(indexClaim, src.Namespace+"/"+src.Name)
	for _, o := range objs {
		vmi, ok := o.(*virtv1.VirtualMachineInstance)
		if !ok || vmi.IsFinal() || readOnlyUse(vmi, src.Name) {
			continue
		}
		return vmi.Name
	}
	return ""
}

// readOnlyUse tells whether vmi uses claim only through read-only disks
// (CD-ROMs), which CDI does not count as a use (GetPodsUsingPVCs).
func readOnlyUse(vmi *virtv1.VirtualMachineInstance, claim string) bool {
	disks := map[string]virtv1.Disk{}
	for _, d := range vmi.Spec.Domain.Devices.Disks {
		disks[d.Name] = d
	}
	for _, v := range vmi.Spec.Volumes {
		if claimOf(v) != claim {
			continue
		}
		if d, ok := disks[v.Name]; !ok || d.CDRom == nil {
			return false
		}
	}
	return true
}

// claimSpec derives the PVC spec CDI would create for the DataVolume.
func (d *dataVolumes) claimSpec(ctx context.Context, dv *cdiv1.DataVolume, src *corev1.PersistentVolumeClaim) (corev1.PersistentVolumeClaimSpec, error) {
	var spec corev1.PersistentVolumeClaimSpec
	switch {
	case dv.Spec.PVC != nil:
		spec = *dv.Spec.PVC.DeepCopy()
	case dv.Spec.Storage != nil:
		s := dv.Spec.Storage.DeepCopy()
		spec = corev1.PersistentVolumeClaimSpec{
			AccessModes:      s.AccessModes,
			Selector:         s.Selector,
			Resources:        s.Resources,
			StorageClassName: s.StorageClassName,
			VolumeMode:       s.VolumeMode,
		}
	}
	spec.DataSource, spec.DataSourceRef = nil, nil
	size, ok := spec.Resources.Requests[corev1.ResourceStorage]
	if (!ok || size.IsZero()) && src != nil {
		if q, ok := src.Spec.Resources.Requests[corev1.ResourceStorage]; ok {
			size = q
		} else if q, ok := src.Status.Capacity[corev1.ResourceStorage]; ok {
			size = q
		}
	}
	if size.IsZero() {
		return spec, errors.New(msgMissingStorageSize)
	}
	if spec.Resources.Requests == nil {
		spec.Resources.Requests = corev1.ResourceList{}
	}
	spec.Resources.Requests[corev1.ResourceStorage] = size
	if spec.StorageClassName == nil || *spec.StorageClassName == "" {
		sc, err := d.defaultStorageClass(ctx)
		if err != nil {
			return spec, err
		}
		if sc != "" {
			spec.StorageClassName = &sc
		}
	}
	if len(spec.AccessModes) == 0 || spec.VolumeMode == nil || *spec.VolumeMode == cdiv1.PersistentVolumeFromStorageProfile {
		access, mode := claimProperties(d.provisioner(ctx, spec.StorageClassName), spec.VolumeMode)
		if len(spec.AccessModes) == 0 {
			spec.AccessModes = []corev1.PersistentVolumeAccessMode{access}
		}
		if spec.VolumeMode == nil || *spec.VolumeMode == cdiv1.PersistentVolumeFromStorageProfile {
			spec.VolumeMode = &mode
		}
	}
	if dv.Spec.Storage != nil && *spec.VolumeMode == corev1.PersistentVolumeFilesystem {
		// CDI sizes a spec.storage claim for the disk image plus the
		// filesystem holding it (renderPvcSpecVolumeSize).
		spec.Resources.Requests[corev1.ResourceStorage] = *resource.NewQuantity(
			requiredSpace(d.filesystemOverhead(ctx, spec.StorageClassName), size.Value()), resource.BinarySI)
	}
	spec.VolumeName = "pvc-" + uuid.NewString()
	return spec, nil
}

// cdiConfigName is the name of CDI's one CDIConfig.
const cdiConfigName = "config"

// filesystemOverhead is CDIConfig status.filesystemOverhead's for the
// StorageClass, else its global one; none without a CDIConfig, as CDI
// (GetFilesystemOverheadForStorageClass).
func (d *dataVolumes) filesystemOverhead(ctx context.Context, class *string) float64 {
	cfg, err := d.c.opts.CDI.CdiV1beta1().CDIConfigs().Get(ctx, cdiConfigName, metav1.GetOptions{})
	if err != nil || cfg.Status.FilesystemOverhead == nil {
		return 0
	}
	p := cfg.Status.FilesystemOverhead.Global
	if class != nil {
		if v, ok := cfg.Status.FilesystemOverhead.StorageClass[*class]; ok {
			p = v
		}
	}
	f, err := strconv.ParseFloat(string(p), 64)
	if err != nil {
		return 0
	}
	return f
}

// requiredSpace is CDI's GetRequiredSpace: the image aligned to 1 MiB,
// plus the overhead, rounded up.
func requiredSpace(overhead float64, bytes int64) int64 {
	const align = 1 << 20
	aligned := (bytes + align - 1) / align * align
	return int64(math.Ceil(float64(aligned) * (1 + overhead)))
}

// defaultStorageClass returns KubeVirt's default virt StorageClass, else the
// cluster default ("" when there is none).
func (d *dataVolumes) defaultStorageClass(ctx context.Context) (string, error) {
	list, err := d.c.k8s.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	def := ""
	for _, sc := range list.Items {
		if sc.Annotations[annDefaultVirtClass] == "true" {
			return sc.Name, nil
		}
		if sc.Annotations[annDefaultClass] == "true" && def == "" {
			def = sc.Name
		}
	}
	return def, nil
}

func (d *dataVolumes) provisioner(ctx context.Context, class *string) string {
	if class == nil {
		return ""
	}
	sc, err := d.c.k8s.StorageV1().StorageClasses().Get(ctx, *class, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return sc.Provisioner
}

// createPVC creates the DataVolume's PVC, bound at once. It returns nil when
// the PVC already existed.
func (d *dataVolumes) createPVC(ctx context.Context, dv *cdiv1.DataVolume, spec corev1.PersistentVolumeClaimSpec) (*corev1.PersistentVolumeClaim, error) {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:      dv.Name,
			Namespace: dv.Namespace,
			Labels: map[string]string{
				"app":                          "containerized-data-importer",
				"app.kubernetes.io/component":  "storage",
				"app.kubernetes.io/managed-by": "cdi-controller",
			},
			Annotations: map[string]string{
				annContentType:  string(contentType(dv)),
				annPodPhase:     string(corev1.PodSucceeded),
				annCreatedForDV: string(dv.UID),
			},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(dv, dataVolumeGVK)},
		},
		Spec: spec,
	}
	if dv.Spec.Source != nil && dv.Spec.Source.Upload != nil {
		// An upload target: its server pod is not up yet.
		pvc.Annotations[AnnotationUploadTarget] = ""
		pvc.Annotations[annPodPhase] = string(corev1.PodPending)
	}
	maps.Copy(pvc.Labels, dv.Labels)
	delete(pvc.Labels, virtv1.CreatedByLabel)
	// CDI starts the claim's annotations from the DataVolume's.
	for k, v := range dv.Annotations {
		if _, set := pvc.Annotations[k]; !set {
			pvc.Annotations[k] = v
		}
	}
	return d.c.createBoundPVC(ctx, pvc)
}

// createBoundPVC creates a PVC and binds it (what the external provisioner
// and the PV controller would do). It returns nil when a PVC of that name
// already exists.
func (c *Controller) createBoundPVC(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (*corev1.PersistentVolumeClaim, error) {
	d := &dataVolumes{c: c}
	if pvc.Spec.VolumeName == "" {
		pvc.Spec.VolumeName = "pvc-" + uuid.NewString()
	}
	if pvc.Annotations == nil {
		pvc.Annotations = map[string]string{}
	}
	pvc.Annotations[annBindCompleted] = "yes"
	pvc.Annotations[annBoundByCtrl] = "yes"
	if p := d.provisioner(ctx, pvc.Spec.StorageClassName); p != "" {
		pvc.Annotations[annProvisioner] = p
		pvc.Annotations[annBetaProvisioner] = p
	}
	pvc.Status = corev1.PersistentVolumeClaimStatus{}
	created, err := c.k8s.CoreV1().PersistentVolumeClaims(pvc.Namespace).Create(ctx, pvc, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("create PVC %s/%s: %w", pvc.Namespace, pvc.Name, err)
	}
	c.log.Info("created PVC", zapKey(created))
	if err := d.bind(ctx, created); err != nil {
		return nil, err
	}
	return created, nil
}

// bind marks a PVC Bound with the requested capacity (the API server drops
// status on create, so this is a separate status write).
func (d *dataVolumes) bind(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	if pvc.Status.Phase == corev1.ClaimBound {
		return nil
	}
	upd := pvc.DeepCopy()
	upd.Status.Phase = corev1.ClaimBound
	upd.Status.AccessModes = upd.Spec.AccessModes
	size := upd.Spec.Resources.Requests[corev1.ResourceStorage]
	upd.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: size.DeepCopy()}
	res, err := d.c.k8s.CoreV1().PersistentVolumeClaims(pvc.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("bind PVC %s/%s: %w", pvc.Namespace, pvc.Name, err)
	}
	*pvc = *res
	return nil
}

func contentType(dv *cdiv1.DataVolume) cdiv1.DataVolumeContentType {
	if dv.Spec.ContentType != "" {
		return dv.Spec.ContentType
	}
	return cdiv1.DataVolumeKubeVirt
}

// adoptable reports whether the DataVolume may take over an existing PVC of
// its name.
func adoptable(dv *cdiv1.DataVolume, pvc *corev1.PersistentVolumeClaim) bool {
	if ref := metav1.GetControllerOf(pvc); ref != nil && ref.Kind != virtv1.VirtualMachineGroupVersionKind.Kind {
		return false
	}
	return pvc.Annotations[AnnotationPopulatedFor] == dv.Name ||
		dv.Annotations[AnnotationPrePopulated] != "" ||
		dv.Annotations[AnnotationAllowClaimAdoption] == "true"
}

// adopt makes the DataVolume the PVC's controller.
func (d *dataVolumes) adopt(ctx context.Context, dv *cdiv1.DataVolume, pvc *corev1.PersistentVolumeClaim) error {
	upd := pvc.DeepCopy()
	var refs []metav1.OwnerReference
	for _, r := range upd.OwnerReferences {
		if r.Controller == nil || !*r.Controller {
			refs = append(refs, r)
		}
	}
	upd.OwnerReferences = append(refs, *metav1.NewControllerRef(dv, dataVolumeGVK))
	if _, err := d.c.k8s.CoreV1().PersistentVolumeClaims(pvc.Namespace).Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
		return err
	}
	return d.bind(ctx, upd)
}

// writeStatus writes the DataVolume status when it changed.
func (d *dataVolumes) writeStatus(ctx context.Context, orig, dv *cdiv1.DataVolume, requeue time.Duration) (time.Duration, error) {
	if equality.Semantic.DeepEqual(orig.Status, dv.Status) {
		return requeue, nil
	}
	_, err := d.c.ext.cdi.CdiV1beta1().DataVolumes(dv.Namespace).UpdateStatus(ctx, dv, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return requeue, nil
}

// setDVCondition sets a DataVolume condition, keeping the timestamps of an
// unchanged one.
func setDVCondition(dv *cdiv1.DataVolume, t cdiv1.DataVolumeConditionType, status corev1.ConditionStatus, reason, message string, now time.Time) {
	cond := cdiv1.DataVolumeCondition{Type: t, Status: status, Reason: reason, Message: message,
		LastTransitionTime: metav1.NewTime(now), LastHeartbeatTime: metav1.NewTime(now)}
	for i, c := range dv.Status.Conditions {
		if c.Type == t {
			if c.Status != status || c.Reason != reason || c.Message != message {
				if c.Status == status {
					cond.LastTransitionTime = c.LastTransitionTime
				}
				dv.Status.Conditions[i] = cond
			}
			return
		}
	}
	dv.Status.Conditions = append(dv.Status.Conditions, cond)
}

// syncPVC garbage collects a PVC whose controlling DataVolume or VM is gone
// and releases the pvc-protection finalizer of a deleted PVC no running VMI
// uses (key "namespace/name").
func (d *dataVolumes) syncPVC(ctx context.Context, key string) (time.Duration, error) {
	c := d.c
	pvc := getCachedKey[*corev1.PersistentVolumeClaim](c.ext.pvcInformer, key)
	if pvc == nil {
		return 0, nil
	}
	ns, name := pvc.Namespace, pvc.Name
	var err error
	if ref := metav1.GetControllerOf(pvc); ref != nil && pvc.DeletionTimestamp == nil {
		var gone bool
		switch ref.Kind {
		case dataVolumeGVK.Kind:
			gone, err = d.dvGone(ctx, ns, ref)
		case virtv1.VirtualMachineGroupVersionKind.Kind:
			gone, err = c.vmGone(ctx, ns, ref)
		}
		if err != nil {
			return 0, err
		}
		if gone {
			c.log.Info("deleting PVC whose owner is gone", zapKey(pvc), zap.String("owner", ref.Kind+"/"+ref.Name))
			if err := preconditionDelete(pvc.UID, func(o metav1.DeleteOptions) error {
				return c.k8s.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, name, o)
			}); err != nil {
				return 0, err
			}
			return 0, nil // a finalizer may keep it: the update event brings it back
		}
	}
	if pvc.DeletionTimestamp != nil && hasFinalizer(pvc, pvcProtectionFinalizer) && !d.inUse(pvc) {
		patch := finalizerPatch(pvc.Finalizers, withoutFinalizers(pvc.Finalizers, pvcProtectionFinalizer))
		_, err := c.k8s.CoreV1().PersistentVolumeClaims(ns).Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			if isPatchTestFailure(err) {
				return 0, apierrors.NewConflict(corev1.Resource("persistentvolumeclaims"), name, err)
			}
			return 0, err
		}
	}
	return 0, nil
}

// dvGone is vmGone for DataVolumes. Without CDI nobody can tell: false.
func (d *dataVolumes) dvGone(ctx context.Context, ns string, ref *metav1.OwnerReference) (bool, error) {
	e := &d.c.ext
	if e.cdi == nil {
		return false, nil
	}
	if dv := getCached[*cdiv1.DataVolume](e.dvInformer, ns, ref.Name); dv != nil && dv.UID == ref.UID {
		return false, nil
	}
	dv, err := e.cdi.CdiV1beta1().DataVolumes(ns).Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return dv.UID != ref.UID, nil
}

// inUse reports whether a VMI that is not final uses the PVC.
func (d *dataVolumes) inUse(pvc *corev1.PersistentVolumeClaim) bool {
	objs, err := d.c.vmiInformer.GetIndexer().ByIndex(indexClaim, pvc.Namespace+"/"+pvc.Name)
	if err != nil {
		return true
	}
	for _, o := range objs {
		if vmi, ok := o.(*virtv1.VirtualMachineInstance); ok && !vmi.IsFinal() {
			return true
		}
	}
	return false
}

// storageFromClaim turns a PVC spec into a DataVolume storage spec.
func storageFromClaim(spec *corev1.PersistentVolumeClaimSpec) *cdiv1.StorageSpec {
	s := &cdiv1.StorageSpec{
		AccessModes:      append([]corev1.PersistentVolumeAccessMode(nil), spec.AccessModes...),
		StorageClassName: spec.StorageClassName,
		VolumeMode:       spec.VolumeMode,
	}
	if q, ok := spec.Resources.Requests[corev1.ResourceStorage]; ok {
		s.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: q.DeepCopy()}
	}
	return s
}

// cdiFilesystemOverhead is CDI's default global filesystem overhead
// (pkg/common DefaultGlobalOverhead), the share of a Filesystem-mode
// claim its disk image may not use.
const cdiFilesystemOverhead = "0.06"

// storageCapabilities are the claim property sets CDI's StorageProfiles
// get for the provisioners of the simulated cluster's storage classes and
// a few common ones (pkg/storagecapabilities, first set first).
var storageCapabilities = map[string][]struct {
	access corev1.PersistentVolumeAccessMode
	mode   corev1.PersistentVolumeMode
}{
	"rbd.csi.ceph.com":           {{corev1.ReadWriteMany, corev1.PersistentVolumeBlock}, {corev1.ReadWriteOnce, corev1.PersistentVolumeBlock}, {corev1.ReadWriteOnce, corev1.PersistentVolumeFilesystem}},
	"rook-ceph.rbd.csi.ceph.com": {{corev1.ReadWriteMany, corev1.PersistentVolumeBlock}, {corev1.ReadWriteOnce, corev1.PersistentVolumeBlock}, {corev1.ReadWriteOnce, corev1.PersistentVolumeFilesystem}},
	"topolvm.io":                 {{corev1.ReadWriteOnce, corev1.PersistentVolumeBlock}, {corev1.ReadWriteOnce, corev1.PersistentVolumeFilesystem}},
	"topolvm.cybozu.com":         {{corev1.ReadWriteOnce, corev1.PersistentVolumeBlock}, {corev1.ReadWriteOnce, corev1.PersistentVolumeFilesystem}},
	"nfs.csi.k8s.io":             {{corev1.ReadWriteMany, corev1.PersistentVolumeFilesystem}},
}

// claimProperties is what CDI renders for a DataVolume's storage without
// access or volume mode (renderPvcSpecVolumeModeAndAccessModesAndStorageClass):
// the StorageProfile's first property set, or the first with the volume
// mode asked for. Provisioners CDI does not know leave the DataVolume
// Pending there (ErrClaimNotValid); the simulation gives them
// ReadWriteOnce and Filesystem instead.
func claimProperties(provisioner string, want *corev1.PersistentVolumeMode) (corev1.PersistentVolumeAccessMode, corev1.PersistentVolumeMode) {
	for _, p := range storageCapabilities[provisioner] {
		if want == nil || *want == cdiv1.PersistentVolumeFromStorageProfile || *want == p.mode {
			return p.access, p.mode
		}
	}
	if want != nil && *want != cdiv1.PersistentVolumeFromStorageProfile {
		return corev1.ReadWriteOnce, *want
	}
	return corev1.ReadWriteOnce, corev1.PersistentVolumeFilesystem
}

// CDIKnowsProvisioner tells whether CDI fills the StorageProfile of a
// class of provisioner by itself (storageCapabilities, CDI's
// pkg/storagecapabilities), so that its admin need not.
func CDIKnowsProvisioner(provisioner string) bool {
	_, ok := storageCapabilities[provisioner]
	return ok
}
