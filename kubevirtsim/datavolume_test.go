package kubevirtsim

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

func TestDataVolumeTemplatesProvisionBeforeStart(t *testing.T) {
	e := newCDIEnv(t).run(Options{DataVolumeDelay: 400 * time.Millisecond})
	rec := recordStatuses(e.env)
	dvRec := recordPhases(t, e.ctx, NewDataVolumeInformer(e.cdi, testNS, 0), func(obj any) (string, string) {
		dv := obj.(*cdiv1.DataVolume)
		return dv.Name, string(dv.Status.Phase)
	})
	progRec := recordPhases(t, e.ctx, NewDataVolumeInformer(e.cdi, testNS, 0), func(obj any) (string, string) {
		dv := obj.(*cdiv1.DataVolume)
		return dv.Name, string(dv.Status.Progress)
	})
	vm := e.createVM(withDataVolume(testVM("web", virtv1.RunStrategyAlways), "rootdisk", blankDVT("web-rootdisk", "10Gi", nil)))

	vmi := e.waitRunning("web")
	rec.requireSequence(t, "web", virtv1.VirtualMachineStatusProvisioning, virtv1.VirtualMachineStatusStarting, virtv1.VirtualMachineStatusRunning)
	dvRec.requireSequence(t, "web-rootdisk", "", "Pending", "ImportScheduled", "ImportInProgress", "Succeeded")

	// Progress went through "N.NN%" values to 100.0%.
	pct := regexp.MustCompile(`^\d{1,2}\.\d\d%$`)
	progress := progRec.values("web-rootdisk")
	if !slices.ContainsFunc(progress, pct.MatchString) || progress[len(progress)-1] != "100.0%" {
		t.Errorf("progress values %v", progress)
	}

	dv := e.getDV("web-rootdisk")
	if ref := metav1.GetControllerOf(dv); ref == nil || ref.UID != vm.UID || ref.Kind != "VirtualMachine" {
		t.Errorf("DataVolume owner = %+v", ref)
	}
	if dv.Labels[virtv1.CreatedByLabel] != string(vm.UID) || dv.Labels["disk"] != "web-rootdisk" {
		t.Errorf("DataVolume labels = %v", dv.Labels)
	}
	if dv.Status.ClaimName != "web-rootdisk" || !hasDVCondition(dv, cdiv1.DataVolumeReady, corev1.ConditionTrue) ||
		!hasDVCondition(dv, cdiv1.DataVolumeBound, corev1.ConditionTrue) {
		t.Errorf("DataVolume status: %s", describeDV(dv))
	}
	// The VMI started only after the import finished.
	ready := findDVCondition(dv, cdiv1.DataVolumeReady)
	if first := vmi.Status.PhaseTransitionTimestamps[0].PhaseTransitionTimestamp; first.Before(&ready.LastTransitionTime) {
		t.Errorf("VMI pending at %v, DataVolume ready at %v", first, ready.LastTransitionTime)
	}

	pvc := e.getPVC("web-rootdisk")
	if ref := metav1.GetControllerOf(pvc); ref == nil || ref.UID != dv.UID || ref.Kind != "DataVolume" {
		t.Errorf("PVC owner = %+v", ref)
	}
	size := resource.MustParse("10Gi")
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != "local-lvm" ||
		pvc.Spec.Resources.Requests.Storage().Cmp(size) != 0 || pvc.Status.Capacity.Storage().Cmp(size) != 0 ||
		// CDI's StorageProfile for topolvm: ReadWriteOnce, Block first.
		*pvc.Spec.VolumeMode != corev1.PersistentVolumeBlock || pvc.Spec.AccessModes[0] != corev1.ReadWriteOnce ||
		pvc.Annotations[annProvisioner] != "topolvm.io" || pvc.Spec.VolumeName == "" {
		t.Errorf("PVC = %+v", pvc)
	}
}

func TestHaltedVMProvisionsItsDataVolumesThenIsStopped(t *testing.T) {
	e := newCDIEnv(t).run(Options{DataVolumeDelay: 200 * time.Millisecond})
	rec := recordStatuses(e.env)
	ceph := "ceph-rbd"
	e.createVM(withDataVolume(testVM("cold", virtv1.RunStrategyHalted), "data", blankDVT("cold-data", "2Gi", &ceph)))
	e.waitDVPhase("cold-data", cdiv1.Succeeded)
	e.waitStopped("cold")
	rec.requireSequence(t, "cold", virtv1.VirtualMachineStatusProvisioning, virtv1.VirtualMachineStatusStopped)
	if pvc := e.getPVC("cold-data"); *pvc.Spec.StorageClassName != "ceph-rbd" || pvc.Annotations[annProvisioner] != "rbd.csi.ceph.com" {
		t.Errorf("PVC = %+v", pvc)
	}
}

