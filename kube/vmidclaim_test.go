package kube

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// claimCM is a vmid claim as claimVMID makes it, made at created, for
// the VM ns/name (committed with uid unless empty).
func claimCM(vmid, ns, name, uid string, created time.Time) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: claimPrefix + vmid, Namespace: "default", UID: types.UID("claim-" + vmid),
			Labels: map[string]string{claimLabel: "true"}, CreationTimestamp: metav1.NewTime(created)},
		Data: map[string]string{"vmid": vmid, "namespace": ns, "name": name, "node": "kv-node-1"},
	}
	if uid != "" {
		cm.Data["uid"] = uid
	}
	return cm
}

// TestCollectClaims: the periodic pass removes the claims that no longer
// hold their vmid (the VM deleted or replaced by a namesake, a create
// that died before making its VM) and keeps those of live VMs (also one
// whose commit failed: the VM's label holds the id) and of creates still
// in flight; a destroy task's end removes its VM's claim at once.
func TestCollectClaims(t *testing.T) {
	old := time.Now().Add(-time.Hour)
	debian := "2c5e8f1a-4b7d-4e0a-9c3f-6d8b1e4a7c10"
	e := newEnv(t, envOptions{extra: []k8sruntime.Object{
		claimCM("100", "default", "debian-12", debian, old),           // live
		claimCM("101", "default", "win-11", "", old),                  // live by its label (commit failed)
		claimCM("300", "default", "deleted-vm", "0000-gone", old),     // VM deleted
		claimCM("301", "default", "win-11", "an-earlier-win-11", old), // a namesake replaced it
		claimCM("302", "default", "never-made", "", old),              // the create died
		claimCM("303", "default", "being-made", "", time.Now()),       // create in flight
	}})
	c := e.cluster(Options{}, false)
	if n := c.collectClaims(e.ctx, time.Now()); n != 3 {
		t.Errorf("removed %d claims, want 3", n)
	}
	for vmid, want := range map[string]bool{"100": true, "101": true, "300": false, "301": false, "302": false, "303": true} {
		_, err := e.kube.CoreV1().ConfigMaps("default").Get(e.ctx, claimPrefix+vmid, metav1.GetOptions{})
		if kept := err == nil; kept != want || (err != nil && !apierrors.IsNotFound(err)) {
			t.Errorf("claim of %s kept %v (%v), want %v", vmid, kept, err, want)
		}
	}
	if taken, _ := c.vmidClaimed("300"); taken {
		t.Error("nextid still skips the removed claim's id")
	}

	// Destroying VM 100 (its task ending) removes its claim at once.
	g := mustGuest(t, c, 100)
	task, err := c.Tasks.Begin(e.ctx, specFor(g, GoalGone, translate.TaskDestroy))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.kv.KubevirtV1().VirtualMachines("default").Delete(e.ctx, g.Name(), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if end := waitTaskEnd(t, c, task.UPID.String()); end.ExitStatus != translate.ExitOK {
		t.Fatalf("destroy: %q", end.ExitStatus)
	}
	eventually(t, "the destroyed VM's claim to go", func() (bool, string) {
		_, err := e.kube.CoreV1().ConfigMaps("default").Get(e.ctx, claimPrefix+"100", metav1.GetOptions{})
		return apierrors.IsNotFound(err), "still there"
	})
}

// TestCollectClaimsBounded: one pass checks at most claimChecksPerPass
// stale claims, so that the backlog earlier versions left does not hold
// up the task worker; the next passes take the rest.
func TestCollectClaimsBounded(t *testing.T) {
	old := time.Now().Add(-time.Hour)
	var objs []k8sruntime.Object
	for i := range claimChecksPerPass + 10 {
		objs = append(objs, claimCM(fmt.Sprint(1000+i), "default", fmt.Sprint("gone-", i), fmt.Sprint("uid-", i), old))
	}
	e := newEnv(t, envOptions{extra: objs})
	c := e.cluster(Options{}, false)
	if n := c.collectClaims(e.ctx, time.Now()); n != claimChecksPerPass {
		t.Fatalf("first pass removed %d, want %d", n, claimChecksPerPass)
	}
	if n := c.collectClaims(e.ctx, time.Now()); n != 10 {
		t.Fatalf("second pass removed %d, want the 10 left", n)
	}
}
