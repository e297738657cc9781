package kube

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// stateClaim is a claim as KubeVirt's backend storage makes it for vm
// (labelled unless legacy), 10Mi asked and capacity got.
func stateClaim(ns, name, vm, capacity string, legacy bool) *corev1.PersistentVolumeClaim {
	sc, fs := "ceph-rbd", corev1.PersistentVolumeFilesystem
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			VolumeMode:       &fs,
			StorageClassName: &sc,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Mi")}},
		},
		Status: corev1.PersistentVolumeClaimStatus{
			Phase:    corev1.ClaimBound,
			Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(capacity)},
		},
	}
	if !legacy {
		pvc.Labels = map[string]string{translate.StateClaimLabel: vm}
	}
	return pvc
}

// TestCloneState: the source's state claim is found as KubeVirt finds it
// (label, else the legacy name; never another VM's), and the clone gets a
// DataVolume copying it under the name and label KubeVirt adopts, owned
// by the clone; the clone's volumes are not provisioned until that copy
// is done.
func TestCloneState(t *testing.T) {
	c := poolCluster(t, Options{AssumeKubeVirtAPIs: true},
		stateClaim("default", "persistent-state-for-win-11-x7k2p", "win-11", "1Gi", false),
		stateClaim("default", "persistent-state-for-win-11-other", "win-12", "1Gi", false),
		stateClaim("lab", "persistent-state-for-legacy-app", "", "10Mi", true),
	)
	ctx := context.Background()
	for _, tc := range []struct{ ns, vm, want string }{
		{"default", "win-11", "persistent-state-for-win-11-x7k2p"},
		{"lab", "legacy-app", "persistent-state-for-legacy-app"},
		{"default", "debian-12", ""}, // never started
	} {
		got, err := c.StateClaim(ctx, tc.ns, tc.vm)
		if err != nil {
			t.Fatal(err)
		}
		if name := ""; got != nil && got.Name != tc.want || got == nil && tc.want != name {
			t.Fatalf("StateClaim(%s/%s) = %v, want %q", tc.ns, tc.vm, got, tc.want)
		}
	}

	src, _ := c.StateClaim(ctx, "default", "win-11")
	made := mustGuest(t, c, 101).VM().DeepCopy()
	made.ObjectMeta = metav1.ObjectMeta{Name: "copy", Namespace: "default", UID: "copy-uid"}
	const state = "persistent-state-for-copy" // the clone task's Object
	if dv, err := c.CloneState(ctx, &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "default"}}, nil); dv != nil || err != nil {
		t.Fatalf("CloneState without a source claim = %v, %v; want nothing", dv, err)
	}
	if !c.stateProvisioned("default", "") {
		t.Fatal("a clone without state to copy waits for it")
	}
	if _, err := c.CloneState(ctx, made, src); err != nil {
		t.Fatal(err)
	}
	dv, err := c.own.cdi.CdiV1beta1().DataVolumes("default").Get(ctx, "persistent-state-for-copy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if dv.Labels[translate.StateClaimLabel] != "copy" {
		t.Errorf("labels %v: KubeVirt finds the clone's state by %s=copy", dv.Labels, translate.StateClaimLabel)
	}
	if s := dv.Spec.Source; s == nil || s.PVC == nil || *s.PVC != (cdiv1.DataVolumeSourcePVC{Namespace: "default", Name: src.Name}) {
		t.Errorf("source %+v", dv.Spec.Source)
	}
	if p := dv.Spec.PVC; p == nil || *p.StorageClassName != "ceph-rbd" || p.AccessModes[0] != corev1.ReadWriteMany ||
		p.Resources.Requests.Storage().String() != "1Gi" {
		t.Errorf("claim spec %+v: want the source's class and modes, its capacity", dv.Spec.PVC)
	}
	if refs := dv.OwnerReferences; len(refs) != 1 || refs[0].UID != "copy-uid" || refs[0].Kind != "VirtualMachine" || refs[0].Controller != nil {
		t.Errorf("owners %+v: want the clone, not as controller", refs)
	}

	if c.volumesProvisioned(made, state) {
		t.Fatal("provisioned before the state copy has its claim")
	}
	if _, err := c.own.kube.CoreV1().PersistentVolumeClaims("default").Create(ctx, stateClaim("default", "persistent-state-for-copy", "copy", "1Gi", false), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dv.Status.Phase = cdiv1.CloneInProgress
	dv.Status.Conditions = []cdiv1.DataVolumeCondition{{Type: cdiv1.DataVolumeBound, Status: corev1.ConditionFalse, Reason: cdiErrClaimNotValid, Message: "no accessMode"}}
	if dv, err = c.own.cdi.CdiV1beta1().DataVolumes("default").UpdateStatus(ctx, dv, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the cache to see the state claim", func() (bool, string) {
		cached := c.DataVolume("default", dv.Name)
		return c.CachedPVC("default", "persistent-state-for-copy") != nil && cached != nil && cached.Status.Phase == cdiv1.CloneInProgress, "not yet"
	})
	if c.volumesProvisioned(made, state) {
		t.Fatal("provisioned while the state copy runs")
	}
	// The clone task ends with CDI's reason instead of waiting for ever.
	if msg := c.invalidClaim(made, state); msg != "DataVolume persistent-state-for-copy: no accessMode" {
		t.Errorf("invalidClaim = %q", msg)
	}
	// CDI's populator fills a temporary claim with the target's labels
	// (KubeVirt's persistent-state-for among them) and deletes it after
	// the DataVolume Succeeded: until then KubeVirt could take it as the
	// clone's state.
	target, err := c.own.kube.CoreV1().PersistentVolumeClaims("default").Get(ctx, "persistent-state-for-copy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	target.UID = "target-uid"
	if _, err := c.own.kube.CoreV1().PersistentVolumeClaims("default").Update(ctx, target, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.own.kube.CoreV1().PersistentVolumeClaims("default").Create(ctx, stateClaim("default", "tmp-pvc-target-uid", "copy", "1Gi", false), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dv.Status.Conditions = nil
	dv.Status.Phase = cdiv1.Succeeded
	if _, err := c.own.cdi.CdiV1beta1().DataVolumes("default").UpdateStatus(ctx, dv, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the cache to see the copy done and CDI's temporary claim", func() (bool, string) {
		cached := c.DataVolume("default", dv.Name)
		done := cached != nil && cached.Status.Phase == cdiv1.Succeeded && c.CachedPVC("default", "tmp-pvc-target-uid") != nil &&
			c.cachedClaim("default", "persistent-state-for-copy").GetUID() == "target-uid"
		return done, "not yet"
	})
	if c.volumesProvisioned(made, state) {
		t.Fatal("provisioned while CDI's temporary claim, labelled for the clone, remains")
	}
	if err := c.own.kube.CoreV1().PersistentVolumeClaims("default").Delete(ctx, "tmp-pvc-target-uid", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the state copy to count as provisioned", func() (bool, string) {
		return c.volumesProvisioned(made, state), "not provisioned"
	})
}