func TestDataVolumeCloneWaitsForItsSource(t *testing.T) {
	e := newCDIEnv(t).run(Options{})
	rec := recordPhases(t, e.ctx, NewDataVolumeInformer(e.cdi, testNS, 0), func(obj any) (string, string) {
		dv := obj.(*cdiv1.DataVolume)
		return dv.Name, string(dv.Status.Phase)
	})
	dv := &cdiv1.DataVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "copy", Namespace: testNS},
		Spec: cdiv1.DataVolumeSpec{
			Source:  &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: testNS, Name: "golden"}},
			Storage: &cdiv1.StorageSpec{},
		},
	}
	if _, err := e.cdi.CdiV1beta1().DataVolumes(testNS).Create(e.ctx, dv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := e.waitDV("copy", "waiting for the source", func(dv *cdiv1.DataVolume) bool {
		c := findDVCondition(dv, cdiv1.DataVolumeBound)
		return dv.Status.Phase == cdiv1.CloneScheduled && c != nil && c.Reason == reasonCloneWithoutSource
	})
	if c := findDVCondition(got, cdiv1.DataVolumeBound); !strings.Contains(c.Message, "default/golden") {
		t.Errorf("condition message %q", c.Message)
	}
	if e.getPVC("copy") != nil {
		t.Fatal("a PVC was created before the clone source exists")
	}

	if _, err := e.k8s.CoreV1().PersistentVolumeClaims(testNS).Create(e.ctx, testPVC("golden", "ceph-rbd", "7Gi"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitDVPhase("copy", cdiv1.Succeeded)
	// Without a DataVolumeDelay every phase is still reported.
	rec.requireSequence(t, "copy", "Pending", "CloneScheduled", "CloneInProgress", "Succeeded")
	pvc := e.waitPVC("copy")
	// Size from the source; the StorageClass is the default one.
	if pvc.Spec.Resources.Requests.Storage().Cmp(resource.MustParse("7Gi")) != 0 || *pvc.Spec.StorageClassName != "local-lvm" {
		t.Errorf("clone PVC = %+v", pvc.Spec)
	}
}

func TestDataVolumeSources(t *testing.T) {
	block := corev1.PersistentVolumeBlock
	url := "docker://quay.io/containerdisks/debian:12"
	gold := "ceph-rbd"
	size := corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("3Gi")}}
	cases := []struct {
		name  string
		spec  cdiv1.DataVolumeSpec
		phase cdiv1.DataVolumePhase
		check func(t *testing.T, e *cdiEnv, dv *cdiv1.DataVolume)
	}{
		{"http", cdiv1.DataVolumeSpec{
			Source:  &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "https://example.com/debian.iso"}},
			Storage: &cdiv1.StorageSpec{Resources: size},
		}, cdiv1.Succeeded, nil},
		{"registry-pvc-api", cdiv1.DataVolumeSpec{
			Source: &cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{URL: &url}},
			PVC: &corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}, VolumeMode: &block,
				StorageClassName: &gold, Resources: size,
			},
		}, cdiv1.Succeeded, func(t *testing.T, e *cdiEnv, dv *cdiv1.DataVolume) {
			pvc := e.waitPVC(dv.Name)
			if *pvc.Spec.VolumeMode != block || pvc.Spec.AccessModes[0] != corev1.ReadWriteMany || *pvc.Spec.StorageClassName != gold {
				t.Errorf("PVC spec = %+v", pvc.Spec)
			}
		}},
		{"upload", cdiv1.DataVolumeSpec{
			Source:  &cdiv1.DataVolumeSource{Upload: &cdiv1.DataVolumeSourceUpload{}},
			Storage: &cdiv1.StorageSpec{Resources: size},
		}, cdiv1.UploadReady, nil},
		{"no-size", cdiv1.DataVolumeSpec{
			Source:  &cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}},
			Storage: &cdiv1.StorageSpec{},
		}, cdiv1.Failed, func(t *testing.T, e *cdiEnv, dv *cdiv1.DataVolume) {
			if c := findDVCondition(dv, cdiv1.DataVolumeRunning); c == nil || c.Reason != reasonDVError || c.Message != msgMissingStorageSize {
				t.Errorf("conditions: %s", describeDV(dv))
			}
			if e.getPVC(dv.Name) != nil {
				t.Error("a failed DataVolume got a PVC")
			}
		}},
		{"datasource-missing", cdiv1.DataVolumeSpec{
			SourceRef: &cdiv1.DataVolumeSourceRef{Kind: "DataSource", Name: "debian"},
			Storage:   &cdiv1.StorageSpec{Resources: size},
		}, cdiv1.Pending, func(t *testing.T, e *cdiEnv, dv *cdiv1.DataVolume) {
			e.waitDV(dv.Name, "DataSource condition", func(dv *cdiv1.DataVolume) bool {
				c := findDVCondition(dv, cdiv1.DataVolumeBound)
				return c != nil && c.Reason == reasonDataSourceNotFound
			})
		}},
	}
	e := newCDIEnv(t).run(Options{DataVolumeDelay: 100 * time.Millisecond})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dv := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Name: tc.name, Namespace: testNS}, Spec: tc.spec}
			if _, err := e.cdi.CdiV1beta1().DataVolumes(testNS).Create(e.ctx, dv, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			got := e.waitDVPhase(tc.name, tc.phase)
			if tc.check != nil {
				tc.check(t, e, got)
			}
		})
	}
}

