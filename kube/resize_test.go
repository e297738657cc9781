package kube

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/caddy-proxmox/caddy-proxmox/kubevirtsim"
)

// TestGrowClaim: a Filesystem-mode claim asks for the disk plus CDI's
// filesystem overhead (CDIConfig status), so a grow smaller than the
// overhead still grows it; a Block one for the disk; a claim whose
// capacity already holds the size is left alone.
func TestGrowClaim(t *testing.T) {
	claim := func(name string, mode corev1.PersistentVolumeMode, request, capacity string) *corev1.PersistentVolumeClaim {
		sc := "local-lvm"
		return &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &sc, VolumeMode: &mode,
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(request)}}},
			Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound,
				Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(capacity)}},
		}
	}
	objs := []k8sruntime.Object{kubevirtsim.SeedCDIConfig(),
		// 4 GiB disks as CDI made their claims.
		claim("fs", corev1.PersistentVolumeFilesystem, "4552665334", "4552665334"),
		claim("block", corev1.PersistentVolumeBlock, "4Gi", "4Gi"),
		claim("roomy", corev1.PersistentVolumeFilesystem, "4552665334", "8Gi"),
	}
	kc, kv, cdi := kubevirtsim.NewFakeClientsWithCDI(objs...)
	c := New(kc, kv, nil, Options{CDI: cdi})
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		bytes   int64
		request int64 // the claim's request after
		grown   bool
	}{
		{"fs", 4<<30 + 100<<20, 4663814390, true}, // +100M: below the old request without the overhead
		{"block", 4<<30 + 100<<20, 4<<30 + 100<<20, true},
		{"roomy", 5 << 30, 4552665334, false},
	} {
		g, err := c.GrowClaim(ctx, "default", tc.name, tc.bytes)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		pvc, err := kc.CoreV1().PersistentVolumeClaims("default").Get(ctx, tc.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := pvc.Spec.Resources.Requests.Storage().Value(); got != tc.request || g.Grown() != tc.grown {
			t.Errorf("%s: request %d (grown %v), want %d (%v); %+v", tc.name, got, g.Grown(), tc.request, tc.grown, g)
		}
	}
	if _, err := c.GrowClaim(ctx, "default", "missing", 1<<30); !IsNotFound(err) {
		t.Errorf("a claim not created yet: %v", err)
	}
}
