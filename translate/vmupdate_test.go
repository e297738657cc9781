package translate

import (
	"strings"
	"testing"

	kubevirtv1 "kubevirt.io/api/core/v1"
)

func storageOK(s string) bool { return s == "local-lvm" }

func TestUpdateVM(t *testing.T) {
	vm := buildOK(t, map[string]string{"name": "web", "cores": "1", "memory": "1024", "net0": "virtio,bridge=vmbr0", "scsi0": "local-lvm:8", "keyboard": "de"})
	vm.Spec.Template.Spec.Domain.Firmware = &kubevirtv1.Firmware{UUID: "keep-me"} // set by KubeVirt
	mac := vm.Spec.Template.Spec.Domain.Devices.Interfaces[0].MacAddress

	up, errs := UpdateVM(vm, VMRequest{VMID: 100, Namespace: "default", StorageExists: storageOK,
		Config: map[string]string{"cores": "4", "memory": "4096", "scsi1": "local-lvm:2", "description": "hi"}}, []string{"keyboard"})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	cfg := StoredConfig(up)
	if cfg["cores"] != "4" || cfg["memory"] != "4096" || cfg["description"] != "hi" || cfg["keyboard"] != "" {
		t.Fatalf("config %v", cfg)
	}
	if cfg["scsi0"] != "local-lvm:vm-100-disk-0,size=8G" || cfg["scsi1"] != "local-lvm:vm-100-disk-1,size=2G" {
		t.Fatalf("disks %q %q", cfg["scsi0"], cfg["scsi1"])
	}
	if got := up.Spec.Template.Spec.Domain.Devices.Interfaces[0].MacAddress; got != mac {
		t.Fatalf("MAC changed on update: %s -> %s", mac, got)
	}
	if up.Spec.Template.Spec.Domain.Firmware.UUID != "keep-me" {
		t.Fatal("a field no PVE key owns was lost")
	}
	if len(up.Spec.DataVolumeTemplates) != 2 || up.Spec.Template.Spec.Domain.CPU.Cores != 4 {
		t.Fatalf("spec %+v", up.Spec)
	}
	if vm.Spec.Template.Spec.Domain.CPU.Cores != 1 {
		t.Fatal("UpdateVM modified its input")
	}

	// Detaching a disk keeps its data as unused0, like PVE; its template
	// leaves the spec (KubeVirt refuses one no volume uses), its
	// DataVolume stays.
	up2, errs := UpdateVM(up, VMRequest{VMID: 100, Namespace: "default", StorageExists: storageOK}, []string{"scsi1"})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	cfg = StoredConfig(up2)
	if cfg["unused0"] != "local-lvm:vm-100-disk-1" || len(up2.Spec.DataVolumeTemplates) != 1 || up2.Spec.DataVolumeTemplates[0].Name != "vm-100-disk-0" ||
		len(up2.Spec.Template.Spec.Volumes) != 1 {
		t.Fatalf("after detach: %v templates %v volumes %v", cfg, up2.Spec.DataVolumeTemplates, up2.Spec.Template.Spec.Volumes)
	}
	// Reattach it under another key: the claim, a DataVolume's, is found
	// through its unused0 and attached as a dataVolume volume again.
	claims := claimsOf(map[string]ClaimInfo{"vm-100-disk-1": {StorageClass: "local-lvm", Bytes: 2 * GiB, DataVolume: true}})
	up3, errs := UpdateVM(up2, VMRequest{VMID: 100, Namespace: "default", StorageExists: storageOK, Claim: claims,
		Config: map[string]string{"virtio0": "local-lvm:vm-100-disk-1"}}, []string{"unused0"})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if c := StoredConfig(up3); c["virtio0"] != "local-lvm:vm-100-disk-1,size=2G" || c["unused0"] != "" {
		t.Fatalf("reattach: %v", c)
	}
	if v := up3.Spec.Template.Spec.Volumes; len(v) != 2 || v[1].DataVolume == nil || v[1].DataVolume.Name != "vm-100-disk-1" || len(up3.Spec.DataVolumeTemplates) != 1 {
		t.Fatalf("reattach: volumes %+v templates %v", v, up3.Spec.DataVolumeTemplates)
	}

	for _, c := range []struct {
		set   map[string]string
		del   []string
		param string
	}{
		{map[string]string{"cores": "x"}, nil, "cores"},
		{map[string]string{"scsi2": "local-lvm:vm-100-disk-0"}, nil, "scsi2"}, // already used by scsi0
		{map[string]string{"bogus": "1"}, nil, "bogus"},
		{nil, []string{"bogus"}, "delete"},
		{map[string]string{"cores": "2"}, []string{"cores"}, "delete"},
	} {
		if out, errs := UpdateVM(up, VMRequest{VMID: 100, Namespace: "default", StorageExists: storageOK, Config: c.set}, c.del); out != nil || errs[c.param] == "" {
			t.Errorf("%v %v: want error on %s, got %v", c.set, c.del, c.param, errs)
		}
	}
}

