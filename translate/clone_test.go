package translate

import (
	"fmt"
	"testing"

	kubevirtv1 "kubevirt.io/api/core/v1"
)

// TestCloneIdentity: like PVE's clone_vm, a clone always gets a new smbios1
// uuid (the other smbios1 fields kept), and a new vmgenid when the source
// has one; KubeVirt's firmware UUID, which the guest reads as its SMBIOS
// UUID, is the new smbios1 uuid.
func TestCloneIdentity(t *testing.T) {
	const oldUUID = "2d4a6c1e-0000-4000-8000-000000000001"
	for _, tt := range []struct {
		name                string
		smbios1, vmgenid    string
		firmware            *kubevirtv1.Firmware
		wantSMBIOS, wantGen string
	}{
		{name: "none", wantSMBIOS: "uuid=U1"},
		{name: "uuid only", smbios1: "uuid=" + oldUUID, wantSMBIOS: "uuid=U1"},
		{name: "other fields kept, keys sorted", smbios1: "uuid=" + oldUUID + ",serial=abc,manufacturer=ACME",
			wantSMBIOS: "manufacturer=ACME,serial=abc,uuid=U1"},
		{name: "base64 flag printed as 1", smbios1: "base64=true,product=UHJvZA==,uuid=" + oldUUID,
			wantSMBIOS: "base64=1,product=UHJvZA==,uuid=U1"},
		{name: "unparsable value", smbios1: "garbage", wantSMBIOS: "uuid=U1"},
		{name: "vmgenid renewed", smbios1: "uuid=" + oldUUID, vmgenid: "8f3c1e2a-0000-4000-8000-000000000002",
			wantSMBIOS: "uuid=U1", wantGen: "U2"},
		{name: "vmgenid 1 renewed", vmgenid: "1", wantSMBIOS: "uuid=U1", wantGen: "U2"},
		{name: "vmgenid 0 kept", vmgenid: "0", wantSMBIOS: "uuid=U1", wantGen: "0"},
		{name: "firmware uuid and serial replaced", smbios1: "uuid=" + oldUUID,
			firmware: &kubevirtv1.Firmware{UUID: oldUUID, Serial: "s-1"}, wantSMBIOS: "uuid=U1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := map[string]string{"name": "golden", "net0": "virtio=BC:24:11:00:00:01,bridge=vmbr0"}
			if tt.smbios1 != "" {
				cfg["smbios1"] = tt.smbios1
			}
			if tt.vmgenid != "" {
				cfg["vmgenid"] = tt.vmgenid
			}
			src := buildOK(t, cfg)
			src.Spec.Template.Spec.Domain.Firmware = tt.firmware
			n := 0
			clone, errs := CloneVM(src, CloneRequest{NewID: 101, Node: "pve1", Namespace: "default",
				NewUUID: func() string { n++; return fmt.Sprintf("U%d", n) }})
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			got := StoredConfig(clone)
			if got["smbios1"] != tt.wantSMBIOS || got["vmgenid"] != tt.wantGen {
				t.Fatalf("smbios1 %q vmgenid %q, want %q %q", got["smbios1"], got["vmgenid"], tt.wantSMBIOS, tt.wantGen)
			}
			fw := clone.Spec.Template.Spec.Domain.Firmware
			if fw == nil || fw.UUID != "U1" || fw.Serial != "" {
				t.Fatalf("firmware %+v, want the smbios1 uuid U1 and no serial", fw)
			}
			// The source is left alone.
			if StoredConfig(src)["smbios1"] != tt.smbios1 || (tt.firmware != nil && src.Spec.Template.Spec.Domain.Firmware.UUID != oldUUID) {
				t.Fatalf("source changed: %v %+v", StoredConfig(src), src.Spec.Template.Spec.Domain.Firmware)
			}
		})
	}
	// Without a generator the UUIDs are random and distinct.
	src := buildOK(t, map[string]string{"name": "golden", "smbios1": "uuid=" + oldUUID, "vmgenid": "x"})
	a, _ := CloneVM(src, CloneRequest{NewID: 101, Namespace: "default"})
	b, _ := CloneVM(src, CloneRequest{NewID: 102, Namespace: "default"})
	ca, cb := StoredConfig(a), StoredConfig(b)
	if ca["smbios1"] == cb["smbios1"] || ca["smbios1"] == "uuid="+oldUUID || ca["vmgenid"] == cb["vmgenid"] || ca["vmgenid"] == ca["smbios1"][len("uuid="):] {
		t.Fatalf("random UUIDs: %q %q / %q %q", ca["smbios1"], ca["vmgenid"], cb["smbios1"], cb["vmgenid"])
	}
	if string(a.Spec.Template.Spec.Domain.Firmware.UUID) != ca["smbios1"][len("uuid="):] {
		t.Fatalf("firmware %q vs smbios1 %q", a.Spec.Template.Spec.Domain.Firmware.UUID, ca["smbios1"])
	}
}

