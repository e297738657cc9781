package translate

import (
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// vm100 has scsi0 on vm-100-disk-0 (an 8 GiB DataVolume template on
// local-lvm) and vm-100-disk-1 (2 GiB) detached as unused0: its template
// left the spec, its DataVolume's claim is in seedClaims.
func vm100(t *testing.T) *kubevirtv1.VirtualMachine {
	t.Helper()
	vm := buildOK(t, map[string]string{"scsi0": "local-lvm:8", "scsi1": "local-lvm:2"})
	up, errs := UpdateVM(vm, VMRequest{VMID: 100, Namespace: "default", StorageExists: storageOK}, []string{"scsi1"})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if StoredConfig(up)["unused0"] != "local-lvm:vm-100-disk-1" {
		t.Fatalf("fixture: %v", StoredConfig(up))
	}
	return up
}

// testPlan is the drive plan of a write to a copy of vm that leaves cfg
// as the config; req.Config is what the call sent.
func testPlan(vm *kubevirtv1.VirtualMachine, req VMRequest, cfg map[string]string) *drivePlan {
	return newDrivePlan(vm.DeepCopy(), req, cfg, bootOrder(cfg), map[string]string{}, &diskChange{destroy: map[string]bool{}})
}

// claims100 are seedClaims and vm100's detached disk, whose DataVolume
// outlives its template.
var claims100 = func(name string) (ClaimInfo, bool) {
	if name == "vm-100-disk-1" {
		return ClaimInfo{StorageClass: "local-lvm", Bytes: 2 * GiB}, true
	}
	return seedClaims(name)
}

func req100() VMRequest {
	return VMRequest{VMID: 100, Namespace: "default", StorageExists: func(s string) bool { return s == "local-lvm" || s == "ceph-rbd" },
		FileStorage: func(s string) bool { return s == "local" },
		Claim:       claims100, VolumeTaken: takenBy(seedClaims),
		ISOSize: func(claim string) (int64, bool) { return 658505728, claim == "debian-12-iso" }}
}

func mustDrive(t *testing.T, v string) *drive {
	t.Helper()
	d, err := parseDrive(v)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestOwnedClaims(t *testing.T) {
	tmpl := func(storage string) ownedClaim { return ownedClaim{storage: storage, template: true, dv: true} }
	withUnused := seedWin11()
	withUnused.Annotations = map[string]string{AnnotationConfig: EncodeConfig(map[string]string{
		"unused0": "ceph-rbd:old-claim", "unused1": "garbage,,x=", "unused2": "local-lvm:vm-101-disk-0"})}
	withCDROM := seedWin11()
	withCDROM.Spec.Template.Spec.Domain.Devices.Disks = append(withCDROM.Spec.Template.Spec.Domain.Devices.Disks,
		kubevirtv1.Disk{Name: "install", DiskDevice: kubevirtv1.DiskDevice{CDRom: &kubevirtv1.CDRomTarget{}}})
	withCDROM.Spec.Template.Spec.Volumes = append(withCDROM.Spec.Template.Spec.Volumes, pvcVolume("install", "win-iso"))
	tests := []struct {
		name      string
		vm        *kubevirtv1.VirtualMachine
		claims    ClaimLookup
		want      map[string]ownedClaim
		templates []string
	}{
		{"a template attached, a DataVolume detached", vm100(t), seedClaims,
			map[string]ownedClaim{"vm-100-disk-0": tmpl("local-lvm"), "vm-100-disk-1": {storage: "local-lvm", dv: true}},
			[]string{"vm-100-disk-0"}},
		{"a detached claim nothing knows of", vm100(t), nil,
			map[string]ownedClaim{"vm-100-disk-0": tmpl("local-lvm"), "vm-100-disk-1": {storage: "local-lvm"}},
			[]string{"vm-100-disk-0"}},
		{"a PVC, storage from the claim", seedWin11(), seedClaims,
			map[string]ownedClaim{"vm-101-disk-0": {storage: "ceph-rbd"}}, []string{}},
		{"a PVC, storage unknown", seedWin11(), nil,
			map[string]ownedClaim{"vm-101-disk-0": {storage: unknownStorage}}, []string{}},
		{"foreign disks: only writable claims", legacyVM(), seedClaims,
			map[string]ownedClaim{"legacy-data": tmpl("local-lvm"), "data-pvc": {storage: "local-lvm"}}, []string{"legacy-data"}},
		{"unusedN: storage from the value; an attached claim stays as it is", withUnused, seedClaims,
			map[string]ownedClaim{"vm-101-disk-0": {storage: "ceph-rbd"}, "old-claim": {storage: "ceph-rbd"}}, []string{}},
		{"a CD-ROM's claim is not the VM's", withCDROM, nil,
			map[string]ownedClaim{"vm-101-disk-0": {storage: unknownStorage}}, []string{}},
	}
	for _, tt := range tests {
		stored := StoredConfig(tt.vm)
		templates, owned := ownedClaims(tt.vm, specDisks(tt.vm, stored), stored, tt.claims)
		got := map[string]ownedClaim{}
		for n, o := range owned {
			got[n] = *o
		}
		if !maps.Equal(got, tt.want) {
			t.Errorf("%s: owned %v, want %v", tt.name, got, tt.want)
		}
		if names := orderedKeys(templates); !slices.Equal(names, tt.templates) {
			t.Errorf("%s: templates %v, want %v", tt.name, names, tt.templates)
		}
	}
}

func TestForeignDisk(t *testing.T) {
	one, two := uint(1), uint(2)
	tests := []struct {
		name    string
		cfg     map[string]string // the config after the write
		sent    map[string]string // what the call sent
		boot    *uint             // want
		kept    bool
		err     string
		setBoot bool
	}{
		{"left alone", map[string]string{"sata0": ""}, map[string]string{"cores": "2"}, &one, true, "", false},
		{"deleted: detached", map[string]string{}, map[string]string{}, nil, false, "", false},
		{"the value it shows, sent back", map[string]string{"sata0": ""}, map[string]string{"sata0": "ceph-rbd:vm-101-disk-0,size=64G"}, &one, true, "", false},
		{"size aside", map[string]string{"sata0": ""}, map[string]string{"sata0": "ceph-rbd:vm-101-disk-0,size=1G"}, &one, true, "", false},
		{"another value", map[string]string{"sata0": ""}, map[string]string{"sata0": "ceph-rbd:vm-101-disk-0,iothread=1"}, nil, false,
			"'sata0' is the KubeVirt disk 'sata0', which was not made through this API: it can be detached or removed (delete, unlink), not changed or replaced", false},
		{"boot order from boot=", map[string]string{"sata0": "", "boot": "order=net0;sata0"}, map[string]string{"boot": "order=net0;sata0"}, &two, true, "", true},
		{"boot= without it: no boot order", map[string]string{"sata0": "", "boot": "order=net0"}, map[string]string{"boot": "order=net0"}, nil, true, "", true},
	}
	for _, tt := range tests {
		vm := seedWin11()
		req := req101(tt.sent)
		p := testPlan(vm, req, tt.cfg)
		s := p.foreign["sata0"]
		got, err := p.foreignDisk(vm, s, vm.Spec.Template.Spec.Domain.Devices.Disks[0], tt.setBoot)
		if errText(err) != tt.err || (got != nil) != tt.kept {
			t.Errorf("%s: got %+v, %q", tt.name, got, errText(err))
			continue
		}
		if got == nil {
			continue
		}
		if (got.BootOrder == nil) != (tt.boot == nil) || (got.BootOrder != nil && *got.BootOrder != *tt.boot) {
			t.Errorf("%s: boot order %v", tt.name, got.BootOrder)
		}
		if got.Name != "sata0" || got.Disk == nil || got.Disk.Bus != kubevirtv1.DiskBusSATA {
			t.Errorf("%s: disk changed: %+v", tt.name, got)
		}
	}
	if b := seedWin11().Spec.Template.Spec.Domain.Devices.Disks[0].BootOrder; b == nil || *b != 1 {
		t.Fatal("the VM's own disk was modified")
	}
}

func TestKeepForeign(t *testing.T) {
	names := func(disks []kubevirtv1.Disk) []string {
		var out []string
		for _, d := range disks {
			out = append(out, d.Name)
		}
		return out
	}
	volNames := func(vols []kubevirtv1.Volume) []string {
		var out []string
		for _, v := range vols {
			out = append(out, v.Name)
		}
		return out
	}
	tests := []struct {
		name        string
		vm          *kubevirtv1.VirtualMachine
		cfg         map[string]string
		disks, vols []string
		used        []string
	}{
		// legacyVM shows virtio0 (rootdisk), virtio1 (cloudinitdisk),
		// scsi0 (data) and virtio2 (scratch); nodisk has no volume.
		{"all kept, in order", legacyVM(), map[string]string{"virtio0": "", "virtio1": "", "scsi0": "", "virtio2": ""},
			[]string{"rootdisk", "cloudinitdisk", "data", "scratch", "nodisk"},
			[]string{"rootdisk", "cloudinitdisk", "data", "scratch"}, []string{"data-pvc", "legacy-data"}},
		{"one detached", legacyVM(), map[string]string{"virtio0": "", "virtio1": "", "scsi0": ""},
			[]string{"rootdisk", "cloudinitdisk", "data", "nodisk"},
			[]string{"rootdisk", "cloudinitdisk", "data"}, []string{"legacy-data"}},
		{"managed disks are left to mapDrive", vm100(t), map[string]string{"scsi0": "local-lvm:vm-100-disk-0"},
			nil, nil, nil},
	}
	for _, tt := range tests {
		p := testPlan(tt.vm, req100(), tt.cfg)
		p.keepForeign(tt.vm)
		if got := names(p.disks); !slices.Equal(got, tt.disks) {
			t.Errorf("%s: disks %v, want %v", tt.name, got, tt.disks)
		}
		if got := volNames(p.vols); !slices.Equal(got, tt.vols) {
			t.Errorf("%s: volumes %v, want %v", tt.name, got, tt.vols)
		}
		if got := orderedKeys(p.used); len(got)+len(tt.used) > 0 && !slices.Equal(got, tt.used) {
			t.Errorf("%s: used %v, want %v", tt.name, got, tt.used)
		}
		if len(p.errs) > 0 {
			t.Errorf("%s: errs %v", tt.name, p.errs)
		}
	}
}

func TestManagedKeys(t *testing.T) {
	p := testPlan(seedWin11(), req101(nil), map[string]string{
		"scsi10": "", "scsi2": "", "virtio0": "", "sata0": "", "ide2": "", "net0": "", "unused0": "", "efidisk0": ""})
	if got, want := p.managedKeys(), []string{"ide2", "scsi2", "scsi10", "virtio0"}; !slices.Equal(got, want) {
		t.Fatalf("managedKeys = %v, want %v (sata0 is the foreign disk's)", got, want)
	}
}

func TestMapDrive(t *testing.T) {
	type want struct {
		cdrom, disk kubevirtv1.DiskBus // the disk's device and bus
		source      string             // the volume: "nocloud", "configdrive", "pvc:<claim>", "ro:<claim>", "dv:<claim>"
		shown       string             // the stored value
		boot        uint
		err         string
		none        bool // no disk, the value kept
	}
	tests := []struct {
		name   string
		key, v string
		extra  map[string]string
		want   want
	}{
		{"cloud-init", "ide2", "local-lvm:cloudinit", nil,
			want{cdrom: kubevirtv1.DiskBusSATA, source: "nocloud", shown: "local-lvm:vm-100-cloudinit,media=cdrom"}},
		{"cloud-init on SCSI, config drive", "scsi5", "local-lvm:vm-100-cloudinit", map[string]string{"citype": "configdrive2"},
			want{cdrom: kubevirtv1.DiskBusSCSI, source: "configdrive", shown: "local-lvm:vm-100-cloudinit,media=cdrom"}},
		{"cloud-init on the directory storage (the drive is a Secret)", "ide2", "local:cloudinit", nil,
			want{cdrom: kubevirtv1.DiskBusSATA, source: "nocloud", shown: "local:vm-100-cloudinit,media=cdrom"}},
		{"cloud-init on no storage", "ide2", "nope:cloudinit", nil, want{err: "storage 'nope' does not exist"}},
		{"a disk on the directory storage", "scsi3", "local:4", nil, want{err: "storage 'local' does not support vm images"}},
		{"empty CD-ROM", "ide0", "none,media=cdrom", nil, want{none: true, shown: "none,media=cdrom"}},
		{"physical CD-ROM", "ide0", "cdrom,media=cdrom", nil, want{none: true, shown: "cdrom,media=cdrom"}},
		{"ISO image", "ide0", "local:iso/debian-12.iso,media=cdrom", map[string]string{"boot": "order=ide0"},
			want{cdrom: kubevirtv1.DiskBusSATA, source: "ro:debian-12-iso", shown: "local:iso/debian-12.iso,media=cdrom,size=628M", boot: 1}},
		{"ISO image missing", "ide0", "local:iso/none.iso,media=cdrom", nil,
			want{err: "volume 'local:iso/none.iso' does not exist (expected a PVC 'none-iso' in namespace 'default')"}},
		{"not an ISO image", "ide0", "local-lvm:8,media=cdrom", nil,
			want{err: "invalid CD-ROM volume 'local-lvm:8': use '<storage>:iso/<file>', 'none' or 'cdrom'"}},
		{"new disk", "virtio1", "local-lvm:4,iothread=1", map[string]string{"boot": "order=scsi0;virtio1"},
			want{disk: kubevirtv1.DiskBusVirtio, source: "dv:vm-100-disk-2", shown: "local-lvm:vm-100-disk-2,iothread=1,size=4G", boot: 2}},
		{"unused disk re-attached", "sata1", "local-lvm:vm-100-disk-1", nil,
			want{disk: kubevirtv1.DiskBusSATA, source: "pvc:vm-100-disk-1", shown: "local-lvm:vm-100-disk-1,size=2G"}},
		{"IDE disk runs on SATA", "ide1", "local-lvm:1", nil,
			want{disk: kubevirtv1.DiskBusSATA, source: "dv:vm-100-disk-2", shown: "local-lvm:vm-100-disk-2,size=1G"}},
		{"unparsable", "scsi3", "local-lvm:3,x", nil, want{err: "invalid format - format error: 'x' is not a key=value pair"}},
	}
	for _, tt := range tests {
		cfg := map[string]string{tt.key: tt.v}
		maps.Copy(cfg, tt.extra)
		p := testPlan(vm100(t), req100(), cfg)
		p.mapDrive(tt.key)
		w := tt.want
		if p.errs[tt.key] != w.err {
			t.Errorf("%s: err %q, want %q", tt.name, p.errs[tt.key], w.err)
		}
		if w.err != "" || w.none {
			if len(p.disks) != 0 || len(p.vols) != 0 || (w.none && cfg[tt.key] != w.shown) {
				t.Errorf("%s: disks %v volumes %v value %q", tt.name, p.disks, p.vols, cfg[tt.key])
			}
			continue
		}
		if len(p.disks) != 1 || len(p.vols) != 1 {
			t.Errorf("%s: disks %v volumes %v", tt.name, p.disks, p.vols)
			continue
		}
		d, v := p.disks[0], p.vols[0]
		if d.Name != tt.key || v.Name != tt.key {
			t.Errorf("%s: names %q %q", tt.name, d.Name, v.Name)
		}
		switch {
		case w.cdrom != "" && (d.CDRom == nil || d.CDRom.Bus != w.cdrom),
			w.disk != "" && (d.Disk == nil || d.Disk.Bus != w.disk):
			t.Errorf("%s: device %+v", tt.name, d.DiskDevice)
		}
		if (d.BootOrder == nil) != (w.boot == 0) || (d.BootOrder != nil && *d.BootOrder != w.boot) {
			t.Errorf("%s: boot order %v, want %d", tt.name, d.BootOrder, w.boot)
		}
		var src string
		switch {
		case v.CloudInitNoCloud != nil:
			src = "nocloud"
		case v.CloudInitConfigDrive != nil:
			src = "configdrive"
		case v.DataVolume != nil:
			src = "dv:" + v.DataVolume.Name
		case v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ReadOnly:
			src = "ro:" + v.PersistentVolumeClaim.ClaimName
		case v.PersistentVolumeClaim != nil:
			src = "pvc:" + v.PersistentVolumeClaim.ClaimName
		}
		if src != w.source || cfg[tt.key] != w.shown {
			t.Errorf("%s: volume %s, value %q; want %s, %q", tt.name, src, cfg[tt.key], w.source, w.shown)
		}
	}

	// A VM has one cloud-init drive.
	cfg := map[string]string{"ide2": "local-lvm:cloudinit", "scsi9": "local-lvm:cloudinit"}
	p := testPlan(vm100(t), req100(), cfg)
	p.mapDrive("ide2")
	p.mapDrive("scsi9")
	if p.errs["scsi9"] != "only one cloud-init drive is allowed (already on ide2)" || len(p.disks) != 1 {
		t.Fatalf("second cloud-init drive: %v", p.errs)
	}
}

func TestCloudInitVolume(t *testing.T) {
	for _, citype := range []string{"", "nocloud", "configdrive2"} {
		v := cloudInitVolume("ide2", 100, citype)
		var user, network *corev1.LocalObjectReference
		switch {
		case citype == "configdrive2" && v.CloudInitConfigDrive != nil:
			user, network = v.CloudInitConfigDrive.UserDataSecretRef, v.CloudInitConfigDrive.NetworkDataSecretRef
		case citype != "configdrive2" && v.CloudInitNoCloud != nil:
			user, network = v.CloudInitNoCloud.UserDataSecretRef, v.CloudInitNoCloud.NetworkDataSecretRef
		default:
			t.Errorf("citype %q: volume %+v", citype, v.VolumeSource)
			continue
		}
		if v.Name != "ide2" || user == nil || network == nil || user.Name != "vm-100-cloudinit" || network.Name != "vm-100-cloudinit" {
			t.Errorf("citype %q: %+v", citype, v)
		}
	}
}

func TestDiskTarget(t *testing.T) {
	on := true
	tests := []struct {
		bus  kubevirtv1.DiskBus
		v    string
		want kubevirtv1.Disk
	}{
		{kubevirtv1.DiskBusSCSI, "local-lvm:1", kubevirtv1.Disk{DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: "scsi"}}}},
		{kubevirtv1.DiskBusVirtio, "local-lvm:1,iothread=1", kubevirtv1.Disk{DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: "virtio"}}, DedicatedIOThread: &on}},
		{kubevirtv1.DiskBusVirtio, "local-lvm:1,iothread=0", kubevirtv1.Disk{DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: "virtio"}}}},
		// KubeVirt's webhook refuses I/O threads on any bus but virtio.
		{kubevirtv1.DiskBusSATA, "local-lvm:1,iothread=1", kubevirtv1.Disk{DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: "sata"}}}},
		{kubevirtv1.DiskBusSCSI, "local-lvm:1,iothread=1", kubevirtv1.Disk{DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: "scsi"}}}},
		{kubevirtv1.DiskBusSCSI, "local-lvm:1,cache=writeback", kubevirtv1.Disk{DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: "scsi"}}, Cache: "writeback"}},
		{kubevirtv1.DiskBusSCSI, "local-lvm:1,cache=none", kubevirtv1.Disk{DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: "scsi"}}, Cache: "none"}},
		{kubevirtv1.DiskBusSCSI, "local-lvm:1,cache=writethrough", kubevirtv1.Disk{DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: "scsi"}}, Cache: "writethrough"}},
		// KubeVirt has no unsafe or directsync cache: the default.
		{kubevirtv1.DiskBusSCSI, "local-lvm:1,cache=unsafe", kubevirtv1.Disk{DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: "scsi"}}}},
		{kubevirtv1.DiskBusSCSI, "local-lvm:1,cache=directsync", kubevirtv1.Disk{DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: "scsi"}}}},
		{kubevirtv1.DiskBusSCSI, "local-lvm:1,serial=abc", kubevirtv1.Disk{DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: "scsi"}}, Serial: "abc"}},
	}
	for _, tt := range tests {
		if got, err := diskTarget(tt.bus, mustDrive(t, tt.v)); !reflect.DeepEqual(got, tt.want) || err != nil {
			t.Errorf("diskTarget(%s, %q) = %+v, %v; want %+v", tt.bus, tt.v, got, err, tt.want)
		}
	}
}