func TestCloudInitAndISO(t *testing.T) {
	vm, errs := BuildVM(VMRequest{VMID: 100, Node: "n", Namespace: "default", StorageExists: storageOK,
		ISOSize: func(claim string) (int64, bool) { return 658505728, claim == "debian-12-iso" },
		Config: map[string]string{
			"name": "web", "net0": "virtio,bridge=vmbr0", "ide2": "local-lvm:cloudinit", "ide0": "local:iso/debian-12.iso,media=cdrom",
			"ciuser": "ops", "cipassword": "s3cret", "ipconfig0": "ip=10.0.0.5/24,gw=10.0.0.1", "sshkeys": "ssh-ed25519%20AAAAC3Nza%20me%40host",
			"nameserver": "1.1.1.1", "searchdomain": "lab",
		}})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	cfg := StoredConfig(vm)
	if cfg["cipassword"] != MaskedPassword || strings.Contains(vm.Annotations[AnnotationConfig], "s3cret") {
		t.Fatal("the password must never be stored in the VM")
	}
	if cfg["ide2"] != "local-lvm:vm-100-cloudinit,media=cdrom" || cfg["ide0"] != "local:iso/debian-12.iso,media=cdrom,size=628M" {
		t.Fatalf("drives %q %q", cfg["ide2"], cfg["ide0"])
	}
	if cfg["ipconfig0"] != "gw=10.0.0.1,ip=10.0.0.5/24" {
		t.Fatalf("ipconfig0 %q", cfg["ipconfig0"])
	}
	var ci, iso *kubevirtv1.Volume
	for i, v := range vm.Spec.Template.Spec.Volumes {
		switch v.Name {
		case "ide2":
			ci = &vm.Spec.Template.Spec.Volumes[i]
		case "ide0":
			iso = &vm.Spec.Template.Spec.Volumes[i]
		}
	}
	if ci == nil || ci.CloudInitNoCloud == nil || ci.CloudInitNoCloud.UserDataSecretRef.Name != "vm-100-cloudinit" {
		t.Fatalf("cloud-init volume %+v", ci)
	}
	if iso == nil || iso.PersistentVolumeClaim == nil || iso.PersistentVolumeClaim.ClaimName != "debian-12-iso" || !iso.PersistentVolumeClaim.ReadOnly {
		t.Fatalf("iso volume %+v", iso)
	}
	mac := vm.Spec.Template.Spec.Domain.Devices.Interfaces[0].MacAddress
	user, network, err := CloudInit(cfg, "s3cret", map[string]string{"net0": mac})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"#cloud-config\n", `user: "ops"`, `password: "s3cret"`, `- "ssh-ed25519 AAAAC3Nza me@host"`, `hostname: "web"`} {
		if !strings.Contains(user, want) {
			t.Errorf("user-data lacks %q:\n%s", want, user)
		}
	}
	for _, want := range []string{"version: 2", `macaddress: "` + strings.ToLower(mac) + `"`, `addresses: ["10.0.0.5/24"]`, `via: "10.0.0.1"`, `search: ["lab"]`} {
		if !strings.Contains(network, want) {
			t.Errorf("network-config lacks %q:\n%s", want, network)
		}
	}
	// Values cannot break out of their YAML scalar.
	user, _, _ = CloudInit(map[string]string{"ciuser": "a\"\nruncmd: [rm -rf /]"}, "", nil)
	if strings.Contains(user, "\nruncmd") {
		t.Fatalf("YAML injection:\n%s", user)
	}
}

func TestParseIPConfig(t *testing.T) {
	for in, want := range map[string]string{
		"ip=dhcp":                    "ip=dhcp",
		"ip=10.0.0.2/24,gw=10.0.0.1": "gw=10.0.0.1,ip=10.0.0.2/24",
		"ip6=auto":                   "ip6=auto",
		"ip6=fd00::5/64,gw6=fd00::1": "gw6=fd00::1,ip6=fd00::5/64",
	} {
		c, err := ParseIPConfig(in)
		if err != nil || c.String() != want {
			t.Errorf("%q: %q %v", in, c.String(), err)
		}
	}
	for _, bad := range []string{"ip=10.0.0.2", "ip=dhcp,gw=10.0.0.1", "ip6=10.0.0.2/24", "x=1", "ip"} {
		if _, err := ParseIPConfig(bad); err == nil {
			t.Errorf("%q: want error", bad)
		}
	}
}

