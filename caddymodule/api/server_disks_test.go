package api_test

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
)

// volumesOf lists the volume ids storage shows for a vmid.
func volumesOf(t *testing.T, a *testcaddy.PVE, node, storage, vmid string) map[string]bool {
	t.Helper()
	var rows []map[string]any
	a.OK("GET", "/nodes/"+node+"/storage/"+storage+"/content", url.Values{"vmid": {vmid}}, &rows)
	out := map[string]bool{}
	for _, r := range rows {
		out[r["volid"].(string)] = true
	}
	return out
}

// A disk added to a VM made outside the API (the simulator's VM 101, whose
// disk sata0 is the PVC vm-101-disk-0) keeps that disk, gets a fresh
// volume, and the VM still starts; unlink then detaches and deletes only
// what it names.
func TestAddDiskToForeignVM(t *testing.T) {
	a := shared(t)
	node, id := "kv-node-2-lab-internal", "101"
	base := "/nodes/" + node + "/qemu/" + id
	config := func() map[string]any {
		t.Helper()
		var cfg map[string]any
		a.OK("GET", base+"/config", nil, &cfg)
		return cfg
	}
	const sata0 = "ceph-rbd:vm-101-disk-0,size=64G"
	cfg := config()
	if cfg["sata0"] != sata0 {
		t.Fatalf("the existing disk is not shown: %v", cfg)
	}
	if again := config(); again["digest"] != cfg["digest"] {
		t.Fatal("config changed between two reads")
	}

	// Add a disk the way proxmox_disk does.
	var upid string
	a.OK("POST", base+"/config", url.Values{"scsi1": {"ceph-rbd:1"}}, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("config task: %s", exit)
	}
	cfg = config()
	if cfg["sata0"] != sata0 || cfg["scsi1"] != "ceph-rbd:vm-101-disk-1,size=1G" {
		t.Fatalf("after adding scsi1: sata0=%v scsi1=%v", cfg["sata0"], cfg["scsi1"])
	}
	var pending []map[string]any
	a.OK("GET", base+"/pending", nil, &pending)
	for _, p := range pending {
		if p["delete"] != nil {
			t.Fatalf("pending deletes a device: %v", pending)
		}
	}
	// Changing the disk not made through the API is refused, not guessed.
	if ans := a.Do("PUT", base+"/config", url.Values{"sata0": {"ceph-rbd:8"}}); ans.Code != 400 || !strings.Contains(ans.Errors["sata0"], "not made through this API") {
		t.Fatalf("replacing sata0: %s %v", ans.Status, ans.Errors)
	}

	// The VM starts: its volumes are all there.
	a.OK("POST", base+"/status/start", nil, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("start: %s", exit)
	}
	if st := a.Status(node, id); st["status"] != "running" || st["lock"] != nil {
		t.Fatalf("status after start: %v", st)
	}
	a.OK("POST", base+"/status/stop", nil, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("stop: %s", exit)
	}

	// unlink without force detaches: the volume stays as unused0.
	ans := a.Do("PUT", base+"/unlink", url.Values{"idlist": {"scsi1"}, "force": {"0"}})
	if ans.Code != 200 || string(ans.Data) != "null" {
		t.Fatalf("unlink: %s %s", ans.Status, ans.Raw)
	}
	cfg = config()
	if cfg["scsi1"] != nil || cfg["unused0"] != "ceph-rbd:vm-101-disk-1" || cfg["sata0"] != sata0 {
		t.Fatalf("after detach: %v", cfg)
	}
	// A disk added now gets the next free name, and unlink with force=1
	// deletes its volume at once.
	a.OK("PUT", base+"/config", url.Values{"virtio3": {"ceph-rbd:1"}}, nil)
	cfg = config()
	if cfg["virtio3"] != "ceph-rbd:vm-101-disk-2,size=1G" {
		t.Fatalf("virtio3 = %v", cfg["virtio3"])
	}
	a.OK("PUT", base+"/unlink", url.Values{"idlist": {"virtio3"}, "force": {"1"}}, nil)
	// unlink of unusedN deletes its volume; a repeat hits nothing.
	for range 2 {
		a.OK("PUT", base+"/unlink", url.Values{"idlist": {"unused0"}}, nil)
	}
	cfg = config()
	for k := range cfg {
		if strings.HasPrefix(k, "unused") || k == "virtio3" || k == "scsi1" {
			t.Fatalf("after unlinking: %v", cfg)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		vols := volumesOf(t, a, node, "ceph-rbd", id)
		if !vols["ceph-rbd:vm-101-disk-0"] {
			t.Fatalf("the VM's own disk is gone: %v", vols)
		}
		if !vols["ceph-rbd:vm-101-disk-1"] && !vols["ceph-rbd:vm-101-disk-2"] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deleted volumes still there: %v", vols)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if cfg := config(); cfg["sata0"] != sata0 {
		t.Fatalf("sata0 at the end: %v", cfg["sata0"])
	}

	// unlink is a config change of disks: VM.Config.Disk.
	vmuser := asIdentity(t, "vmuser@pve")
	denied(t, vmuser, "PUT", base+"/unlink", url.Values{"idlist": {"sata0"}}, "Permission check failed (/vms/101, VM.Config.Disk)")
	if ans := a.Do("PUT", base+"/unlink", url.Values{"idlist": {"sata0"}, "cores": {"2"}}); ans.Code != 400 || ans.Errors["cores"] == "" {
		t.Fatalf("unlink with a config key: %s %v", ans.Status, ans.Errors)
	}
	if ans := a.Do("PUT", base+"/unlink", nil); ans.Code != 400 || ans.Errors["idlist"] == "" {
		t.Fatalf("unlink without idlist: %s %v", ans.Status, ans.Errors)
	}
}

// A disk imported from a volume carries size= like PVE's (proxmox_disk
// reads it on its next run), the source's when none is asked for.
func TestImportFromCarriesSize(t *testing.T) {
	a := shared(t)
	node := "kv-node-3-lab-internal"
	var id, upid string
	a.OK("GET", "/cluster/nextid", nil, &id)
	a.OK("POST", "/nodes/"+node+"/qemu", url.Values{"vmid": {id}, "name": {"import-test"}}, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create: %s", exit)
	}
	base := "/nodes/" + node + "/qemu/" + id
	a.OK("POST", base+"/config", url.Values{"scsi0": {"ceph-rbd:0,import-from=local-lvm:vm-100-disk-0"}}, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("import: %s", exit)
	}
	var cfg map[string]any
	a.OK("GET", base+"/config", nil, &cfg)
	if cfg["scsi0"] != "ceph-rbd:vm-"+id+"-disk-0,size=32G" {
		t.Fatalf("scsi0 = %v", cfg["scsi0"])
	}
	if ans := a.Do("PUT", base+"/config", url.Values{"scsi1": {"ceph-rbd:0,import-from=local-lvm:vm-334-disk-0"}}); ans.Code != 400 || !strings.Contains(ans.Errors["scsi1"], "does not exist") {
		t.Fatalf("import of a missing volume: %s %v", ans.Status, ans.Errors)
	}
	a.OK("DELETE", base, url.Values{"purge": {"1"}}, &upid)
	a.WaitTask(upid)
}
