package behaviour

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/internal/realcluster"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// realOnly starts a backend on the real control plane alone, for what the
// simulated cluster cannot be made to do from outside (a guest powering
// itself off, a VM edited with kubectl), and returns a runner on it.
// Directives are added to proxmox_api's. With -case (behavioural cases
// only) the test is skipped.
func realOnly(t *testing.T, directives ...string) *runner {
	t.Helper()
	if *only != "" {
		t.Skip("-case runs behavioural cases only")
	}
	b := startBackend(t, "real", strings.Join(append([]string{"kubeconfig " + env.Kubeconfig}, directives...), "\n\t\t"))
	var nodes []map[string]any
	b.api.OK("GET", "/nodes", nil, &nodes)
	var names []string
	for _, n := range nodes {
		names = append(names, n["node"].(string))
	}
	sort.Strings(names)
	if firstNode == "" {
		firstNode = names[0]
	}
	return &runner{b: b, timeout: taskTimeout}
}

// vmObject is the real cluster's VirtualMachine of vmid.
func vmObject(t *testing.T, vmid string) *kubevirtv1.VirtualMachine {
	t.Helper()
	return env.VMByID(t, vmid)
}

// must fails the test unless the observation o is a success.
func must(t *testing.T, r *runner, what string, o any) {
	t.Helper()
	if !succeeded(o) {
		t.Fatalf("%s: %s", what, brief(o))
	}
	for _, e := range r.errs {
		t.Fatalf("%s: %s", what, e)
	}
}

// TestRollbackAfterGuestPoweroff: a VM whose guest powered itself off
// keeps its finished instance (Manual), for which virt-api's stop, the
// restore's StopTarget, answers 409 "VM is not running": KubeVirt's
// restore would wait for ever. The rollback ends, and leaves the VM
// stopped.
func TestRollbackAfterGuestPoweroff(t *testing.T) {
	r := realOnly(t)
	const id = "7200"
	must(t, r, "create", r.task("POST", "/nodes/"+firstNode+"/qemu", form("vmid", id, "name", "b-rb-off", "memory", "512", "scsi0", "ceph-rbd:2")))
	t.Cleanup(func() { destroy(id).do(r) })
	must(t, r, "start", r.task("POST", r.vm(id, "status/start"), nil))
	must(t, r, "running", r.waitStatus(id, "running", time.Minute))
	must(t, r, "snapshot", r.task("POST", r.vm(id, "snapshot"), form("snapname", "s1")))
	vm := vmObject(t, id)
	if err := realcluster.GuestShutdown(context.Background(), vm.Namespace, vm.Name); err != nil {
		t.Fatal(err)
	}
	must(t, r, "powered off", r.waitStatus(id, "stopped", time.Minute))
	r.timeout = 90 * time.Second
	must(t, r, "rollback", r.task("POST", r.vm(id, "snapshot/s1/rollback"), nil))
	must(t, r, "stopped after", r.waitStatus(id, "stopped", time.Minute))
}