func FuzzParseIPConfig(f *testing.F) {
	f.Add("ip=10.0.0.2/24,gw=10.0.0.1")
	f.Add("ip6=auto")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseIPConfig(s)
		if err != nil {
			return
		}
		again, err := ParseIPConfig(c.String())
		if err != nil || again != c {
			t.Fatalf("round trip %q -> %q: %v", s, c.String(), err)
		}
	})
}

func TestDropDefaultKey(t *testing.T) {
	for in, want := range map[string]string{
		"enabled=1,fstrim_cloned_disks=0,type=virtio": "1,fstrim_cloned_disks=0,type=virtio",
		"type=virtio,enabled=1":                       "1,type=virtio",
		"1,type=virtio":                               "1,type=virtio",
		"0":                                           "0",
	} {
		if got := dropDefaultKey(in, "enabled"); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
	if got := dropDefaultKey("cputype=host,flags=+aes", "cputype"); got != "host,flags=+aes" {
		t.Errorf("cpu: %q", got)
	}
}

// TestEFIDiskBooleans: pre-enrolled-keys is a boolean of the efidisk
// property string, stored as PVE prints it (1/0) whatever spelling the
// client sent, and it alone decides Secure Boot.
func TestEFIDiskBooleans(t *testing.T) {
	for _, tt := range []struct {
		in, want string
		secure   bool
		bad      bool
	}{
		{in: "pre-enrolled-keys=1", want: "pre-enrolled-keys=1", secure: true},
		{in: "pre-enrolled-keys=True", want: "pre-enrolled-keys=1", secure: true},
		{in: "pre-enrolled-keys=on", want: "pre-enrolled-keys=1", secure: true},
		{in: "pre-enrolled-keys=YES", want: "pre-enrolled-keys=1", secure: true},
		{in: "pre-enrolled-keys=false", want: "pre-enrolled-keys=0"},
		{in: "pre-enrolled-keys=0", want: "pre-enrolled-keys=0"},
		{in: "pre-enrolled-keys=off", want: "pre-enrolled-keys=0"},
		{in: "pre-enrolled-keys=maybe", bad: true},
	} {
		req := VMRequest{VMID: 100, Namespace: "d", StorageExists: storageOK,
			Config: map[string]string{"bios": "ovmf", "efidisk0": "local-lvm:1,efitype=4m," + tt.in}}
		vm, errs := BuildVM(req)
		if tt.bad {
			if !strings.Contains(errs["efidisk0"], "type check ('boolean') failed - got 'maybe'") {
				t.Errorf("%s: errs %v", tt.in, errs)
			}
			continue
		}
		if len(errs) > 0 {
			t.Fatalf("%s: %v", tt.in, errs)
		}
		if got, want := StoredConfig(vm)["efidisk0"], "local-lvm:vm-100-efidisk,efitype=4m,"+tt.want+",size=4M"; got != want {
			t.Errorf("%s: stored %q, want %q", tt.in, got, want)
		}
		d := vm.Spec.Template.Spec.Domain
		if got := *d.Firmware.Bootloader.EFI.SecureBoot; got != tt.secure {
			t.Errorf("%s: secure boot %v", tt.in, got)
		}
		if smm := d.Features != nil && d.Features.SMM != nil && *d.Features.SMM.Enabled; smm != tt.secure {
			t.Errorf("%s: SMM %v", tt.in, smm)
		}
	}
}

func TestEFITPMAndImport(t *testing.T) {
	vm := buildOK(t, map[string]string{"bios": "ovmf", "efidisk0": "local-lvm:1,efitype=4m,pre-enrolled-keys=1", "tpmstate0": "local-lvm:1",
		"scsi0": "local-lvm:0,import-from=local-lvm:golden-disk"})
	d := vm.Spec.Template.Spec.Domain
	if d.Firmware.Bootloader.EFI == nil || !*d.Firmware.Bootloader.EFI.Persistent || !*d.Firmware.Bootloader.EFI.SecureBoot || d.Features == nil || !*d.Features.SMM.Enabled {
		t.Fatalf("EFI %+v features %+v", d.Firmware.Bootloader.EFI, d.Features)
	}
	if d.Devices.TPM == nil || !*d.Devices.TPM.Persistent {
		t.Fatal("TPM")
	}
	cfg := StoredConfig(vm)
	if cfg["efidisk0"] != "local-lvm:vm-100-efidisk,efitype=4m,pre-enrolled-keys=1,size=4M" || cfg["tpmstate0"] != "local-lvm:vm-100-tpmstate,version=v2.0,size=4M" {
		t.Fatalf("efidisk0 %q tpmstate0 %q", cfg["efidisk0"], cfg["tpmstate0"])
	}
	if cfg["scsi0"] != "local-lvm:vm-100-disk-0" || vm.Spec.DataVolumeTemplates[0].Spec.Source.PVC.Name != "golden-disk" {
		t.Fatalf("import %q %+v", cfg["scsi0"], vm.Spec.DataVolumeTemplates[0].Spec.Source)
	}
	// As PVE: an EFI disk of a SeaBIOS VM is kept, unused; the VM boots BIOS.
	bios, errs := BuildVM(VMRequest{VMID: 100, Namespace: "d", StorageExists: storageOK, Config: map[string]string{"efidisk0": "local-lvm:1,efitype=4m"}})
	if len(errs) != 0 || StoredConfig(bios)["efidisk0"] != "local-lvm:vm-100-efidisk,efitype=4m,size=4M" || bios.Spec.Template.Spec.Domain.Firmware.Bootloader != nil {
		t.Fatalf("efidisk0 without ovmf: %v %v", errs, bios.Spec.Template.Spec.Domain.Firmware)
	}
	if _, errs := BuildVM(VMRequest{VMID: 100, Namespace: "d", StorageExists: storageOK, Config: map[string]string{"scsi0": "local-lvm:0,import-from=/tmp/x.qcow2"}}); errs["scsi0"] == "" {
		t.Fatal("import from a path accepted")
	}
}

// A template's disks show PVE's base- names; the claims keep theirs, and
// either name finds them (a config update that names them, an unusedN, a
// clone of the template).
func TestTemplateBaseVolumes(t *testing.T) {
	vm := buildOK(t, map[string]string{"scsi0": "local-lvm:4", "scsi1": "local-lvm:1"})
	up, errs := UpdateVM(vm, VMRequest{VMID: 100, Namespace: "default", StorageExists: storageOK}, []string{"scsi1"})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	MarkTemplate(up)
	cfg := StoredConfig(up)
	if cfg["scsi0"] != "local-lvm:base-100-disk-0,size=4G" || cfg["unused0"] != "local-lvm:base-100-disk-1" || cfg["template"] != "1" {
		t.Fatalf("template config %v", cfg)
	}
	if claims := VolumeClaims(up); strings.Join(claims, ",") != "vm-100-disk-0,vm-100-disk-1" {
		t.Fatalf("claims %v", claims)
	}
	// The config as a client sends it back, base- names and all.
	detached := claimsOf(map[string]ClaimInfo{"vm-100-disk-1": {StorageClass: "local-lvm", Bytes: GiB}})
	again, errs := UpdateVM(up, VMRequest{VMID: 100, Namespace: "default", StorageExists: storageOK, Claim: detached,
		Config: map[string]string{"scsi0": "local-lvm:base-100-disk-0,size=4G,iothread=1", "scsi2": "local-lvm:base-100-disk-1"}}, nil)
	if len(errs) > 0 {
		t.Fatalf("update naming base- volumes: %v", errs)
	}
	cfg = StoredConfig(again)
	if cfg["scsi0"] != "local-lvm:base-100-disk-0,iothread=1,size=4G" || cfg["scsi2"] != "local-lvm:base-100-disk-1,size=1G" || cfg["unused0"] != "" {
		t.Fatalf("after the update %v", cfg)
	}
	for in, want := range map[string]string{"base-100-disk-0": "vm-100-disk-0", "vm-100-disk-0": "vm-100-disk-0", "base-100-cloudinit": "base-100-cloudinit", "debian-12-iso": "debian-12-iso"} {
		if got := ClaimOfVolume(in); got != want {
			t.Errorf("ClaimOfVolume(%q) = %q, want %q", in, got, want)
		}
	}
	if BaseVolume("vm-7-disk-3") != "base-7-disk-3" || BaseVolume("data-pvc") != "data-pvc" {
		t.Error("BaseVolume")
	}
}