func TestDiskSerial(t *testing.T) {
	tests := []struct{ v, want, err string }{
		{"", "", ""},
		{"WD-WX12345678", "WD-WX12345678", ""},
		{"disk_1.data%2Ba", "disk_1.data+a", ""},
		{"disk+1", "", "invalid format - serial: invalid urlencoded string: disk+1"}, // as PVE: '+' must be encoded
		{"ABC%2B1", "ABC+1", ""},     // url-encoded, decoded as QEMU gets it
		{"abc%2Ddef", "abc-def", ""}, // an encoded character KubeVirt takes
		{"my%20disk", "", "serial 'my disk' is not supported: KubeVirt takes only the characters A-Z, a-z, 0-9, '_', '.', '+' and '-' in a disk serial"},
		{"it's", "", "serial 'it's' is not supported: KubeVirt takes only the characters A-Z, a-z, 0-9, '_', '.', '+' and '-' in a disk serial"},
		{"a%2Fb", "", "serial 'a/b' is not supported: KubeVirt takes only the characters A-Z, a-z, 0-9, '_', '.', '+' and '-' in a disk serial"},
		{"a b", "", "invalid format - serial: invalid urlencoded string: a b"},
		{"50%", "", "invalid format - serial: invalid urlencoded string: 50%"},
		{strings.Repeat("x", 61), "", "invalid format - serial: value may only be 60 characters long"},
	}
	for _, tt := range tests {
		got, err := diskSerial(tt.v)
		if got != tt.want || errText(err) != tt.err {
			t.Errorf("diskSerial(%q) = %q, %q; want %q, %q", tt.v, got, errText(err), tt.want, tt.err)
		}
	}
}

