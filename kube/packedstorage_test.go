package kube

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/caddy-proxmox/caddy-proxmox/internal/fleet"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// storageObjects are the DataVolumes and claims of a small fleet, and
// some that are not alike: a file's (annotations of the plugin, an http
// source), a failed copy's, a state claim, one being deleted.
func storageObjects(t *testing.T) (dvs []*cdiv1.DataVolume, pvcs []*corev1.PersistentVolumeClaim) {
	t.Helper()
	objs, err := fleet.Objects(fleet.Spec{Namespace: "default", N: 3, FirstVMID: 1000, Nodes: []string{"kv-node-1.lab.internal"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		switch o := o.(type) {
		case *cdiv1.DataVolume:
			dvs = append(dvs, o)
		case *corev1.PersistentVolumeClaim:
			pvcs = append(pvcs, o)
		}
	}
	file := dvs[0].DeepCopy()
	file.Name, file.UID, file.OwnerReferences = "iso-debian", "f1", nil
	file.Annotations = map[string]string{translate.AnnotationISOFile: "debian.iso", translate.AnnotationFilePending: "true", "x": "y"}
	file.Spec.Source = &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "https://example.org/debian.iso", SecretRef: "s"}}
	file.Status = cdiv1.DataVolumeStatus{Phase: cdiv1.ImportInProgress, Progress: "42.0%", RestartCount: 1, Conditions: []cdiv1.DataVolumeCondition{
		{Type: cdiv1.DataVolumeRunning, Status: corev1.ConditionFalse, Reason: "Error", Message: "unexpected EOF"},
	}}
	failed := dvs[1].DeepCopy()
	failed.Status.Phase = cdiv1.Failed
	failed.Status.Conditions[2] = cdiv1.DataVolumeCondition{Type: cdiv1.DataVolumeRunning, Status: corev1.ConditionFalse, Reason: cdiErrClaimNotValid, Message: "no access modes"}
	dvs = append(dvs, file, failed)

	fileClaim := pvcs[0].DeepCopy()
	fileClaim.Name, fileClaim.UID = "iso-debian", "f2"
	fileClaim.Annotations[translate.AnnotationISOFile] = "debian.iso"
	fileClaim.Annotations[translate.AnnotationFileSize] = "1234"
	fileClaim.OwnerReferences[0].Name, fileClaim.OwnerReferences[0].UID = "iso-debian", "f1"
	state := pvcs[1].DeepCopy()
	state.Name = "persistent-state-for-win-11"
	state.Labels[translate.StateClaimLabel] = "win-11"
	state.Spec.StorageClassName = nil
	state.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}
	no := false
	state.OwnerReferences = append(state.OwnerReferences, metav1.OwnerReference{
		APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: "win-11", UID: "5d0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b", BlockOwnerDeletion: &no,
	})
	block := corev1.PersistentVolumeBlock
	gone := pvcs[2].DeepCopy()
	gone.Name = "base-1002-disk-1"
	gone.DeletionTimestamp = &metav1.Time{Time: gone.CreationTimestamp.Add(3600e9)}
	gone.GenerateName, gone.Generation = "base-", 3
	gone.Spec.VolumeMode = &block
	gone.Spec.Resources.Limits = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("40Gi")}
	pvcs = append(pvcs, fileClaim, state, gone)
	return dvs, pvcs
}

// TestPackedStorageDecodesWhole: what the claim and DataVolume caches keep
// decodes to exactly what stripStorage keeps of the object, and the
// records' own fields (what indexes, listings and ClaimPopulated read)
// agree with it.
func TestPackedStorageDecodesWhole(t *testing.T) {
	dvs, pvcs := storageObjects(t)
	codec := &specCodec{}
	// Thrice over: the later ones are packed against the dictionary the
	// first ones made.
	for _, dv := range slices.Concat(dvs, dvs, dvs) {
		want := mustStrip(t, stripStorage, dv.DeepCopy()).(*cdiv1.DataVolume)
		p := mustStrip(t, packingDataVolumes(codec), dv.DeepCopy()).(*packedDataVolume)
		if got := p.dataVolume(); !equality.Semantic.DeepEqual(got, want) {
			t.Errorf("DataVolume %s decodes to\n%+v\nwant\n%+v", dv.Name, got, want)
		}
		if p.phase != dv.Status.Phase || p.GetUID() != dv.UID || !reflect.DeepEqual(p.GetOwnerReferences(), want.OwnerReferences) {
			t.Errorf("record of DataVolume %s: phase %q, uid %q, owners %v", dv.Name, p.phase, p.GetUID(), p.GetOwnerReferences())
		}
		if again, _ := packingDataVolumes(codec)(p); again != any(p) {
			t.Errorf("the transform repacked the record of %s", dv.Name)
		}
	}
	if codec.dict.Load() == nil {
		t.Errorf("no dictionary after %d DataVolumes", 3*len(dvs))
	}
	for _, pvc := range pvcs {
		want := mustStrip(t, stripStorage, pvc.DeepCopy()).(*corev1.PersistentVolumeClaim)
		p := mustStrip(t, packingClaims, pvc.DeepCopy()).(*packedClaim)
		if got := p.claim(); !equality.Semantic.DeepEqual(got, want) {
			t.Errorf("claim %s decodes to\n%+v\nwant\n%+v", pvc.Name, got, want)
		}
		// The index functions read the record as they read the claim.
		var class []string
		if want.Spec.StorageClassName != nil {
			if _, _, file := translate.FileOf(want.Annotations); !file {
				class = []string{*want.Spec.StorageClassName}
			}
		}
		var content []string
		if c, _, ok := translate.FileOf(want.Annotations); ok {
			content = []string{c}
		}
		for _, ix := range []struct {
			name string
			fn   func(any) ([]string, error)
			want []string
		}{{"storage class", pvcStorageIndexFunc, class}, {"file", pvcFileIndexFunc, content}} {
			if got, _ := ix.fn(p); !slices.Equal(got, ix.want) {
				t.Errorf("claim %s: %s index %v, want %v", pvc.Name, ix.name, got, ix.want)
			}
		}
		if got, want := p.bytes(), translate.ClaimInfoOf(want).Bytes; got != want {
			t.Errorf("claim %s: %d bytes, ClaimInfoOf says %d", pvc.Name, got, want)
		}
	}
}

