package api_test

import (
	"net/url"
	"strings"
	"testing"
)

func TestConfigUpdateDigestPendingResizeTemplate(t *testing.T) {
	a := shared(t)
	node := "kv-node-3-lab-internal"
	var id, upid string
	a.OK("GET", "/cluster/nextid", nil, &id)
	a.OK("POST", "/nodes/"+node+"/qemu", url.Values{"vmid": {id}, "name": {"cfg-test"}, "cores": {"1"}, "memory": {"1024"},
		"net0": {"virtio,bridge=vmbr0"}, "scsi0": {"local-lvm:4"}, "keyboard": {"de"}, "start": {"1"}}, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create: %s", exit)
	}
	var cfg map[string]any
	a.OK("GET", "/nodes/"+node+"/qemu/"+id+"/config", nil, &cfg)
	digest := cfg["digest"].(string)

	// Sync update: data is null.
	ans := a.Do("PUT", "/nodes/"+node+"/qemu/"+id+"/config", url.Values{"cores": {"2"}, "description": {"hello\nworld"}, "delete": {"keyboard"}, "digest": {digest}})
	if ans.Code != 200 || string(ans.Data) != "null" {
		t.Fatalf("PUT config: %s %s", ans.Status, ans.Raw)
	}
	cfg = nil
	a.OK("GET", "/nodes/"+node+"/qemu/"+id+"/config", nil, &cfg)
	if cfg["cores"] != float64(2) || cfg["description"] != "hello\nworld" || cfg["keyboard"] != nil || cfg["digest"] == digest {
		t.Fatalf("after PUT: %v", cfg)
	}
	// The old digest is stale now.
	ans = a.Do("PUT", "/nodes/"+node+"/qemu/"+id+"/config", url.Values{"cores": {"3"}, "digest": {digest}})
	// PVE's assert_if_modified dies: 500 with the text as the reason, which
	// proxmoxer shows (it cannot see a 400's errors object).
	if want := "detected modified configuration - file changed by other user? Try again."; ans.Code != 500 || ans.Status != "500 "+want {
		t.Fatalf("stale digest: %s %s", ans.Status, ans.Raw)
	}
	// The VM runs with 1 core; 2 wait for a restart.
	var pending []map[string]any
	a.OK("GET", "/nodes/"+node+"/qemu/"+id+"/pending", nil, &pending)
	found := false
	for _, p := range pending {
		if p["key"] == "cores" {
			found = p["value"] == float64(1) && p["pending"] == float64(2)
		}
	}
	if !found {
		t.Fatalf("pending %v", pending)
	}
	// revert= takes the pending value back (Ansible's proxmox_kvm revert);
	// keys with nothing pending are left alone.
	for _, bad := range []url.Values{{"revert": {"nosuchkey"}}, {"revert": {"cores"}, "cores": {"4"}}} {
		if ans := a.Do("PUT", "/nodes/"+node+"/qemu/"+id+"/config", bad); ans.Code != 400 || ans.Errors["revert"] == "" {
			t.Fatalf("revert %v: %s %s", bad, ans.Status, ans.Raw)
		}
	}
	a.OK("PUT", "/nodes/"+node+"/qemu/"+id+"/config", url.Values{"revert": {"cores,description"}}, nil)
	cfg = nil
	a.OK("GET", "/nodes/"+node+"/qemu/"+id+"/config", nil, &cfg)
	if cfg["cores"] != float64(1) || cfg["description"] != "hello\nworld" {
		t.Fatalf("after revert: %v", cfg)
	}
	pending = nil
	a.OK("GET", "/nodes/"+node+"/qemu/"+id+"/pending", nil, &pending)
	for _, p := range pending {
		if p["pending"] != nil || p["delete"] != nil {
			t.Fatalf("still pending after revert: %v", p)
		}
	}
	a.OK("PUT", "/nodes/"+node+"/qemu/"+id+"/config", url.Values{"cores": {"2"}}, nil)
	// Async update: a qmconfig task.
	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/config", url.Values{"tags": {"web;prod"}}, &upid)
	if !strings.Contains(upid, ":qmconfig:"+id+":") || a.WaitTask(upid) != "OK" {
		t.Fatalf("POST config: %s", upid)
	}
	// Resize grows; shrinking is refused.
	a.OK("PUT", "/nodes/"+node+"/qemu/"+id+"/resize", url.Values{"disk": {"scsi0"}, "size": {"+2G"}}, &upid)
	if a.WaitTask(upid) != "OK" {
		t.Fatal("resize task")
	}
	cfg = nil
	a.OK("GET", "/nodes/"+node+"/qemu/"+id+"/config", nil, &cfg)
	if cfg["scsi0"] != "local-lvm:vm-"+id+"-disk-0,size=6G" {
		t.Fatalf("after resize: %v", cfg["scsi0"])
	}
	if ans := a.Do("PUT", "/nodes/"+node+"/qemu/"+id+"/resize", url.Values{"disk": {"scsi0"}, "size": {"1G"}}); ans.Code != 500 || ans.Status != "500 shrinking disks is not supported" {
		t.Fatalf("shrink: %s %s", ans.Status, ans.Raw)
	}
	// Bad input changes nothing.
	cfg = nil
	a.OK("GET", "/nodes/"+node+"/qemu/"+id+"/config", nil, &cfg)
	before := cfg["digest"]
	for _, f := range []url.Values{
		{"net1": {"virtio,macaddr=nope"}},
		{"scsi1": {"nowhere:4"}},
		{"ipconfig0": {"ip=1.2.3.4"}},
		{"bogus": {"1"}},
		{"delete": {"bogus"}},
		{"memory": {"lots"}},
	} {
		if ans := a.Do("PUT", "/nodes/"+node+"/qemu/"+id+"/config", f); ans.Code != 400 || len(ans.Errors) == 0 {
			t.Errorf("%v: %s %s", f, ans.Status, ans.Raw)
		}
	}
	cfg = nil
	a.OK("GET", "/nodes/"+node+"/qemu/"+id+"/config", nil, &cfg)
	if cfg["digest"] != before {
		t.Fatal("a refused update changed the config")
	}
	// Template: refused while running, then done when stopped.
	if ans := a.Do("POST", "/nodes/"+node+"/qemu/"+id+"/template", nil); ans.Code != 500 || !strings.Contains(ans.Message, "if VM is running") {
		t.Fatalf("template while running: %s", ans.Status)
	}
	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/status/stop", nil, &upid)
	a.WaitTask(upid)
	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/template", nil, &upid)
	if a.WaitTask(upid) != "OK" {
		t.Fatal("template task")
	}
	st := a.Status(node, id)
	if st["template"] != float64(1) {
		t.Fatalf("status after template: %v", st)
	}
	// A template's disk is named base-<vmid>-disk-<n>, as PVE renames it,
	// in its config and the storage's content (the claim keeps its name).
	cfg = nil
	a.OK("GET", "/nodes/"+node+"/qemu/"+id+"/config", nil, &cfg)
	base := "local-lvm:base-" + id + "-disk-0"
	if !strings.HasPrefix(cfg["scsi0"].(string), base+",") {
		t.Fatalf("template's disk: %v", cfg["scsi0"])
	}
	var vols []map[string]any
	a.OK("GET", "/nodes/"+node+"/storage/local-lvm/content", url.Values{"vmid": {id}}, &vols)
	if len(vols) != 1 || vols[0]["volid"] != base || vols[0]["path"] != "/dev/pvc/default/vm-"+id+"-disk-0" {
		t.Fatalf("template's volumes: %v", vols)
	}
	var vol map[string]any
	a.OK("GET", "/nodes/"+node+"/storage/local-lvm/content/"+url.PathEscape(base), nil, &vol)
	if vol["format"] != "raw" {
		t.Fatalf("template's volume: %v", vol)
	}
	// A clone of the template gets its own vm- disk.
	var cloneID string
	a.OK("GET", "/cluster/nextid", nil, &cloneID)
	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/clone", url.Values{"newid": {cloneID}, "full": {"1"}}, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("clone of the template: %s", exit)
	}
	cfg = nil
	a.OK("GET", "/nodes/"+node+"/qemu/"+cloneID+"/config", nil, &cfg)
	if !strings.HasPrefix(cfg["scsi0"].(string), "local-lvm:vm-"+cloneID+"-disk-0,") {
		t.Fatalf("clone's disk: %v", cfg["scsi0"])
	}
	a.OK("DELETE", "/nodes/"+node+"/qemu/"+cloneID, nil, &upid)
	a.WaitTask(upid)
	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/status/start", nil, &upid)
	if exit := a.WaitTask(upid); !strings.Contains(exit, "template") {
		t.Fatalf("starting a template: %q", exit)
	}
	a.OK("DELETE", "/nodes/"+node+"/qemu/"+id, nil, &upid)
	a.WaitTask(upid)
}

