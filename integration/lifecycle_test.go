package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// TestLifecycleOnRealAPIServer creates, starts, stops and deletes a VM
// through the API and checks each step in the real cluster's objects.
func TestLifecycleOnRealAPIServer(t *testing.T) {
	a := pve(t)
	ctx := context.Background()
	node := firstNode(a)
	id := nextID(a)
	var upid string
	a.OK("POST", "/nodes/"+node+"/qemu", form("vmid", id, "name", "it-life", "cores", "2", "memory", "1536",
		"net0", "virtio,bridge=vmbr0", "scsi0", "local-path:4"), &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create: %s", exit)
	}
	vms, err := env.KubeVirt.KubevirtV1().VirtualMachines("default").List(ctx, metav1.ListOptions{LabelSelector: translate.LabelVMID + "=" + id})
	if err != nil || len(vms.Items) != 1 {
		t.Fatalf("VM object for %s: %v %v", id, err, vms)
	}
	vm := vms.Items[0]
	if vm.Name != "it-life" || vm.Annotations[translate.AnnotationNode] != node {
		t.Fatalf("VM object %s annotations %v", vm.Name, vm.Annotations)
	}
	if rs, _ := vm.RunStrategy(); rs != kubevirtv1.RunStrategyManual {
		t.Fatalf("run strategy %s", rs)
	}
	spec := vm.Spec.Template.Spec
	if spec.Domain.CPU.Cores != 2 || spec.Domain.Memory.Guest.Value() != 1536<<20 || len(spec.Domain.Devices.Disks) != 1 || len(vm.Spec.DataVolumeTemplates) != 1 {
		t.Fatalf("VM spec %+v", spec.Domain)
	}

	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/status/start", nil, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("start: %s", exit)
	}
	vmi, err := env.KubeVirt.KubevirtV1().VirtualMachineInstances("default").Get(ctx, "it-life", metav1.GetOptions{})
	if err != nil || vmi.Status.Phase != kubevirtv1.Running {
		t.Fatalf("VMI after start task OK: %v %v", err, vmi)
	}
	if st := a.Status(node, id); st["status"] != "running" {
		t.Fatalf("status %v", st)
	}

	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/status/stop", nil, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("stop: %s", exit)
	}
	// The task ends when the instance is final; PVE's status says stopped
	// from then on, and the controller removes the instance soon after.
	if st := a.Status(node, id); st["status"] != "stopped" {
		t.Fatalf("status after the stop task ended: %v", st)
	}
	for i := 0; ; i++ {
		vmi, err := env.KubeVirt.KubevirtV1().VirtualMachineInstances("default").Get(ctx, "it-life", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if err == nil && !vmi.IsFinal() {
			t.Fatalf("VMI %s after the stop task ended", vmi.Status.Phase)
		}
		if i == 100 {
			t.Fatal("VMI still exists 10 s after the stop task ended")
		}
		time.Sleep(100 * time.Millisecond)
	}

	a.OK("DELETE", "/nodes/"+node+"/qemu/"+id, form("purge", "1"), &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("delete: %s", exit)
	}
	if _, err := env.KubeVirt.KubevirtV1().VirtualMachines("default").Get(ctx, "it-life", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("VM still there after delete task: %v", err)
	}
	if ans := a.Do("GET", "/nodes/"+node+"/qemu/"+id+"/config", nil); ans.Code != 500 || !strings.Contains(ans.Message, "does not exist") {
		t.Fatalf("config after delete: %s", ans.Status)
	}
}

// TestFallbackWithoutVirtAPI drives power through spec.runStrategy when
// the cluster has no subresources.kubevirt.io.
func TestFallbackWithoutVirtAPI(t *testing.T) {
	a := fallbackPVE(t)
	ctx := context.Background()
	node := firstNode(a)
	id := nextID(a)
	var upid string
	a.OK("POST", "/nodes/"+node+"/qemu", form("vmid", id, "name", "it-fallback", "start", "1"), &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create+start: %s", exit)
	}
	vm, err := env.KubeVirt.KubevirtV1().VirtualMachines("default").Get(ctx, "it-fallback", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rs, _ := vm.RunStrategy(); rs != kubevirtv1.RunStrategyRerunOnFailure {
		t.Fatalf("fallback start must set RerunOnFailure, got %s", rs)
	}
	if st := a.Status(node, id); st["status"] != "running" {
		t.Fatalf("status %v", st)
	}
	// Reset and pause need virt-api: refused clearly, never pretended.
	if ans := a.Do("POST", "/nodes/"+node+"/qemu/"+id+"/status/reset", nil); ans.Code != 501 || !strings.Contains(ans.Message, "virt-api") {
		t.Fatalf("reset without virt-api: %s %s", ans.Status, ans.Raw)
	}
	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/status/shutdown", nil, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("shutdown: %s", exit)
	}
	vm, _ = env.KubeVirt.KubevirtV1().VirtualMachines("default").Get(ctx, "it-fallback", metav1.GetOptions{})
	if rs, _ := vm.RunStrategy(); rs != kubevirtv1.RunStrategyHalted {
		t.Fatalf("fallback stop must set Halted, got %s", rs)
	}
	a.OK("DELETE", "/nodes/"+node+"/qemu/"+id, nil, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("delete: %s", exit)
	}
}