func TestDiskBuses(t *testing.T) {
	tests := []struct {
		key         string
		disk, cdrom kubevirtv1.DiskBus
	}{
		{"scsi0", "scsi", "scsi"},
		{"virtio3", "virtio", "sata"},
		{"sata1", "sata", "sata"},
		{"ide2", "sata", "sata"}, // KubeVirt has no IDE
	}
	for _, tt := range tests {
		if b := diskBus(tt.key); b != tt.disk || cdromBus(b) != tt.cdrom {
			t.Errorf("%s: disk bus %s, CD-ROM bus %s", tt.key, b, cdromBus(b))
		}
	}
}

func TestClaimVolume(t *testing.T) {
	if v := claimVolume("scsi0", "vm-100-disk-0", true); v.Name != "scsi0" || v.DataVolume == nil || v.DataVolume.Name != "vm-100-disk-0" {
		t.Errorf("DataVolume: %+v", v)
	}
	if v := claimVolume("sata0", "data", false); v.Name != "sata0" || v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != "data" || v.PersistentVolumeClaim.ReadOnly {
		t.Errorf("PVC: %+v", v)
	}
}

func TestDiskClaim(t *testing.T) {
	tests := []struct {
		v, name string
		asDV    bool
		err     string
	}{
		{"local-lvm:0,import-from=local-lvm:golden-disk", "vm-100-disk-2", true, ""},
		{"local-lvm:3", "vm-100-disk-2", true, ""},
		{"local-lvm:vm-100-disk-1", "vm-100-disk-1", false, ""}, // detached: its template is gone
		{"pvc:vm-100-disk-0", "vm-100-disk-0", true, ""},        // the storage part is not checked for an owned claim
		// import-from on a value that is no new disk is no import.
		{"local-lvm:vm-100-disk-1,import-from=local-lvm:golden-disk", "vm-100-disk-1", false, ""},
		{"local-lvm:data-pvc", "", false, "volume 'local-lvm:data-pvc' is not a volume of VM 100"},
	}
	for _, tt := range tests {
		p := testPlan(vm100(t), req100(), map[string]string{})
		name, asDV, err := p.diskClaim(mustDrive(t, tt.v))
		if name != tt.name || asDV != tt.asDV || errText(err) != tt.err {
			t.Errorf("diskClaim(%q) = %q, %v, %q; want %q, %v, %q", tt.v, name, asDV, errText(err), tt.name, tt.asDV, tt.err)
		}
	}
	// A PVC the VM uses stays a PVC.
	p := testPlan(seedWin11(), req101(nil), map[string]string{})
	if name, asDV, err := p.diskClaim(mustDrive(t, "ceph-rbd:vm-101-disk-0")); name != "vm-101-disk-0" || asDV || err != nil {
		t.Errorf("PVC: %q %v %v", name, asDV, err)
	}
}