func TestCloudInitCreate(t *testing.T) {
	a := shared(t)
	node := "kv-node-3-lab-internal"
	var id, upid string
	a.OK("GET", "/cluster/nextid", nil, &id)
	a.OK("POST", "/nodes/"+node+"/qemu", url.Values{"vmid": {id}, "name": {"ci-test"}, "net0": {"virtio,bridge=vmbr0"},
		"ide2": {"local-lvm:cloudinit"}, "ciuser": {"ops"}, "cipassword": {"hunter2"}, "ipconfig0": {"ip=dhcp"},
		"sshkeys": {"ssh-ed25519%20AAAAC3NzaC1lZDI1NTE5AAAAIExample%20me"}}, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create: %s", exit)
	}
	var cfg map[string]any
	a.OK("GET", "/nodes/"+node+"/qemu/"+id+"/config", nil, &cfg)
	if cfg["cipassword"] != "**********" || cfg["ide2"] != "local-lvm:vm-"+id+"-cloudinit,media=cdrom" || cfg["ipconfig0"] != "ip=dhcp" {
		t.Fatalf("config %v", cfg)
	}
	a.OK("DELETE", "/nodes/"+node+"/qemu/"+id, nil, &upid)
	a.WaitTask(upid)
}

// As PVE: an EFI disk of a SeaBIOS VM is kept (unused until bios=ovmf),
// and a cloud-init drive may name the directory storage (it is a Secret
// here), while a disk may not.
func TestEFIDiskWithoutOVMFAndCloudInitOnLocal(t *testing.T) {
	a := shared(t)
	node := "kv-node-3-lab-internal"
	var id, upid string
	a.OK("GET", "/cluster/nextid", nil, &id)
	a.OK("POST", "/nodes/"+node+"/qemu", url.Values{"vmid": {id}, "name": {"efi-bios"}, "efidisk0": {"local-lvm:1,efitype=4m,pre-enrolled-keys=0"},
		"ide2": {"local:cloudinit,format=raw"}}, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create: %s", exit)
	}
	t.Cleanup(func() { a.Do("DELETE", "/nodes/"+node+"/qemu/"+id, nil) })
	var cfg map[string]any
	a.OK("GET", "/nodes/"+node+"/qemu/"+id+"/config", nil, &cfg)
	if cfg["efidisk0"] != "local-lvm:vm-"+id+"-efidisk,efitype=4m,pre-enrolled-keys=0,size=4M" || cfg["bios"] != nil ||
		!strings.HasPrefix(cfg["ide2"].(string), "local:vm-"+id+"-cloudinit,") {
		t.Fatalf("config %v", cfg)
	}
	a.OK("PUT", "/nodes/"+node+"/qemu/"+id+"/config", url.Values{"bios": {"ovmf"}}, nil)
	cfg = nil
	a.OK("GET", "/nodes/"+node+"/qemu/"+id+"/config", nil, &cfg)
	if cfg["bios"] != "ovmf" || cfg["efidisk0"] != "local-lvm:vm-"+id+"-efidisk,efitype=4m,pre-enrolled-keys=0,size=4M" {
		t.Fatalf("config with ovmf %v", cfg)
	}
	if ans := a.Do("PUT", "/nodes/"+node+"/qemu/"+id+"/config", url.Values{"scsi1": {"local:4"}}); ans.Code != 400 || ans.Errors["scsi1"] != "storage 'local' does not support vm images\n" {
		t.Fatalf("a disk on local: %s %s", ans.Status, ans.Raw)
	}
}
