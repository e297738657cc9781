package integration

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// move_disk on the real apiserver: the VM's disk becomes a DataVolume
// template cloned from the old claim into the target StorageClass, the old
// claim stays as unusedN, and with delete=1 the source claim is deleted
// once the copy is done.
func TestMoveDisk(t *testing.T) {
	a := pve(t)
	node := firstNode(a)
	ctx := context.Background()
	id := nextID(a)
	var upid string
	a.OK("POST", "/nodes/"+node+"/qemu", form("vmid", id, "name", "it-mover-"+id, "scsi0", "local-path:1"), &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create: %s", exit)
	}
	t.Cleanup(func() {
		a.Do("DELETE", "/nodes/"+node+"/qemu/"+id, form("purge", "1", "destroy-unreferenced-disks", "1"))
	})
	move := "/nodes/" + node + "/qemu/" + id + "/move_disk"
	a.OK("POST", move, form("disk", "scsi0", "storage", "ceph-block"), &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("move: %s", exit)
	}
	vm := vmByID(t, id)
	var found bool
	for _, dv := range vm.Spec.DataVolumeTemplates {
		if dv.Name == "vm-"+id+"-disk-1" {
			src := dv.Spec.Source
			found = src != nil && src.PVC != nil && src.PVC.Name == "vm-"+id+"-disk-0" && dv.Spec.Storage != nil &&
				*dv.Spec.Storage.StorageClassName == "ceph-block"
		}
	}
	if !found {
		t.Fatalf("templates %+v", vm.Spec.DataVolumeTemplates)
	}
	if v := vm.Spec.Template.Spec.Volumes; len(v) != 1 || v[0].DataVolume == nil || v[0].DataVolume.Name != "vm-"+id+"-disk-1" {
		t.Fatalf("volumes %+v", v)
	}
	var cfg map[string]any
	a.OK("GET", "/nodes/"+node+"/qemu/"+id+"/config", nil, &cfg)
	if cfg["unused0"] != "local-path:vm-"+id+"-disk-0" || !strings.HasPrefix(cfg["scsi0"].(string), "ceph-block:vm-"+id+"-disk-1,") {
		t.Fatalf("config %v", cfg)
	}
	pvc, err := env.Kube.CoreV1().PersistentVolumeClaims(vm.Namespace).Get(ctx, "vm-"+id+"-disk-1", metav1.GetOptions{})
	if err != nil || *pvc.Spec.StorageClassName != "ceph-block" {
		t.Fatalf("new claim: %v %v", pvc, err)
	}

	// delete=1: the source claim goes once the copy is done.
	a.OK("POST", move, form("disk", "scsi0", "storage", "local-path", "delete", "1"), &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("move with delete: %s", exit)
	}
	// As PVE frees the source before the task ends, the claim is gone
	// when the end is read (the garbage collector deletes it after its
	// DataVolume, and the task waits for that).
	if _, err := env.Kube.CoreV1().PersistentVolumeClaims(vm.Namespace).Get(ctx, "vm-"+id+"-disk-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the moved source claim is still there when the task has ended: %v", err)
	}
	cfg = nil
	a.OK("GET", "/nodes/"+node+"/qemu/"+id+"/config", nil, &cfg)
	if cfg["unused0"] != "local-path:vm-"+id+"-disk-0" || cfg["unused1"] != nil || !strings.HasPrefix(cfg["scsi0"].(string), "local-path:vm-"+id+"-disk-2,") {
		t.Fatalf("config after the move with delete %v", cfg)
	}
}