// imageClaims are claims holding images to import: one kept as a file
// (its disk 3 GiB in a 4 GiB claim), one on a block volume.
var imageClaims = claimsOf(map[string]ClaimInfo{
	"import-noble-qcow2": {StorageClass: "local-lvm", Bytes: 4 * GiB, ImageBytes: 3 * GiB},
	"import-block-raw":   {StorageClass: "local-lvm", Bytes: 5 * GiB},
})

func TestImportDisk(t *testing.T) {
	tests := []struct {
		name   string
		v, imp string
		claims ClaimLookup
		taken  func(string) (bool, error)
		shown  string
		size   int64 // the template's request; 0 for none
		err    string
	}{
		{"the source's size", "local-lvm:0", "local-lvm:golden-disk", seedClaims, nil, "local-lvm:vm-100-disk-0,size=3G", 3 * GiB, ""},
		{"larger than the source", "local-lvm:5", "local-lvm:golden-disk", seedClaims, nil, "local-lvm:vm-100-disk-0,size=5G", 5 * GiB, ""},
		{"never smaller than the source", "local-lvm:1", "ceph-rbd:golden-disk", seedClaims, nil, "local-lvm:vm-100-disk-0,size=3G", 3 * GiB, ""},
		{"no claim facts: the size asked, whole MiB", "local-lvm:0.001", "local-lvm:x", nil, nil, "local-lvm:vm-100-disk-0,size=2M", 2 << 20, ""},
		{"no claim facts, no size: CDI's", "local-lvm:0", "local-lvm:x", nil, nil, "local-lvm:vm-100-disk-0", 0, ""},
		{"names in use elsewhere (one reported, one a claim)", "local-lvm:0", "local-lvm:golden-disk", seedClaims, takenBy(seedClaims, "vm-100-disk-0"),
			"local-lvm:vm-100-disk-2,size=3G", 3 * GiB, ""},
		{"not a volume id", "local-lvm:0", "golden-disk", seedClaims, nil, "", 0,
			"import-from 'golden-disk': only volumes of this cluster ('<storage>:<volume>' or '<storage>:import/<file>') can be imported"},
		{"a path", "local-lvm:0", "local:images/x.qcow2", seedClaims, nil, "", 0,
			"import-from 'local:images/x.qcow2': only volumes of this cluster ('<storage>:<volume>' or '<storage>:import/<file>') can be imported"},
		{"no target storage", "1", "local-lvm:golden-disk", seedClaims, nil, "", 0,
			"import-from 'local-lvm:golden-disk': only volumes of this cluster ('<storage>:<volume>' or '<storage>:import/<file>') can be imported"},
		{"unknown storage", "nope:1", "local-lvm:golden-disk", seedClaims, nil, "", 0, "storage 'nope' does not exist"},
		{"missing source", "local-lvm:1", "local-lvm:missing", seedClaims, nil, "", 0, "import-from: volume 'local-lvm:missing' does not exist"},
		// An image of the directory storage: its claim, sized as the image's disk.
		{"an import image", "local-lvm:0", "local:import/noble.qcow2", imageClaims, nil, "local-lvm:vm-100-disk-0,size=3G", 3 * GiB, ""},
		{"an import image, larger", "local-lvm:8", "local:import/noble.qcow2", imageClaims, nil, "local-lvm:vm-100-disk-0,size=8G", 8 * GiB, ""},
		{"an import image on block storage: the claim's size", "local-lvm:0", "local:import/block.raw", imageClaims, nil, "local-lvm:vm-100-disk-0,size=5G", 5 * GiB, ""},
		{"a missing import image", "local-lvm:0", "local:import/none.qcow2", imageClaims, nil, "", 0, "import-from: volume 'local:import/none.qcow2' does not exist"},
		{"names cannot be checked", "local-lvm:1", "local-lvm:golden-disk", seedClaims,
			func(string) (bool, error) { return false, errors.New("apiserver down") }, "", 0,
			"cannot tell whether volume name 'vm-100-disk-0' is free: apiserver down"},
	}
	for _, tt := range tests {
		req := req100()
		req.Claim, req.VolumeTaken = tt.claims, tt.taken
		p := testPlan(buildOK(t, map[string]string{}), req, map[string]string{})
		d := mustDrive(t, tt.v+",import-from="+tt.imp)
		name, err := p.importDisk(d, tt.imp)
		if errText(err) != tt.err {
			t.Errorf("%s: err %q, want %q", tt.name, errText(err), tt.err)
			continue
		}
		if err != nil {
			if len(p.templates) != 0 || len(p.owned) != 0 {
				t.Errorf("%s: a refused import left %v", tt.name, p.templates)
			}
			continue
		}
		if d.String() != tt.shown {
			t.Errorf("%s: value %q, want %q", tt.name, d.String(), tt.shown)
		}
		tmpl := p.templates[name]
		src := tmpl.Spec.Source
		_, want, _ := strings.Cut(tt.imp, ":")
		if f, ok := strings.CutPrefix(want, "import/"); ok {
			want = FileClaimName(ContentImport, f)
		}
		if src == nil || src.PVC == nil || src.PVC.Namespace != "default" || src.PVC.Name != want {
			t.Errorf("%s: source %+v", tt.name, src)
		}
		if got := DataVolumeSize(tmpl); got != tt.size || TemplateStorageClass(tmpl) != "local-lvm" {
			t.Errorf("%s: template size %d class %q, want %d", tt.name, got, TemplateStorageClass(tmpl), tt.size)
		}
		if o := p.owned[name]; o == nil || *o != (ownedClaim{storage: "local-lvm", template: true, dv: true}) {
			t.Errorf("%s: owned %+v", tt.name, o)
		}
	}
}

