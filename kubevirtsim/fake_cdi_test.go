package kubevirtsim

import (
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

func TestFakeCDIClientsetSemantics(t *testing.T) {
	seeded := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Name: "seeded", Namespace: testNS},
		Status: cdiv1.DataVolumeStatus{Phase: cdiv1.Succeeded}}
	k8s, kv, cdi := NewFakeClientsWithCDI(seeded, testVM("vm", virtv1.RunStrategyHalted), testNode("n"))
	ctx := t.Context()
	dvs := cdi.CdiV1beta1().DataVolumes(testNS)

	// Objects went to the right clientsets.
	if got, err := dvs.Get(ctx, "seeded", metav1.GetOptions{}); err != nil || got.Status.Phase != cdiv1.Succeeded || got.UID == "" || got.ResourceVersion == "" {
		t.Fatalf("seeded DataVolume: %+v %v", got, err)
	}
	if _, err := kv.KubevirtV1().VirtualMachines(testNS).Get(ctx, "vm", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := k8s.CoreV1().Nodes().Get(ctx, "n", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}

	// Status subresource: create drops status, update ignores it,
	// UpdateStatus changes only the status.
	dv := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Name: "dv", Namespace: testNS},
		Spec: cdiv1.DataVolumeSpec{ContentType: cdiv1.DataVolumeKubeVirt}, Status: cdiv1.DataVolumeStatus{Phase: cdiv1.Succeeded}}
	created, err := dvs.Create(ctx, dv, metav1.CreateOptions{})
	if err != nil || created.Status.Phase != "" || created.Generation != 1 {
		t.Fatalf("create: %+v %v", created, err)
	}
	upd := created.DeepCopy()
	upd.Status.Phase = cdiv1.Failed
	upd.Labels = map[string]string{"a": "b"}
	updated, err := dvs.Update(ctx, upd, metav1.UpdateOptions{})
	if err != nil || updated.Status.Phase != "" || updated.Labels["a"] != "b" {
		t.Fatalf("update: %+v %v", updated, err)
	}
	if _, err := dvs.Update(ctx, upd, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("stale update: %v", err)
	}
	st := updated.DeepCopy()
	st.Status.Phase = cdiv1.Pending
	st.Labels = nil
	st.Spec.ContentType = cdiv1.DataVolumeArchive
	res, err := dvs.UpdateStatus(ctx, st, metav1.UpdateOptions{})
	if err != nil || res.Status.Phase != cdiv1.Pending || res.Labels["a"] != "b" || res.Spec.ContentType != cdiv1.DataVolumeKubeVirt {
		t.Fatalf("update status: %+v %v", res, err)
	}

	// NewFakeClients has no CDI clientset and drops CDI objects.
	_, kv2 := NewFakeClients(seeded)
	if kv2 == nil {
		t.Fatal("no KubeVirt clientset")
	}
}
