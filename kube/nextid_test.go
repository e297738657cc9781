package kube

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// ReserveNextVMID hands each id out once per hold, per cluster: two
// clients asking at once get different ids, another cluster's holds do
// not count, and an id comes back once its hold has passed.
func TestReserveNextVMID(t *testing.T) {
	c, other := tableCluster(vmWithID("n", "a", "100", 0)), tableCluster(vmWithID("n", "a", "100", 0))
	t0 := time.Now()
	next := func(c *Cluster, at time.Duration) int {
		t.Helper()
		id, ok := c.reserveNextVMID(100, t0.Add(at))
		if !ok {
			t.Fatal("no id")
		}
		return id
	}
	if a, b := next(c, 0), next(c, time.Second); a != 101 || b != 102 {
		t.Fatalf("two asks: %d, %d; want 101, 102", a, b)
	}
	if id := next(other, time.Second); id != 101 {
		t.Fatalf("another cluster: %d, want 101 (holds are per cluster)", id)
	}
	if id := next(c, nextIDHold-time.Millisecond); id != 103 {
		t.Fatalf("within the hold: %d, want 103", id)
	}
	if id := next(c, nextIDHold); id != 101 {
		t.Fatalf("after 101's hold: %d, want 101 again", id)
	}
	if id, ok := c.ReserveNextVMID(100); !ok || id < 101 {
		t.Fatalf("ReserveNextVMID = %d, %v", id, ok)
	}
}

// An id a client was told is free (HoldVMID), or that a live claim holds
// (a create in flight, maybe on another replica), is not offered; a
// stale claim (its VM gone, its create long over) does not hold it.
func TestReserveNextVMIDSkipsHeldAndClaimed(t *testing.T) {
	c := poolCluster(t, Options{})
	ctx := context.Background()
	from, ok := c.NextVMID(100, nil) // the seeded VMs take some
	if !ok {
		t.Fatal("no free id")
	}
	id := func(n int) string { return strconv.Itoa(from + n) }
	c.HoldVMID(from)
	claim := func(vmid string, created time.Time) {
		_, err := c.own.kube.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: claimPrefix + vmid, Namespace: "default", CreationTimestamp: metav1.NewTime(created),
				Labels: map[string]string{claimLabel: "true"}},
			Data: map[string]string{"vmid": vmid, "namespace": "default", "name": "in-flight-" + vmid, "node": "node-b"},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the claim in the cache", func() bool { return c.vmidClaims.get("default", claimPrefix+vmid) != nil })
	}
	claim(id(1), time.Now())
	claim(id(2), time.Now().Add(-2*claimInFlight))
	if got, ok := c.ReserveNextVMID(from); !ok || got != from+2 {
		t.Fatalf("ReserveNextVMID = %d, %v; want %d (%d held, %d claimed)", got, ok, from+2, from, from+1)
	}
	if used, node := c.VMIDInUse(from + 1); !used || node != "node-b" {
		t.Fatalf("VMIDInUse(claimed) = %v, %q; want in use on node-b", used, node)
	}
	if used, _ := c.VMIDInUse(from + 3); used {
		t.Fatal("VMIDInUse(free) = true")
	}
}

// A VM deleted a moment ago by another client is gone from the apiserver
// but may still be cached; a create of its vmid takes over its stale
// claim and must then resolve to the new VM alone, not to both (an
// ambiguous id, which the API refused and undid the create for).
func TestCreateVMOverStaleCachedVM(t *testing.T) {
	c := poolCluster(t, Options{})
	ctx := context.Background()
	gone := vmWithID("default", "deleted-elsewhere", "4321", time.Minute)
	gone.UID = "gone-uid"
	gone.ResourceVersion = "1"
	c.vms.put(gone, true) // as a cache that has not heard of the delete yet
	if _, err := c.own.kube.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: claimPrefix + "4321", Namespace: "default", CreationTimestamp: metav1.NewTime(time.Now().Add(-time.Minute))},
		Data:       map[string]string{"vmid": "4321", "namespace": "default", "name": "deleted-elsewhere", "uid": "gone-uid"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	newVM := func(name string) *kubevirtv1.VirtualMachine {
		vm := vmWithID("default", name, "4321", 0)
		vm.Spec.Template = &kubevirtv1.VirtualMachineInstanceTemplateSpec{}
		vm.Spec.RunStrategy = ptr.To(kubevirtv1.RunStrategyHalted)
		return vm
	}
	created, err := c.CreateVM(ctx, newVM("made-now"))
	if err != nil {
		t.Fatalf("create over a stale claim: %v", err)
	}
	if g := mustGuest(t, c, 4321); g.VM().UID != created.UID {
		t.Fatalf("vmid 4321 resolves to %s/%s, want the new VM", g.Namespace(), g.Name())
	}
	// And a second create of the id is refused with PVE's text.
	_, err = c.CreateVM(ctx, newVM("made-later"))
	var taken *VMIDTakenError
	if !errors.As(err, &taken) || !strings.HasPrefix(err.Error(), "VM 4321 already exists on node '") {
		t.Fatalf("second create: %v", err)
	}
}

// An id whose VM is gone but whose disk claims the garbage collector has
// not removed yet is not offered (PVE's destroy removes the disks before
// the id is free; a new VM with that id would name its first disk
// vm-<id>-disk-1), nor said to be free; other claims do not hold ids.
func TestNextVMIDSkipsLeftDisks(t *testing.T) {
	c := poolCluster(t, Options{})
	ctx := context.Background()
	from, ok := c.NextVMID(100, nil)
	if !ok {
		t.Fatal("no free id")
	}
	for _, name := range []string{
		"vm-" + strconv.Itoa(from) + "-disk-0",
		"base-" + strconv.Itoa(from+1) + "-disk-2",
		"vm-" + strconv.Itoa(from+2) + "-cloudinit", // not a disk
		"vm-" + strconv.Itoa(from+2) + "-disk-x",
	} {
		if _, err := c.own.kube.CoreV1().PersistentVolumeClaims("default").Create(ctx, claim("default", name, nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the claim in the cache", func() bool { return c.CachedPVC("default", name) != nil })
	}
	if got, ok := c.ReserveNextVMID(from); !ok || got != from+2 {
		t.Fatalf("ReserveNextVMID = %d, %v; want %d (%d and %d have disks left)", got, ok, from+2, from, from+1)
	}
	if used, _ := c.VMIDInUse(from); !used {
		t.Fatal("VMIDInUse(an id with disks left) = false")
	}
	// Once its last disk is gone, the id is free again.
	gone := "vm-" + strconv.Itoa(from) + "-disk-0"
	if err := c.own.kube.CoreV1().PersistentVolumeClaims("default").Delete(ctx, gone, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the claim gone from the cache", func() bool { return c.CachedPVC("default", gone) == nil })
	if used, _ := c.VMIDInUse(from); used {
		t.Fatal("VMIDInUse(an id whose disks are gone) = true")
	}
}

// TestHoldsExpire: holds older than nextIDHold go on the next hold as on
// the next reservation, so that nextid?vmid= alone does not grow them.
func TestHoldsExpire(t *testing.T) {
	var c Cluster
	long := time.Now().Add(-nextIDHold)
	for id := 1000; id < 1100; id++ {
		c.nextIDs.hold(id, long)
	}
	c.HoldVMID(2000)
	if n := len(c.nextIDs.held); n != 1 {
		t.Fatalf("%d holds after the expired ones, want 1", n)
	}
}