func TestBlankDisk(t *testing.T) {
	tests := []struct {
		name  string
		v     string
		shown string
		size  int64
		err   string
	}{
		{"GiB", "local-lvm:8", "local-lvm:vm-100-disk-0,size=8G", 8 * GiB, ""},
		{"fractions, whole MiB", "local-lvm:1.5", "local-lvm:vm-100-disk-0,size=1536M", 1536 << 20, ""},
		{"tiny rounds up", "local-lvm:0.0000001", "local-lvm:vm-100-disk-0,size=1M", 1 << 20, ""},
		{"options kept", "ceph-rbd:2,cache=none,serial=x", "ceph-rbd:vm-100-disk-0,cache=none,serial=x,size=2G", 2 * GiB, ""},
		{"zero", "local-lvm:0", "", 0, "disk size must be greater than zero"},
		{"no storage", "4", "", 0, "missing storage ID in '4'"},
		{"unknown storage", "nope:4", "", 0, "storage 'nope' does not exist"},
		{"the directory storage", "local:4", "", 0, "storage 'local' does not support vm images"},
	}
	for _, tt := range tests {
		p := testPlan(buildOK(t, map[string]string{}), req100(), map[string]string{})
		d := mustDrive(t, tt.v)
		m := newDiskRE.FindStringSubmatch(d.file)
		name, err := p.blankDisk(d, m[2], m[3])
		if errText(err) != tt.err {
			t.Errorf("%s: err %q, want %q", tt.name, errText(err), tt.err)
			continue
		}
		if err != nil {
			continue
		}
		tmpl := p.templates[name]
		if d.String() != tt.shown || DataVolumeSize(tmpl) != tt.size || tmpl.Spec.Source == nil || tmpl.Spec.Source.Blank == nil {
			t.Errorf("%s: value %q template %+v", tt.name, d.String(), tmpl.Spec)
		}
	}

	// New names skip the VM's claims, those the call deletes and those in
	// use elsewhere in the namespace.
	req := req100()
	req.VolumeTaken = takenBy(seedClaims, "vm-100-disk-3")
	p := testPlan(vm100(t), req, map[string]string{})
	p.chg.destroy["vm-100-disk-2"] = true
	for _, want := range []string{"vm-100-disk-4", "vm-100-disk-5"} {
		if name, err := p.blankDisk(mustDrive(t, "local-lvm:1"), "local-lvm", "1"); name != want || err != nil {
			t.Errorf("new name %q, %v; want %q", name, err, want)
		}
	}
}