// TestCloneDefaultName: without name=, qemu-server names a clone
// Copy-of-VM-<source name>, or Copy-of-VM-<source vmid> when the source has
// none (not its object name vm-<vmid>).
func TestCloneDefaultName(t *testing.T) {
	for _, c := range []struct {
		cfg  map[string]string
		want string
	}{
		{map[string]string{"name": "golden"}, "Copy-of-VM-golden"},
		{map[string]string{"cores": "2"}, "Copy-of-VM-100"},
	} {
		clone, errs := CloneVM(buildOK(t, c.cfg), CloneRequest{NewID: 101, Node: "pve1", Namespace: "default"})
		if len(errs) > 0 {
			t.Fatalf("%v: %v", c.cfg, errs)
		}
		if got := ConfigView(clone, nil)["name"]; got != c.want {
			t.Errorf("clone of %v is named %v, want %s", c.cfg, got, c.want)
		}
	}
	// Made outside the API: its config shows the object name, so does the clone's.
	src := buildOK(t, map[string]string{})
	delete(src.Annotations, AnnotationConfig)
	src.Name = "legacy"
	if clone, _ := CloneVM(src, CloneRequest{NewID: 101, Namespace: "default"}); ConfigView(clone, nil)["name"] != "Copy-of-VM-legacy" {
		t.Errorf("clone of an adopted VM: %v", ConfigView(clone, nil)["name"])
	}
}

// TestCloneStateVolumes: the clone's efidisk0 and tpmstate0 name its own
// state volumes (its vmid; the storage asked for, as for its disks), not
// the source's, with their options kept.
func TestCloneStateVolumes(t *testing.T) {
	src := buildOK(t, map[string]string{"name": "golden", "bios": "ovmf",
		"efidisk0": "local-lvm:1,efitype=4m,pre-enrolled-keys=1", "tpmstate0": "local-lvm:1,version=v2.0"})
	for _, tc := range []struct {
		storage, efi, tpm string
	}{
		{"", "local-lvm:vm-101-efidisk,efitype=4m,pre-enrolled-keys=1,size=4M", "local-lvm:vm-101-tpmstate,version=v2.0,size=4M"},
		{"ceph-rbd", "ceph-rbd:vm-101-efidisk,efitype=4m,pre-enrolled-keys=1,size=4M", "ceph-rbd:vm-101-tpmstate,version=v2.0,size=4M"},
	} {
		clone, errs := CloneVM(src, CloneRequest{NewID: 101, Node: "pve1", Namespace: "default", Storage: tc.storage})
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		got := ConfigView(clone, nil)
		if got["efidisk0"] != tc.efi || got["tpmstate0"] != tc.tpm {
			t.Errorf("storage %q: efidisk0 %v, tpmstate0 %v; want %s, %s", tc.storage, got["efidisk0"], got["tpmstate0"], tc.efi, tc.tpm)
		}
	}
}