// TestStateCopyFailureEndsClone: a clone whose state copy CDI will not
// finish (DataVolume Failed, the source claim gone, the clone refused)
// ends at once with CDI's reason; a transient error CDI retries does not
// count, nor does the DataVolume of an earlier VM of the clone's name.
func TestStateCopyFailureEndsClone(t *testing.T) {
	cond := func(typ cdiv1.DataVolumeConditionType, status corev1.ConditionStatus, reason, msg string) cdiv1.DataVolumeCondition {
		return cdiv1.DataVolumeCondition{Type: typ, Status: status, Reason: reason, Message: msg}
	}
	for _, tc := range []struct {
		name   string
		status cdiv1.DataVolumeStatus
		want   string
	}{
		{"phase Failed", cdiv1.DataVolumeStatus{Phase: cdiv1.Failed, Conditions: []cdiv1.DataVolumeCondition{
			cond(cdiv1.DataVolumeBound, corev1.ConditionTrue, "Bound", "PVC bound"),
			cond(cdiv1.DataVolumeRunning, corev1.ConditionFalse, "Error", "clone source pod failed")}},
			"clone source pod failed"},
		{"phase Failed, no message", cdiv1.DataVolumeStatus{Phase: cdiv1.Failed}, "CDI failed the copy (phase Failed)"},
		// CDI's validateCloneAndSourcePVC, as it words them.
		{"source gone", cdiv1.DataVolumeStatus{Phase: cdiv1.Pending, Conditions: []cdiv1.DataVolumeCondition{
			cond(cdiv1.DataVolumeBound, corev1.ConditionFalse, cdiCloneWithoutSource, "The source pvc persistent-state-for-win-11-x7k2p doesn't exist"),
			cond(cdiv1.DataVolumeReady, corev1.ConditionFalse, cdiCloneWithoutSource, "The source pvc persistent-state-for-win-11-x7k2p doesn't exist")}},
			"The source pvc persistent-state-for-win-11-x7k2p doesn't exist (CloneWithoutSource)"},
		{"clone refused", cdiv1.DataVolumeStatus{Conditions: []cdiv1.DataVolumeCondition{
			cond(cdiv1.DataVolumeBound, corev1.ConditionFalse, cdiCloneValidationFailed, "The clone doesn't meet the validation requirements: target resources requests storage size is smaller than the source")}},
			"The clone doesn't meet the validation requirements: target resources requests storage size is smaller than the source (CloneValidationFailed)"},
		// CDI restarts a failed cloner pod: not final.
		{"transient", cdiv1.DataVolumeStatus{Phase: cdiv1.CloneInProgress, Conditions: []cdiv1.DataVolumeCondition{
			cond(cdiv1.DataVolumeRunning, corev1.ConditionFalse, "Error", "clone source pod failed")}}, ""},
		{"copying", cdiv1.DataVolumeStatus{Phase: cdiv1.CloneInProgress, Conditions: []cdiv1.DataVolumeCondition{
			cond(cdiv1.DataVolumeRunning, corev1.ConditionTrue, "Pod is running", "")}}, ""},
	} {
		if got := stateDataVolumeFailure(&cdiv1.DataVolume{Status: tc.status}); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}

	c := poolCluster(t, Options{AssumeKubeVirtAPIs: true})
	ctx := context.Background()
	c.Tasks.Interval = 20 * time.Millisecond
	vm := mustGuest(t, c, 100).VM()
	dv := StateDataVolume(vm, stateClaim("default", "persistent-state-for-win-11-x7k2p", "win-11", "1Gi", false))
	dv.Status.Conditions = []cdiv1.DataVolumeCondition{cond(cdiv1.DataVolumeBound, corev1.ConditionFalse, cdiCloneWithoutSource,
		"The source pvc persistent-state-for-win-11-x7k2p doesn't exist")}
	stale := dv.DeepCopy()
	stale.OwnerReferences[0].UID = "an-earlier-vm"
	// The fake, as kube-apiserver, takes the status only through its
	// subresource.
	create := func(dv *cdiv1.DataVolume) {
		t.Helper()
		made, err := c.own.cdi.CdiV1beta1().DataVolumes("default").Create(ctx, dv, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		made.Status = dv.Status
		if _, err := c.own.cdi.CdiV1beta1().DataVolumes("default").UpdateStatus(ctx, made, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create(stale)
	eventually(t, "the cache to see the state copy", func() (bool, string) {
		cached := c.DataVolume("default", dv.Name)
		return cached != nil && len(cached.Status.Conditions) > 0, "not yet"
	})
	if msg := c.stateCopyFailure(mustGuest(t, c, 100).VM(), dv.Name); msg != "" {
		t.Fatalf("an earlier VM's state copy fails the clone: %q", msg)
	}
	if err := c.own.cdi.CdiV1beta1().DataVolumes("default").Delete(ctx, dv.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	create(dv)
	eventually(t, "the clone's state copy to fail", func() (bool, string) {
		msg := c.stateCopyFailure(mustGuest(t, c, 100).VM(), dv.Name)
		return msg != "", "none"
	})
	spec := specFor(mustGuest(t, c, 100), GoalProvisioned, translate.TaskClone)
	spec.Object = dv.Name
	task, err := c.Tasks.Begin(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	end := waitTaskEnd(t, c, task.UPID.String())
	if want := "copying the EFI/TPM state failed: DataVolume persistent-state-for-debian-12: The source pvc persistent-state-for-win-11-x7k2p doesn't exist (CloneWithoutSource)"; end.ExitStatus != want {
		t.Fatalf("exit %q, want %q", end.ExitStatus, want)
	}
}

// TestCloneTaskWaitsForState: the clone task names the state copy it
// waits for (its Object), so that the clone carries no marker of it: the
// task runs until the copy's claim is there, then ends OK.
func TestCloneTaskWaitsForState(t *testing.T) {
	c := poolCluster(t, Options{AssumeKubeVirtAPIs: true})
	ctx := context.Background()
	g := mustGuest(t, c, 101)
	vm := g.VM().DeepCopy()
	vm.Status.PrintableStatus = kubevirtv1.VirtualMachineStatusStopped
	if _, err := c.own.kv.KubevirtV1().VirtualMachines(vm.Namespace).UpdateStatus(ctx, vm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	spec := specFor(g, GoalProvisioned, translate.TaskClone)
	spec.Object = translate.StateClaimName(g.Name())
	task, err := c.Tasks.Begin(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := c.Tasks.Begin(ctx, specFor(g, GoalProvisioned, translate.TaskCreate))
	if err != nil {
		t.Fatal(err)
	}
	waitTaskEnd(t, c, plain.UPID.String())
	if got, _ := c.Tasks.Get(ctx, task.UPID.String()); !got.Running() {
		t.Fatalf("the clone task ended before its state copy had a claim: %q", got.ExitStatus)
	}
	if _, err := c.own.kube.CoreV1().PersistentVolumeClaims(g.Namespace()).Create(ctx, stateClaim(g.Namespace(), spec.Object, g.Name(), "1Gi", false), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if end := waitTaskEnd(t, c, task.UPID.String()); end.ExitStatus != translate.ExitOK {
		t.Fatalf("clone task: %q", end.ExitStatus)
	}
}