func TestReattach(t *testing.T) {
	tests := []struct {
		name   string
		vm     *kubevirtv1.VirtualMachine
		claims ClaimLookup
		v      string
		claim  string
		used   bool
		shown  string
		asDV   bool
		err    string
	}{
		{"detached template disk: the claim's size", vm100(t), claims100, "local-lvm:vm-100-disk-1", "vm-100-disk-1", false, "local-lvm:vm-100-disk-1,size=2G", false, ""},
		{"template: its size", buildOK(t, map[string]string{"scsi0": "local-lvm:8"}), nil, "local-lvm:vm-100-disk-0", "vm-100-disk-0", false, "local-lvm:vm-100-disk-0,size=8G", true, ""},
		{"a detached DataVolume: the claim's size", vm100(t), seedClaims, "local-lvm:vm-100-disk-1", "vm-100-disk-1", false, "local-lvm:vm-100-disk-1,size=2G", true, ""},
		{"PVC: the claim's size", seedWin11(), seedClaims, "ceph-rbd:vm-101-disk-0", "vm-101-disk-0", false, "ceph-rbd:vm-101-disk-0,size=64G", false, ""},
		{"PVC, size unknown", seedWin11(), nil, "pvc:vm-101-disk-0,size=9G", "vm-101-disk-0", false, "pvc:vm-101-disk-0,size=9G", false, ""},
		{"twice", vm100(t), nil, "local-lvm:vm-100-disk-0", "vm-100-disk-0", true, "", false,
			"volume 'local-lvm:vm-100-disk-0' is already used by another drive"},
	}
	for _, tt := range tests {
		req := req100()
		req.Claim = tt.claims
		p := testPlan(tt.vm, req, map[string]string{})
		p.used[tt.claim] = tt.used
		p.chg.destroy[tt.claim] = true // deleted in the same call: moved instead
		d := mustDrive(t, tt.v)
		name, asDV, err := p.reattach(d, tt.claim)
		if errText(err) != tt.err {
			t.Errorf("%s: err %q, want %q", tt.name, errText(err), tt.err)
			continue
		}
		if err != nil {
			if !p.chg.destroy[tt.claim] {
				t.Errorf("%s: a refused attach kept the claim from deletion", tt.name)
			}
			continue
		}
		if name != tt.claim || asDV != tt.asDV || d.String() != tt.shown || p.chg.destroy[tt.claim] {
			t.Errorf("%s: %q %v %q destroy %v", tt.name, name, asDV, d.String(), p.chg.destroy)
		}
	}
}

