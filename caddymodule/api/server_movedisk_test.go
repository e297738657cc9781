package api_test

import (
	"net/url"
	"strings"
	"testing"
)

// move_disk on a stopped VM: a CDI clone into the target StorageClass, the
// old volume kept as unusedN (or deleted with delete=1 once copied), PVE's
// refusals; a running VM's disk is refused.
func TestMoveDisk(t *testing.T) {
	a := shared(t)
	node := "kv-node-2-lab-internal"
	var id, upid string
	a.OK("GET", "/cluster/nextid", nil, &id)
	a.OK("POST", "/nodes/"+node+"/qemu", url.Values{"vmid": {id}, "name": {"mover"}, "scsi0": {"local-lvm:1,iothread=1"},
		"ide2": {"none,media=cdrom"}, "ide0": {"local-lvm:cloudinit"}}, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create: %s", exit)
	}
	t.Cleanup(func() {
		a.Do("DELETE", "/nodes/"+node+"/qemu/"+id, url.Values{"purge": {"1"}, "destroy-unreferenced-disks": {"1"}})
	})
	move := "/nodes/" + node + "/qemu/" + id + "/move_disk"
	config := func() map[string]any {
		var cfg map[string]any
		a.OK("GET", "/nodes/"+node+"/qemu/"+id+"/config", nil, &cfg)
		return cfg
	}

	a.OK("POST", move, url.Values{"disk": {"scsi0"}, "storage": {"ceph-rbd"}, "format": {"raw"}}, &upid)
	if !strings.Contains(upid, ":qmmove:"+id+":") {
		t.Fatalf("UPID %s", upid)
	}
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("move: %s\n%s", exit, taskLog(t, a, node, upid))
	}
	log := taskLog(t, a, node, upid)
	for _, want := range []string{
		"copying volume 'local-lvm:vm-" + id + "-disk-0' from current storage 'local-lvm' to target storage 'ceph-rbd'",
		"adding source volume 'local-lvm:vm-" + id + "-disk-0' as 'unused0' to config",
	} {
		if !strings.Contains(log, want) {
			t.Fatalf("task log lacks %q:\n%s", want, log)
		}
	}
	cfg := config()
	if cfg["scsi0"] != "ceph-rbd:vm-"+id+"-disk-1,iothread=1,size=1G" || cfg["unused0"] != "local-lvm:vm-"+id+"-disk-0" {
		t.Fatalf("after the move: %v", cfg)
	}

	// PVE's refusals.
	for _, c := range []struct {
		form   url.Values
		code   int
		msg    string
		errKey string
	}{
		{url.Values{"disk": {"scsi0"}, "storage": {"ceph-rbd"}}, 500, "you can't move to the same storage with same format", ""},
		{url.Values{"disk": {"ide2"}, "storage": {"ceph-rbd"}}, 500, "you can't move a cdrom", ""},
		{url.Values{"disk": {"ide0"}, "storage": {"ceph-rbd"}}, 500, "you can't move a cdrom", ""},
		{url.Values{"disk": {"scsi5"}, "storage": {"ceph-rbd"}}, 500, "disk 'scsi5' does not exist", ""},
		{url.Values{"disk": {"scsi0"}, "storage": {"local"}}, 400, "", "storage"},
		{url.Values{"disk": {"scsi0"}, "storage": {"nope"}}, 500, "storage 'nope' does not exist", ""},
		{url.Values{"disk": {"scsi0"}}, 400, "", "target-vmid"},
		{url.Values{"disk": {"scsi0"}, "storage": {"local-lvm"}, "target-vmid": {"999"}}, 400, "", "storage"},
		{url.Values{"disk": {"scsi0"}, "target-vmid": {"999"}}, 500, "reassigning a disk to another VM is not supported", ""},
		{url.Values{"disk": {"scsi0"}, "storage": {"local-lvm"}, "format": {"vdi"}}, 400, "", "format"},
		{url.Values{"disk": {"net0"}, "storage": {"local-lvm"}}, 400, "", "disk"},
		{url.Values{"disk": {"efidisk0"}, "storage": {"ceph-rbd"}}, 500, "disk 'efidisk0' cannot be moved: KubeVirt keeps the EFI variables", ""},
		{url.Values{"disk": {"unused7"}, "storage": {"ceph-rbd"}}, 500, "disk 'unused7' does not exist", ""},
		{url.Values{"disk": {"scsi0"}, "storage": {"local-lvm"}, "digest": {"0000"}}, 500, "detected modified configuration", ""},
	} {
		ans := a.Do("POST", move, c.form)
		if ans.Code != c.code || !strings.Contains(ans.Message, c.msg) || (c.errKey != "" && ans.Errors[c.errKey] == "") {
			t.Errorf("%v: %s %s", c.form, ans.Status, ans.Raw)
		}
	}

	// delete=1: the source goes once the copy is done.
	a.OK("POST", move, url.Values{"disk": {"scsi0"}, "storage": {"local-lvm"}, "delete": {"1"}}, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("move with delete: %s\n%s", exit, taskLog(t, a, node, upid))
	}
	if log := taskLog(t, a, node, upid); !strings.Contains(log, "removing source volume 'ceph-rbd:vm-"+id+"-disk-1' after successful copy") {
		t.Fatalf("task log:\n%s", log)
	}
	cfg = config()
	if cfg["scsi0"] != "local-lvm:vm-"+id+"-disk-2,iothread=1,size=1G" || cfg["unused0"] != "local-lvm:vm-"+id+"-disk-0" || cfg["unused1"] != nil {
		t.Fatalf("after the move with delete: %v", cfg)
	}
	var vols []map[string]any
	a.OK("GET", "/nodes/"+node+"/storage/ceph-rbd/content", url.Values{"vmid": {id}}, &vols)
	if len(vols) != 0 {
		t.Fatalf("the deleted source is listed: %v", vols)
	}

	denied(t, asIdentity(t, "auditor@pve"), "POST", move, url.Values{"disk": {"scsi0"}, "storage": {"ceph-rbd"}},
		"Permission check failed (/vms/"+id+", VM.Config.Disk)")

	// A running VM's disk is refused.
	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/status/start", nil, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("start: %s", exit)
	}
	if ans := a.Do("POST", move, url.Values{"disk": {"scsi0"}, "storage": {"ceph-rbd"}}); ans.Code != 500 || !strings.HasPrefix(ans.Message, "cannot move disk 'scsi0' of a running VM") {
		t.Fatalf("running: %s", ans.Status)
	}
	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/status/stop", nil, &upid)
	a.WaitTask(upid)
}