// An http import gives its claim the DataVolume's annotations and labels
// (CDI copies them), and an import from a host that cannot resolve fails
// as CDI reports it: ImportInProgress, Running=False reason Error, a restart.
func TestHTTPImport(t *testing.T) {
	e := newCDIEnv(t).run(Options{DataVolumeDelay: 100 * time.Millisecond})
	size := corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}
	create := func(name, url string) {
		dv := &cdiv1.DataVolume{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS,
				Annotations: map[string]string{"example.com/file": name + ".iso", annContentType: "overridden"},
				Labels:      map[string]string{"example.com/kind": "iso"}},
			Spec: cdiv1.DataVolumeSpec{
				Source:  &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: url}},
				Storage: &cdiv1.StorageSpec{Resources: size},
			},
		}
		if _, err := e.cdi.CdiV1beta1().DataVolumes(testNS).Create(e.ctx, dv, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create("good", "https://mirror.example.com/good.iso")
	create("bad", "http://fail.invalid/bad.iso")

	e.waitDVPhase("good", cdiv1.Succeeded)
	pvc := e.waitPVC("good")
	if pvc.Annotations["example.com/file"] != "good.iso" || pvc.Labels["example.com/kind"] != "iso" || pvc.Annotations[annContentType] != "kubevirt" {
		t.Errorf("claim metadata: annotations %v labels %v", pvc.Annotations, pvc.Labels)
	}

	bad := e.waitDV("bad", "importer error", func(dv *cdiv1.DataVolume) bool {
		c := findDVCondition(dv, cdiv1.DataVolumeRunning)
		return c != nil && c.Status == corev1.ConditionFalse && c.Reason == reasonDVError
	})
	c := findDVCondition(bad, cdiv1.DataVolumeRunning)
	if bad.Status.Phase != cdiv1.ImportInProgress || bad.Status.RestartCount != 1 ||
		!strings.Contains(c.Message, "Unable to connect to http data source") || !strings.Contains(c.Message, "lookup fail.invalid: no such host") {
		t.Errorf("failed import: %s restarts=%d", describeDV(bad), bad.Status.RestartCount)
	}
	// Once DataVolumeDelay has passed, a reconcile still does not succeed it.
	time.Sleep(200 * time.Millisecond)
	if dv := e.syncedDV("bad"); dv.Status.Phase != cdiv1.ImportInProgress || dv.Status.RestartCount != 1 {
		t.Errorf("failed import later: %s restarts=%d", describeDV(dv), dv.Status.RestartCount)
	}
}

func TestDataVolumeFromDataSourceClones(t *testing.T) {
	e := newCDIEnv(t, testPVC("debian-12-golden", "ceph-rbd", "5Gi")).run(Options{})
	ds := &cdiv1.DataSource{
		ObjectMeta: metav1.ObjectMeta{Name: "debian", Namespace: testNS},
		Spec:       cdiv1.DataSourceSpec{Source: cdiv1.DataSourceSource{PVC: &cdiv1.DataVolumeSourcePVC{Name: "debian-12-golden"}}},
	}
	if _, err := e.cdi.CdiV1beta1().DataSources(testNS).Create(e.ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dv := &cdiv1.DataVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "from-ds", Namespace: testNS},
		Spec:       cdiv1.DataVolumeSpec{SourceRef: &cdiv1.DataVolumeSourceRef{Kind: "DataSource", Name: "debian"}, Storage: &cdiv1.StorageSpec{}},
	}
	if _, err := e.cdi.CdiV1beta1().DataVolumes(testNS).Create(e.ctx, dv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitDVPhase("from-ds", cdiv1.Succeeded)
	if pvc := e.waitPVC("from-ds"); pvc.Status.Capacity.Storage().Cmp(resource.MustParse("5Gi")) != 0 {
		t.Errorf("PVC capacity %v", pvc.Status.Capacity)
	}
}

