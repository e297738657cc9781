package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSnapshotWithoutSnapshotClass: local-path has no VolumeSnapshotClass,
// so KubeVirt would take a snapshot of a VM on it without the disk's data
// (excludedVolumes) and a rollback would leave the disk as it is. The API
// refuses the snapshot up front as PVE refuses one on storage that cannot
// snapshot, giving KubeVirt's reason, and refuses a rollback to such a
// snapshot (taken with kubectl) as PVE refuses a volume without it.
func TestSnapshotWithoutSnapshotClass(t *testing.T) {
	ctx := context.Background()
	a := pve(t)
	node := firstNode(a)
	id := nextID(a)
	path := "/nodes/" + node + "/qemu/" + id
	createVM(t, a, node, id, "name", "noclass", "scsi0", "local-path:1")
	vm := vmByID(t, id)
	claim := "vm-" + id + "-disk-0"
	// KubeVirt's verdict on the disk, which a client calling a moment
	// later sees.
	deadline := time.Now().Add(30 * time.Second)
	for {
		cur, err := env.KubeVirt.KubevirtV1().VirtualMachines(vm.Namespace).Get(ctx, vm.Name, metav1.GetOptions{})
		if err == nil && len(cur.Status.VolumeSnapshotStatuses) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no volumeSnapshotStatuses: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	const refusal = "snapshot feature is not available: disk scsi0 ("
	r := a.Do("POST", path+"/snapshot", form("snapname", "s1"))
	if r.Code != 500 || !strings.HasPrefix(r.Message, refusal+claim+"): No VolumeSnapshotClass: Volume snapshots are not configured for this StorageClass [local-path] [scsi0]") {
		t.Errorf("snapshot on local-path: %s %s", r.Status, r.Raw)
	}

	// A snapshot taken with kubectl succeeds without the disk's data.
	snap := env.KubectlSnapshot(t, vm, "kubectl-"+id)
	if v := snap.Status.SnapshotVolumes; v == nil || len(v.ExcludedVolumes) != 1 || v.ExcludedVolumes[0] != "scsi0" {
		t.Fatalf("the snapshot's volumes: %+v", v)
	}
	// Listed, so a client can see it, but not rolled back to.
	var snaps []map[string]any
	a.OK("GET", path+"/snapshot", nil, &snaps)
	if len(snaps) != 2 || snaps[0]["name"] != snap.Name {
		t.Fatalf("snapshots: %v", snaps)
	}
	r = a.Do("POST", path+"/snapshot/"+snap.Name+"/rollback", nil)
	if want := "can't rollback, snapshot '" + snap.Name + "' does not exist on '" + claim + "' ("; r.Code != 500 || !strings.HasPrefix(r.Message, want) {
		t.Errorf("rollback to a snapshot without the disk's data: %s %s", r.Status, r.Raw)
	}
	env.NoRestoreOf(t, vm.Namespace, snap.Name)
}
