package behaviour

import (
	"context"
	"encoding/json"
	"sort"
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
func realOnly(t *testing.T) *runner {
	t.Helper()
	b := startBackend(t, "real", "kubeconfig "+env.Kubeconfig)
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
	list, err := env.KubeVirt.KubevirtV1().VirtualMachines("").List(context.Background(), metav1.ListOptions{LabelSelector: translate.LabelVMID + "=" + vmid})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("VM %s: %v %v", vmid, err, list)
	}
	return &list.Items[0]
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