// TestPackedClaimsShareTheirParts: claims alike keep one copy of their
// namespace, class, modes, sizes and owner kinds, and the typed claims
// built from a record share nothing a caller could change with it but
// what every cached object shares.
func TestPackedClaimsShareTheirParts(t *testing.T) {
	_, pvcs := storageObjects(t)
	pvcs[1].Namespace = strings.Clone(pvcs[1].Namespace)
	pvcs[1].OwnerReferences[0].Kind = strings.Clone(pvcs[1].OwnerReferences[0].Kind)
	a := mustStrip(t, packingClaims, pvcs[0].DeepCopy()).(*packedClaim)
	b := mustStrip(t, packingClaims, pvcs[1].DeepCopy()).(*packedClaim)
	same := func(x, y any) bool { return reflect.ValueOf(x).UnsafePointer() == reflect.ValueOf(y).UnsafePointer() }
	if !same(a.class, b.class) || !same(a.volumeMode, b.volumeMode) || !same(a.accessModes, b.accessModes) ||
		!same(a.requests, b.requests) || a.owner.kind != b.owner.kind || unsafeString(a.Namespace) != unsafeString(b.Namespace) {
		t.Error("parts equal between claims are kept twice")
	}
	if unsafeString(a.owner.name) != unsafeString(a.Name) {
		t.Error("the owner DataVolume's name, the claim's own, is kept twice")
	}
	f := mustStrip(t, packingClaims, pvcs[3].DeepCopy()).(*packedClaim)
	got := f.claim()
	got.Annotations["changed"] = "by a caller"
	if f.annotation("changed") != "" || f.claim().Annotations["changed"] != "" {
		t.Error("a built claim's annotations are the record's")
	}
}

// unsafeString is where a string's bytes are.
func unsafeString(s string) *byte { return unsafe.StringData(s) }

// TestPutRecords: writes of ours go into the claim and DataVolume caches
// as records, newer than the cached ones by resourceVersion, never older;
// the readers see them (ClaimPopulated, DataVolume, the indexes).
func TestPutRecords(t *testing.T) {
	dvs, pvcs := storageObjects(t)
	c := poolCluster(t, Options{AssumeKubeVirtAPIs: true}, []k8sruntime.Object{dvs[3], pvcs[3]}...)
	ns := pvcs[3].Namespace
	if p, ok := c.pvcs.get(ns, "iso-debian").(*packedClaim); !ok || p.version != pvcs[3].ResourceVersion {
		t.Fatalf("cached claim: %#v", c.pvcs.get(ns, "iso-debian"))
	}
	if c.ClaimPopulated(c.CachedPVC(ns, "iso-debian")) {
		t.Error("the claim of a DataVolume importing counts as populated")
	}

	older := pvcs[3].DeepCopy()
	older.ResourceVersion = "1"
	older.Annotations[translate.AnnotationFileSize] = "1"
	if !olderThan(older, c.pvcs.get(ns, "iso-debian")) {
		t.Error("olderThan: resourceVersion 1 is not older than the record's")
	}
	c.pvcs.put(older, false)
	if got := c.CachedPVC(ns, "iso-debian").Annotations[translate.AnnotationFileSize]; got != "1234" {
		t.Errorf("an older write replaced the cached claim: file size %q", got)
	}
	newer := pvcs[3].DeepCopy()
	newer.ResourceVersion = "999999"
	delete(newer.Annotations, translate.AnnotationISOFile)
	c.pvcs.put(newer, false)
	if got := c.CachedPVC(ns, "iso-debian"); got.ResourceVersion != "999999" || got.Annotations[translate.AnnotationISOFile] != "" {
		t.Errorf("the newer write is not cached: %+v", got.ObjectMeta)
	}
	if _, ok := c.pvcs.get(ns, "iso-debian").(*packedClaim); !ok {
		t.Error("put cached a claim as it is, not its record")
	}
	disk := slices.ContainsFunc(c.DiskClaims(*newer.Spec.StorageClassName), func(p *corev1.PersistentVolumeClaim) bool { return p.Name == "iso-debian" })
	if files := c.FileClaims(""); len(files) != 0 || !disk {
		t.Errorf("after the write: files %d, the claim a disk %v, want it a disk now", len(files), disk)
	}

	done := dvs[3].DeepCopy()
	done.ResourceVersion = "999999"
	done.Status.Phase = cdiv1.Succeeded
	c.dataVolumes.put(done, false)
	if _, ok := c.dataVolumes.get(ns, "iso-debian").(*packedDataVolume); !ok {
		t.Error("put cached a DataVolume as it is, not its record")
	}
	if got := c.DataVolume(ns, "iso-debian"); got.Status.Phase != cdiv1.Succeeded || got.Status.Progress != "42.0%" || got.Spec.Source.HTTP == nil {
		t.Errorf("DataVolume after the write: %+v", got)
	}
	if !c.ClaimPopulated(c.CachedPVC(ns, "iso-debian")) {
		t.Error("the claim of a DataVolume that succeeded counts as not populated")
	}
}