func TestFailedDataVolumeKeepsVMFromStarting(t *testing.T) {
	e := newCDIEnv(t).run(Options{})
	dvt := blankDVT("broken-disk", "1Gi", nil)
	dvt.Spec.Storage.Resources = corev1.VolumeResourceRequirements{} // no size: CDI fails it
	e.createVM(withDataVolume(testVM("broken", virtv1.RunStrategyAlways), "disk", dvt))
	e.waitDVPhase("broken-disk", cdiv1.Failed)
	e.waitPrintable("broken", virtv1.VirtualMachineStatusDataVolumeError)
	if vm := e.synced("broken"); vm.Status.PrintableStatus != virtv1.VirtualMachineStatusDataVolumeError {
		t.Errorf("after a reconcile: %s", describeVM(vm))
	}
	if vmi := e.getVMI("broken"); vmi != nil {
		t.Fatalf("a VMI started with a failed DataVolume: %s", describeVMI(vmi))
	}
}

func TestDeletingVMDeletesItsDataVolumesAndPVCs(t *testing.T) {
	e := newCDIEnv(t).run(Options{})
	e.createVM(withDataVolume(testVM("web", virtv1.RunStrategyAlways), "rootdisk", blankDVT("web-rootdisk", "1Gi", nil)))
	e.waitRunning("web")
	e.waitPVC("web-rootdisk")
	if err := e.kv.KubevirtV1().VirtualMachines(testNS).Delete(e.ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "VM", func() bool {
		_, err := e.kv.KubevirtV1().VirtualMachines(testNS).Get(e.ctx, "web", metav1.GetOptions{})
		return err == nil
	})
	waitGone(t, "DataVolume", func() bool { return e.getDV("web-rootdisk") != nil })
	waitGone(t, "PVC", func() bool { return e.getPVC("web-rootdisk") != nil })
	e.waitNoVMI("web")
}

