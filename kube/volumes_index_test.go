package kube

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

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

// onClass is a claim of ns/name on a StorageClass, 1 GiB unless size says.
func onClass(ns, name, class string, annotations map[string]string) *corev1.PersistentVolumeClaim {
	pvc := claim(ns, name, nil)
	pvc.Spec.StorageClassName = &class
	pvc.Annotations = annotations
	pvc.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
	return pvc
}

// TestDiskClaimsBytes: a class's usage counts its disk claims (bound
// capacity, else the request), not its files, and follows the claims as
// they change although it is summed once per change.
func TestDiskClaimsBytes(t *testing.T) {
	bound := onClass("use-a", "vm-100-disk-0", "use-fast", nil)
	bound.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}
	c := poolCluster(t, Options{},
		bound,
		onClass("use-b", "vm-101-disk-0", "use-fast", nil),
		onClass("use-a", "iso-debian", "use-fast", map[string]string{translate.AnnotationISOFile: "debian.iso"}),
		onClass("use-a", "vm-102-disk-0", "use-slow", nil),
	)
	if got, want := c.DiskClaimsBytes("use-fast"), int64(3<<30); got != want {
		t.Errorf("DiskClaimsBytes(use-fast) = %d, want %d (2Gi bound + 1Gi requested, no ISO)", got, want)
	}
	if got, want := c.DiskClaimsBytes("use-slow"), int64(1<<30); got != want {
		t.Errorf("DiskClaimsBytes(use-slow) = %d, want %d", got, want)
	}
	if got := c.DiskClaimsBytes("use-none"); got != 0 {
		t.Errorf("DiskClaimsBytes(use-none) = %d, want 0", got)
	}
	if _, err := c.own.kube.CoreV1().PersistentVolumeClaims("use-b").Create(context.Background(), onClass("use-b", "vm-103-disk-0", "use-slow", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the new claim to count", func() (bool, string) {
		got := c.DiskClaimsBytes("use-slow")
		return got == 2<<30, fmt.Sprintf("use-slow uses %d", got)
	})
}

// TestClaimUsersByNamespace: a claim's users are the VMs of its namespace
// only, also beside namespaces whose names extend it, in name order, and
// the vmid table keeps the VM cache's key strings rather than copies.
func TestClaimUsersByNamespace(t *testing.T) {
	using := func(ns, name, claim string) *kubevirtv1.VirtualMachine {
		vm := vmAt(ns, name, 0)
		vm.Spec.Template = &kubevirtv1.VirtualMachineInstanceTemplateSpec{Spec: kubevirtv1.VirtualMachineInstanceSpec{
			Volumes: []kubevirtv1.Volume{{Name: "scsi0", VolumeSource: kubevirtv1.VolumeSource{PersistentVolumeClaim: &kubevirtv1.PersistentVolumeClaimVolumeSource{
				PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}},
		}}
		return vm
	}
	c := poolCluster(t, Options{},
		using("cu", "b", "shared"), using("cu", "a", "shared"), using("cu", "c", "other"),
		using("cu-x", "a", "shared"), using("cux", "a", "shared"), using("c", "a", "shared"),
	)
	names := func(vms []*packedVM) []string {
		out := []string{}
		for _, vm := range vms {
			out = append(out, vm.Namespace+"/"+vm.Name)
		}
		return out
	}
	if got, want := names(c.claimUsers("cu", "shared", "")), []string{"cu/a", "cu/b"}; !slices.Equal(got, want) {
		t.Errorf("claimUsers(cu, shared) = %v, want %v", got, want)
	}
	if got, want := names(c.claimUsers("cu", "shared", "uid-cu-a")), []string{"cu/b"}; !slices.Equal(got, want) {
		t.Errorf("claimUsers(cu, shared) but cu/a = %v, want %v", got, want)
	}
	if got, want := names(c.claimUsers("cu-x", "shared", "")), []string{"cu-x/a"}; !slices.Equal(got, want) {
		t.Errorf("claimUsers(cu-x, shared) = %v, want %v", got, want)
	}
	if got := c.claimUsers("cu", "none", ""); len(got) != 0 {
		t.Errorf("claimUsers(cu, none) = %v, want none", names(got))
	}
	if users := c.ClaimUsers("c", "shared", ""); len(users) != 1 || users[0].Name != "a" {
		t.Errorf("ClaimUsers(c, shared) = %v, want c/a", users)
	}

	if got := c.vms.getKeys([]string{"cu/a", "cu/gone", "cux/a"}); len(got) != 3 || got[0].(*packedVM).Name != "a" || got[1] != nil || got[2].(*packedVM).Namespace != "cux" {
		t.Errorf("getKeys = %v, want cu/a, nil, cux/a", got)
	}

	held := map[string]*byte{}
	for _, k := range c.vms.informerFor("").GetStore().ListKeys() {
		held[k] = unsafe.StringData(k)
	}
	for _, k := range c.table().keys {
		if held[k] != unsafe.StringData(k) {
			t.Errorf("the vmid table keeps a copy of the key %s", k)
		}
	}
}
