package translate

import (
	"strings"
	"testing"
)

func TestPlanMoveDisk(t *testing.T) {
	cfg := map[string]string{
		"scsi0": "local-lvm:vm-100-disk-0,iothread=1,size=4G", "scsi1": "local-lvm:base-100-disk-1,size=1G",
		"ide2": "local:iso/debian.iso,media=cdrom", "ide0": "local-lvm:vm-100-cloudinit,media=cdrom", "sata0": "none,media=cdrom",
	}
	for _, tc := range []struct {
		key, target, format string
		claim, value, err   string
	}{
		{"scsi0", "ceph-rbd", "", "vm-100-disk-0", "ceph-rbd:0,iothread=1,import-from=local-lvm:vm-100-disk-0", ""},
		{"scsi0", "ceph-rbd", "qcow2", "vm-100-disk-0", "ceph-rbd:0,iothread=1,import-from=local-lvm:vm-100-disk-0", ""},
		{"scsi1", "ceph-rbd", "", "vm-100-disk-1", "ceph-rbd:0,import-from=local-lvm:vm-100-disk-1", ""},
		{"scsi0", "local-lvm", "", "", "", "you can't move to the same storage with same format"},
		{"scsi0", "local-lvm", "raw", "", "", "you can't move to the same storage with same format"},
		{"ide2", "ceph-rbd", "", "", "", "you can't move a cdrom"},
		{"ide0", "ceph-rbd", "", "", "", "you can't move a cdrom"},
		{"sata0", "ceph-rbd", "", "", "", "you can't move a cdrom"},
		{"scsi9", "ceph-rbd", "", "", "", "disk 'scsi9' does not exist"},
	} {
		m, err := PlanMoveDisk(cfg, tc.key, tc.target, tc.format)
		if errText(err) != tc.err {
			t.Errorf("%s → %s: err %v, want %q", tc.key, tc.target, err, tc.err)
			continue
		}
		if err != nil {
			continue
		}
		v, err := m.MovedValue(cfg)
		if m.Claim != tc.claim || v != tc.value || err != nil {
			t.Errorf("%s → %s: claim %q value %q %v", tc.key, tc.target, m.Claim, v, err)
		}
	}
	if !Movable("virtio3") || Movable("efidisk0") || Movable("unused0") || Movable("net0") {
		t.Error("Movable")
	}
}

func TestDropUnusedClaim(t *testing.T) {
	vm := buildOK(t, map[string]string{"scsi0": "local-lvm:4", "scsi1": "local-lvm:1"})
	up, errs := UpdateVM(vm, VMRequest{VMID: 100, Namespace: "default", StorageExists: storageOK}, []string{"scsi1"})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	out, changed, inUse := DropUnusedClaim(up, "vm-100-disk-1")
	cfg := StoredConfig(out)
	if !changed || inUse || cfg["unused0"] != "" || cfg["scsi0"] == "" || len(out.Spec.DataVolumeTemplates) != 1 || out.Spec.DataVolumeTemplates[0].Name != "vm-100-disk-0" {
		t.Fatalf("dropped: %v %v %v %v", changed, inUse, cfg, out.Spec.DataVolumeTemplates)
	}
	if StoredConfig(up)["unused0"] == "" {
		t.Fatal("the input VM was changed")
	}
	if _, changed, inUse := DropUnusedClaim(up, "vm-100-disk-0"); changed || !inUse {
		t.Fatalf("a claim a disk uses: changed %v inUse %v", changed, inUse)
	}
	if _, changed, inUse := DropUnusedClaim(up, "nope"); changed || inUse {
		t.Fatal("an unknown claim")
	}
	if !strings.HasPrefix(StoredConfig(up)["unused0"], "local-lvm:vm-100-disk-1") {
		t.Fatal(StoredConfig(up))
	}
}
