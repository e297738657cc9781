package kube

import (
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

func TestStripStorageKeepsOwnKeys(t *testing.T) {
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{
		Labels: map[string]string{"app": "containerized-data-importer", translate.LabelVMID: "100"},
		Annotations: map[string]string{
			"pv.kubernetes.io/bind-completed": "yes", "cdi.kubevirt.io/storage.populator.progress": "100.0%",
			translate.AnnotationISOFile: "debian.iso",
		},
		Finalizers:    []string{"kubernetes.io/pvc-protection"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "x"}},
	}}
	if _, err := stripStorage(pvc); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(pvc.Labels, map[string]string{translate.LabelVMID: "100"}) ||
		!reflect.DeepEqual(pvc.Annotations, map[string]string{translate.AnnotationISOFile: "debian.iso"}) ||
		pvc.Finalizers != nil || pvc.ManagedFields != nil {
		t.Fatalf("stripped claim: labels %v, annotations %v, finalizers %v, managed fields %v", pvc.Labels, pvc.Annotations, pvc.Finalizers, pvc.ManagedFields)
	}
	state := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{
		translate.StateClaimLabel: "win-11", "app": "x"}}}
	if _, err := stripStorage(state); err != nil || !reflect.DeepEqual(state.Labels, map[string]string{translate.StateClaimLabel: "win-11"}) {
		t.Fatalf("a state claim's labels: %v, want KubeVirt's naming its VM", state.Labels)
	}
	bare := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"a": "b"}}}
	if _, err := stripStorage(bare); err != nil || bare.Annotations != nil || bare.Labels != nil {
		t.Fatalf("nothing of the plugin's: annotations %v, labels %v", bare.Annotations, bare.Labels)
	}
}

// TestDiskClaimsIndex: a storage's disks come from an index that holds
// only the disks of each StorageClass, so a listing costs the claims of
// that storage, never its files (the directory storage's) nor other
// classes' claims.
func TestDiskClaimsIndex(t *testing.T) {
	onClass := func(ns, name, class string, annotations map[string]string) *corev1.PersistentVolumeClaim {
		pvc := claim(ns, name, nil)
		pvc.Spec.StorageClassName = &class
		pvc.Annotations = annotations
		return pvc
	}
	iso := map[string]string{translate.AnnotationISOFile: "debian.iso"}
	c := poolCluster(t, Options{},
		onClass("idx-b", "vm-101-disk-0", "idx-fast", nil),
		onClass("idx-a", "vm-100-disk-1", "idx-fast", nil),
		onClass("idx-a", "vm-100-disk-0", "idx-fast", nil),
		onClass("idx-a", "iso-debian", "idx-fast", iso),
		onClass("idx-a", "vm-102-disk-0", "idx-slow", nil),
	)
	names := func(claims []*corev1.PersistentVolumeClaim) []string {
		out := []string{}
		for _, pvc := range claims {
			out = append(out, pvc.Namespace+"/"+pvc.Name)
		}
		return out
	}
	if got, want := names(c.DiskClaims("idx-fast")), []string{"idx-a/vm-100-disk-0", "idx-a/vm-100-disk-1", "idx-b/vm-101-disk-0"}; !reflect.DeepEqual(got, want) {
		t.Errorf("DiskClaims(idx-fast) = %v, want %v", got, want)
	}
	if n := len(c.pvcs.byIndex(pvcStorageIndex, "idx-fast")); n != 3 {
		t.Errorf("the idx-fast index entry holds %d claims, want its 3 disks (no file)", n)
	}
	if !slices.Contains(names(c.FileClaims(translate.ContentISO)), "idx-a/iso-debian") {
		t.Errorf("FileClaims(iso) = %v, want the ISO", names(c.FileClaims(translate.ContentISO)))
	}
	if got := names(c.DiskClaims("idx-none")); len(got) != 0 {
		t.Errorf("DiskClaims(idx-none) = %v, want none", got)
	}
}
