package kube

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/testenv"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// TestCollectClaimsReplicas: on a real kube-apiserver, two replicas
// collecting the claims at once remove a deleted VM's claim once between
// them and keep a live VM's and an in-flight create's; a replica whose
// cache still holds a claim that another replica has since taken over
// (a new create of that vmid) does not remove the new claim: the
// apiserver refuses the delete on the old claim's UID.
func TestCollectClaimsReplicas(t *testing.T) {
	env := testenv.StartT(t, testenv.Options{})
	ctx := context.Background()
	start := func() *Cluster {
		c := New(env.Kube, env.KubeVirt, env.Config, Options{TaskNamespace: "default", AssumeKubeVirtAPIs: true})
		sctx, cancel := context.WithTimeout(ctx, waitTimeout)
		defer cancel()
		if err := c.Start(sctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Stop)
		return c
	}
	a, b := start(), start()
	vms := env.KubeVirt.KubevirtV1().VirtualMachines("default")
	cms := env.Kube.CoreV1().ConfigMaps("default")
	create := func(c *Cluster, vmid, name string) *kubevirtv1.VirtualMachine {
		t.Helper()
		cl, err := c.claimVMID(ctx, vmid, "default", name, "node-1")
		if err != nil {
			t.Fatal(err)
		}
		rs := kubevirtv1.RunStrategyHalted
		vm, err := vms.Create(ctx, &kubevirtv1.VirtualMachine{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{translate.LabelVMID: vmid}},
			Spec:       kubevirtv1.VirtualMachineSpec{RunStrategy: &rs, Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cl.commit(ctx, vm.UID)
		return vm
	}
	create(a, "500", "kept")
	gone := create(b, "501", "deleted")
	if _, err := a.claimVMID(ctx, "502", "default", "in-flight", "node-1"); err != nil {
		t.Fatal(err)
	}
	if err := vms.Delete(ctx, gone.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	claimSeen := func(c *Cluster, vmid string, committed bool) bool {
		cm := cached[corev1.ConfigMap](c.vmidClaims, "default", claimPrefix+vmid)
		return cm != nil && (cm.Data["uid"] != "") == committed
	}
	for _, c := range []*Cluster{a, b} {
		eventually(t, "the caches to see the claims and the deletion", func() (bool, string) {
			return claimSeen(c, "500", true) && claimSeen(c, "501", true) && claimSeen(c, "502", false) &&
				c.vms.get("default", "kept") != nil && c.vms.get("default", "deleted") == nil, "not yet"
		})
	}

	var wg sync.WaitGroup
	removed := make([]int, 2)
	for i, c := range []*Cluster{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			removed[i] = c.collectClaims(ctx, time.Now())
		}()
	}
	wg.Wait()
	if removed[0]+removed[1] != 1 {
		t.Errorf("removed %v claims, want one between the replicas", removed)
	}
	for vmid, want := range map[string]bool{"500": true, "501": false, "502": true} {
		_, err := cms.Get(ctx, claimPrefix+vmid, metav1.GetOptions{})
		if kept := err == nil; kept != want || (err != nil && !apierrors.IsNotFound(err)) {
			t.Errorf("claim of %s kept %v (%v), want %v", vmid, kept, err, want)
		}
	}

	// A takes VM 600's claim as its cache has it; the VM goes, B creates
	// 600 again (taking the claim over); A's removal must fail.
	create(b, "600", "first")
	eventually(t, "A to see the claim of 600", func() (bool, string) { return claimSeen(a, "600", true), "not yet" })
	stale := cached[corev1.ConfigMap](a.vmidClaims, "default", claimPrefix+"600").DeepCopy()
	if err := vms.Delete(ctx, "first", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "B to see VM first go", func() (bool, string) { return b.vms.get("default", "first") == nil, "not yet" })
	second := create(b, "600", "second")
	if a.removeClaim(ctx, stale) {
		t.Fatal("a replica removed the claim another one took over meanwhile")
	}
	cm, err := cms.Get(ctx, claimPrefix+"600", metav1.GetOptions{})
	if err != nil || cm.Data["uid"] != string(second.UID) {
		t.Fatalf("claim of 600 after the stale removal: %v, %v", cm, err)
	}
}
