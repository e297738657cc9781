package kube

import (
	"reflect"
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
	bare := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"a": "b"}}}
	if _, err := stripStorage(bare); err != nil || bare.Annotations != nil || bare.Labels != nil {
		t.Fatalf("nothing of the plugin's: annotations %v, labels %v", bare.Annotations, bare.Labels)
	}
}