// TestRollbackRunStrategy: KubeVirt's restore keeps the VM's run
// strategy, and its stop (StopTarget) leaves RerunOnFailure as it is, so
// a VM set to RerunOnFailure (by kubectl, or the plugin's own start
// without virt-api) would start again after it; PVE leaves a VM rolled
// back to a snapshot without RAM stopped, and starts it only with
// start=1. (Always needs nothing: virt-api's stop makes it Halted.)
func TestRollbackRunStrategy(t *testing.T) {
	r := realOnly(t)
	const id = "7201"
	must(t, r, "create", r.task("POST", "/nodes/"+firstNode+"/qemu", form("vmid", id, "name", "b-rb-rerun", "memory", "512", "scsi0", "ceph-rbd:2")))
	t.Cleanup(func() { destroy(id).do(r) })
	vm := vmObject(t, id)
	patch := []byte(`{"spec":{"runStrategy":"RerunOnFailure"}}`)
	if _, err := env.KubeVirt.KubevirtV1().VirtualMachines(vm.Namespace).Patch(context.Background(), vm.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	must(t, r, "running", r.waitStatus(id, "running", time.Minute))
	must(t, r, "snapshot", r.task("POST", r.vm(id, "snapshot"), form("snapname", "s1")))
	must(t, r, "rollback", r.task("POST", r.vm(id, "snapshot/s1/rollback"), nil))
	if rs, _ := vmObject(t, id).RunStrategy(); rs != kubevirtv1.RunStrategyHalted {
		t.Errorf("run strategy after the rollback: %s, want Halted (stopped, as PVE leaves it)", rs)
	}
	must(t, r, "stopped after", r.waitStatus(id, "stopped", time.Minute))
	must(t, r, "rollback start=1", r.task("POST", r.vm(id, "snapshot/s1/rollback"), form("start", "1")))
	st := r.get(id, "status/current", "status")
	if d, _ := st.(map[string]any)["data"].(map[string]any); d["status"] != "running" {
		t.Errorf("after the rollback with start=1 its task ended, but the VM is %s", brief(st))
	}
	b, _ := json.Marshal(vmObject(t, id).Spec.RunStrategy)
	t.Logf("run strategy after start=1: %s", b)
}

// TestRollbackSharedISO: with ISO images on storage that can snapshot,
// KubeVirt snapshots a CD-ROM's claim with the VM, and its in-place
// restore deletes and recreates every claim it holds, the image other VMs
// share included (and cannot leave one out). A snapshot is refused up
// front, saying to eject the CD-ROM; a rollback to a snapshot holding the
// claim (taken with kubectl) is refused, and the image stays.
func TestRollbackSharedISO(t *testing.T) {
	ctx := context.Background()
	r := realOnly(t, "local_storage {\n\t\t\tstorage_class ceph-rbd\n\t\t}")
	const id, other, iso = "7210", "7211", "rbshared.iso"
	must(t, r, "download", r.task("POST", "/nodes/"+firstNode+"/storage/local/download-url",
		form("content", "iso", "filename", iso, "url", "http://iso.example.com/"+iso)))
	t.Cleanup(func() { deleteISO("local", iso).do(r) })
	for _, vmid := range []string{id, other} {
		must(t, r, "create "+vmid, r.task("POST", "/nodes/"+firstNode+"/qemu", form("vmid", vmid, "name", "b-rb-iso-"+vmid, "memory", "512",
			"scsi0", "ceph-rbd:1", "ide2", "local:iso/"+iso+",media=cdrom")))
		t.Cleanup(func() { destroy(vmid).do(r) })
	}
	vm := vmObject(t, id)
	claim := translate.FileClaimName(translate.ContentISO, iso)
	pvc, err := env.DirectKube.CoreV1().PersistentVolumeClaims(vm.Namespace).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// KubeVirt's verdict on the CD-ROM's claim, which a client calling a
	// moment later sees.
	deadline := time.Now().Add(30 * time.Second)
	for !cdromSnapshottable(vmObject(t, id)) {
		if time.Now().After(deadline) {
			t.Fatalf("KubeVirt does not say the CD-ROM's claim can be snapshotted: %+v", vmObject(t, id).Status.VolumeSnapshotStatuses)
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, o := r.call("POST", r.vm(id, "snapshot"), form("snapname", "s1"))
	if msg, _ := o["message"].(string); o["code"] != 500 || !strings.HasPrefix(msg, "snapshot feature is not available: CD-ROM ide2 holds the shared claim "+claim) {
		t.Errorf("snapshot with the ISO attached: %s", brief(o))
	}

	// A snapshot taken with kubectl holds the claim.
	snap := env.KubectlSnapshot(t, vm, "kubectl-"+id)
	o = r.task("POST", r.vm(id, "snapshot/"+snap.Name+"/rollback"), nil)
	if msg, _ := o["message"].(string); o["code"] != 500 || !strings.HasPrefix(msg, "can't rollback, snapshot '"+snap.Name+"' holds the shared volume '"+claim+"' (ide2: VM "+other+" uses it)") {
		t.Errorf("rollback to a snapshot holding the shared ISO: %s", brief(o))
	}
	env.NoRestoreOf(t, vm.Namespace, snap.Name)
	if cur, err := env.DirectKube.CoreV1().PersistentVolumeClaims(vm.Namespace).Get(ctx, claim, metav1.GetOptions{}); err != nil || cur.UID != pvc.UID || cur.DeletionTimestamp != nil {
		t.Errorf("the shared ISO's claim after the rollback: %v %+v", err, cur.ObjectMeta)
	}
}

// cdromSnapshottable tells whether KubeVirt says it would snapshot vm's
// ide2.
func cdromSnapshottable(vm *kubevirtv1.VirtualMachine) bool {
	for _, st := range vm.Status.VolumeSnapshotStatuses {
		if st.Name == "ide2" {
			return st.Enabled
		}
	}
	return false
}