func TestDataVolumeAndExistingPVC(t *testing.T) {
	e := newCDIEnv(t, testPVC("taken", "local-lvm", "1Gi"), testPVC("restored", "local-lvm", "1Gi")).run(Options{})
	mk := func(name string, ann map[string]string) {
		dv := &cdiv1.DataVolume{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, Annotations: ann},
			Spec:       blankDVT(name, "1Gi", nil).Spec,
		}
		if _, err := e.cdi.CdiV1beta1().DataVolumes(testNS).Create(e.ctx, dv, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mk("taken", nil)
	dv := e.waitDV("taken", "ErrResourceExists", func(dv *cdiv1.DataVolume) bool {
		c := findDVCondition(dv, cdiv1.DataVolumeBound)
		return c != nil && c.Reason == reasonResourceExists
	})
	if dv.Status.Phase != cdiv1.Pending {
		t.Errorf("phase %s", dv.Status.Phase)
	}
	if metav1.GetControllerOf(e.getPVC("taken")) != nil {
		t.Error("the PVC was taken over")
	}

	mk("restored", map[string]string{AnnotationPrePopulated: "restored"})
	dv = e.waitDVPhase("restored", cdiv1.Succeeded)
	if ref := metav1.GetControllerOf(e.getPVC("restored")); ref == nil || ref.UID != dv.UID {
		t.Errorf("PVC not adopted: %+v", ref)
	}
}

func TestPVCsOfDeletedOwnersAreCollectedWithoutCDI(t *testing.T) {
	e := newEnv(t)
	e.run(Options{})
	vm := e.createVM(testVM("owner", virtv1.RunStrategyHalted))
	pvc := testPVC("owned", "local-lvm", "1Gi")
	pvc.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(vm, virtv1.VirtualMachineGroupVersionKind)}
	if _, err := e.k8s.CoreV1().PersistentVolumeClaims(testNS).Create(e.ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.k8s.CoreV1().PersistentVolumeClaims(testNS).Create(e.ctx, testPVC("free", "local-lvm", "1Gi"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitStopped("owner")
	if err := e.kv.KubevirtV1().VirtualMachines(testNS).Delete(e.ctx, "owner", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "owned PVC", func() bool { return e.getPVC("owned") != nil })
	if e.getPVC("free") == nil {
		t.Error("an unowned PVC was deleted")
	}
}

func TestWithoutCDIDataVolumeTemplatesDoNotHoldTheVM(t *testing.T) {
	e := newEnv(t).run(Options{})
	e.createVM(withDataVolume(testVM("web", virtv1.RunStrategyAlways), "rootdisk", blankDVT("web-rootdisk", "1Gi", nil)))
	e.waitRunning("web")
}

func TestPVCProtectionReleasedWhenUnused(t *testing.T) {
	// The fake Kubernetes clientset deletes at once; seed a PVC that is
	// already being deleted to exercise the finalizer handling.
	now := metav1.Now()
	pvc := testPVC("leaving", "local-lvm", "1Gi")
	pvc.Finalizers = []string{pvcProtectionFinalizer, "example.com/keep"}
	pvc.DeletionTimestamp = &now
	e := newEnv(t, pvc)
	e.run(Options{})
	eventually(t, "pvc-protection removed", func() (bool, string) {
		p := e.getPVC("leaving")
		return p != nil && slices.Equal(p.Finalizers, []string{"example.com/keep"}), strings.Join(p.Finalizers, ",")
	})
}

func hasDVCondition(dv *cdiv1.DataVolume, t cdiv1.DataVolumeConditionType, s corev1.ConditionStatus) bool {
	c := findDVCondition(dv, t)
	return c != nil && c.Status == s
}

// DisableSnapshots is for API servers without the snapshot.kubevirt.io and
// clone.kubevirt.io CRDs: the controller runs without listing them, and
// leaves snapshots and the VMs' volumeSnapshotStatuses alone.
func TestDisableSnapshots(t *testing.T) {
	e := newEnv(t, testPVC("web-data", "local-lvm", "1Gi"))
	snapshotAPIs := []string{"virtualmachinesnapshots", "virtualmachinesnapshotcontents", "virtualmachinerestores", "virtualmachineclones"}
	fake, isFake := e.kv.(*FakeKubeVirtClientset)
	if isFake {
		// As such a server answers: an informer on them never syncs.
		for _, res := range snapshotAPIs {
			fake.PrependReactor("list", res, func(a k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewNotFound(a.GetResource().GroupResource(), "")
			})
		}
	}
	e.run(Options{DisableSnapshots: true})
	e.createVM(diskVM("web", virtv1.RunStrategyAlways))
	e.waitRunning("web")
	e.createSnapshot("s", "web")
	// The VM controller has reconciled the VM since the snapshot exists.
	if vm := e.synced("web"); vm.Status.VolumeSnapshotStatuses != nil {
		t.Errorf("volumeSnapshotStatuses = %+v", vm.Status.VolumeSnapshotStatuses)
	}
	if s := e.getSnapshot("s"); s.Status != nil || len(s.Finalizers) != 0 {
		t.Errorf("snapshot handled: %s", describeSnapshot(s))
	}
	if isFake {
		for _, a := range fake.Actions() {
			if (a.GetVerb() == "list" || a.GetVerb() == "watch") && slices.Contains(snapshotAPIs, a.GetResource().Resource) {
				t.Errorf("%s %s with snapshots disabled", a.GetVerb(), a.GetResource().Resource)
			}
		}
	}
}

// CDI clones a claim only while no pod writes to it (CloneSourceInUse):
// the clone stays CloneScheduled while a running guest uses the source,
// and proceeds once it stopped.
func TestDataVolumeCloneWaitsWhileTheSourceRuns(t *testing.T) {
	vm := withPVC(testVM("src", virtv1.RunStrategyAlways), "scsi0", "golden")
	vm.Spec.Template.Spec.Domain.Devices.Disks = []virtv1.Disk{{Name: "scsi0", DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusSCSI}}}}
	e := newCDIEnv(t, testPVC("golden", "ceph-rbd", "7Gi"), vm).run(Options{})
	e.waitRunning("src")
	dv := &cdiv1.DataVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "copy", Namespace: testNS},
		Spec: cdiv1.DataVolumeSpec{
			Source:  &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: testNS, Name: "golden"}},
			Storage: &cdiv1.StorageSpec{},
		},
	}
	if _, err := e.cdi.CdiV1beta1().DataVolumes(testNS).Create(e.ctx, dv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitDVPhase("copy", cdiv1.CloneScheduled)
	// The controller has looked at it and keeps it waiting.
	time.Sleep(300 * time.Millisecond)
	if got := e.getDV("copy"); got.Status.Phase != cdiv1.CloneScheduled || e.getPVC("copy") != nil {
		t.Fatalf("clone of a claim in use: %s", describeDV(got))
	}
	if err := e.kv.KubevirtV1().VirtualMachines(testNS).Stop(e.ctx, "src", &virtv1.StopOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitDVPhase("copy", cdiv1.Succeeded)
}