func TestUnknownVolume(t *testing.T) {
	tests := []struct {
		v    string
		want string
	}{
		{"local-lvm:data-pvc", "volume 'local-lvm:data-pvc' is not a volume of VM 100"},
		{"ceph-rbd:vm-101-disk-0", "volume 'ceph-rbd:vm-101-disk-0' is not a volume of VM 100"},
		{"local-lvm:vm-100-disk-9", "volume 'local-lvm:vm-100-disk-9' does not exist"},
		{"garbage", "unable to parse volume 'garbage': use '<storage>:<size in GiB>' for a new disk or '<storage>:vm-<vmid>-disk-<n>' for an existing one"},
		{"local-lvm:some-claim", "unable to parse volume 'local-lvm:some-claim': use '<storage>:<size in GiB>' for a new disk or '<storage>:vm-<vmid>-disk-<n>' for an existing one"},
	}
	p := testPlan(vm100(t), req100(), map[string]string{})
	for _, tt := range tests {
		if got := errText(p.unknownVolume(mustDrive(t, tt.v))); got != tt.want {
			t.Errorf("unknownVolume(%q) = %q, want %q", tt.v, got, tt.want)
		}
	}
}

func TestKeptUnusedKeys(t *testing.T) {
	tests := []struct {
		name        string
		stored, cfg map[string]string
		want        map[string]string
	}{
		{"unchanged keeps its key; changed and new do not",
			map[string]string{"unused0": "s:a", "unused1": "s:b", "unused2": "s:c"},
			map[string]string{"unused0": "s:a", "unused1": "s:x", "unused3": "s:d", "scsi0": "s:e"},
			map[string]string{"a": "unused0"}},
		{"a claim listed twice keeps the first key",
			map[string]string{"unused0": "s:a", "unused1": "s:a"},
			map[string]string{"unused0": "s:a", "unused1": "s:a"},
			map[string]string{"a": "unused0"}},
		{"deleted", map[string]string{"unused0": "s:a"}, map[string]string{}, map[string]string{}},
		{"unparsable", map[string]string{"unused0": ",,x"}, map[string]string{"unused0": ",,x"}, map[string]string{}},
	}
	for _, tt := range tests {
		got := keptUnusedKeys(tt.stored, tt.cfg)
		if !maps.Equal(got, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
		for k := range tt.cfg {
			if strings.HasPrefix(k, "unused") {
				t.Errorf("%s: %s left in the config", tt.name, k)
			}
		}
	}
}

func TestUnusedEntries(t *testing.T) {
	owned := func(names ...string) map[string]*ownedClaim {
		m := map[string]*ownedClaim{}
		for _, n := range names {
			m[n] = &ownedClaim{storage: "local-lvm"}
		}
		return m
	}
	set := func(names ...string) map[string]bool {
		m := map[string]bool{}
		for _, n := range names {
			m[n] = true
		}
		return m
	}
	tests := []struct {
		name      string
		owned     map[string]*ownedClaim
		used      map[string]bool
		destroy   map[string]bool
		prev      map[string]string
		unused    map[string]string
		destroyed []string
	}{
		{"all in use", owned("a", "b"), set("a", "b"), set(), map[string]string{}, map[string]string{}, nil},
		{"detached: lowest free key, in name order", owned("b", "a", "c"), set("c"), set(), map[string]string{},
			map[string]string{"unused0": "local-lvm:a", "unused1": "local-lvm:b"}, nil},
		{"destroyed", owned("a", "b"), set(), set("b"), map[string]string{},
			map[string]string{"unused0": "local-lvm:a"}, []string{"b"}},
		{"kept keys are kept and skipped", owned("a", "b", "c"), set(), set(), map[string]string{"b": "unused0", "c": "unused2"},
			map[string]string{"unused0": "local-lvm:b", "unused1": "local-lvm:a", "unused2": "local-lvm:c"}, nil},
		{"in use wins over its old key", owned("a"), set("a"), set(), map[string]string{"a": "unused0"}, map[string]string{}, nil},
		{"destroy wins over its old key", owned("a"), set(), set("a"), map[string]string{"a": "unused0"}, map[string]string{}, []string{"a"}},
	}
	for _, tt := range tests {
		unused, destroyed := unusedEntries(tt.owned, tt.used, tt.destroy, tt.prev)
		if !maps.Equal(unused, tt.unused) || !slices.Equal(destroyed, tt.destroyed) {
			t.Errorf("%s: %v %v, want %v %v", tt.name, unused, destroyed, tt.unused, tt.destroyed)
		}
	}
}

func TestKeptTemplates(t *testing.T) {
	templates := map[string]kubevirtv1.DataVolumeTemplateSpec{}
	for _, n := range []string{"vm-1-disk-2", "vm-1-disk-0", "vm-1-disk-1", "vm-1-disk-3"} {
		templates[n] = blankTemplate(n, "local-lvm", GiB)
	}
	vols := []kubevirtv1.Volume{
		*claimVolume("scsi0", "vm-1-disk-2", true),
		*claimVolume("scsi1", "vm-1-disk-0", false), // a PVC volume references its template too
		{Name: "ide2", VolumeSource: kubevirtv1.VolumeSource{ContainerDisk: &kubevirtv1.ContainerDiskSource{Image: "x"}}},
	}
	// vm-1-disk-1 is detached (or destroyed): no volume, no template.
	got := keptTemplates(templates, nil, vols)
	if len(got) != 2 || got[0].Name != "vm-1-disk-0" || got[1].Name != "vm-1-disk-2" {
		t.Fatalf("kept %v", got)
	}
	if keptTemplates(map[string]kubevirtv1.DataVolumeTemplateSpec{}, nil, nil) != nil {
		t.Fatal("no templates must stay nil, as the VM had none")
	}
}

func TestTemplates(t *testing.T) {
	b := blankTemplate("vm-1-disk-0", "ceph-rbd", 3*GiB)
	if b.Name != "vm-1-disk-0" || b.Spec.Source.Blank == nil || TemplateStorageClass(b) != "ceph-rbd" ||
		b.Spec.Storage.Resources.Requests[corev1.ResourceStorage] != *resource.NewQuantity(3*GiB, resource.BinarySI) {
		t.Errorf("blank %+v", b)
	}
	i := importTemplate("vm-1-disk-1", "local-lvm", "lab", "golden", 0)
	if i.Spec.Source.PVC == nil || i.Spec.Source.PVC.Namespace != "lab" || i.Spec.Source.PVC.Name != "golden" ||
		TemplateStorageClass(i) != "local-lvm" || i.Spec.Storage.Resources.Requests != nil {
		t.Errorf("import %+v", i)
	}
	if DataVolumeSize(importTemplate("x", "s", "n", "g", GiB)) != GiB {
		t.Error("import size")
	}
}

func TestSizes(t *testing.T) {
	for _, tt := range []struct {
		gib          string
		bytes, whole int64
	}{
		{"1", GiB, GiB},
		{"0.5", GiB / 2, GiB / 2},
		{"0", 0, 0},
		{"0.0000001", 107, 1 << 20},
		{"1.0000001", GiB + 107, GiB + 1<<20},
	} {
		if b := gibBytes(tt.gib); b != tt.bytes || wholeMiB(b) != tt.whole {
			t.Errorf("%s GiB: %d bytes, %d whole; want %d, %d", tt.gib, b, wholeMiB(b), tt.bytes, tt.whole)
		}
	}
}
