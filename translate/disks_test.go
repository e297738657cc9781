package translate

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// claimsOf is a ClaimLookup over a fixed set of PVCs (StorageClass, GiB).
func claimsOf(m map[string]ClaimInfo) ClaimLookup {
	return func(name string) (ClaimInfo, bool) {
		ci, ok := m[name]
		return ci, ok
	}
}

// takenBy is a VolumeTaken that reports the claims of lookup, and extra
// names (DataVolumes or other VMs' templates), as in use.
func takenBy(lookup ClaimLookup, extra ...string) func(string) (bool, error) {
	return func(name string) (bool, error) {
		if _, ok := lookup(name); ok {
			return true, nil
		}
		return slices.Contains(extra, name), nil
	}
}

func pvcVolume(name, claim string) kubevirtv1.Volume {
	return kubevirtv1.Volume{Name: name, VolumeSource: kubevirtv1.VolumeSource{PersistentVolumeClaim: &kubevirtv1.PersistentVolumeClaimVolumeSource{
		PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
}

func diskOn(name string, bus kubevirtv1.DiskBus) kubevirtv1.Disk {
	return kubevirtv1.Disk{Name: name, DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: bus}}}
}

// seedWin11 is the simulator's VM 101: made with kubectl, no stored
// config, its disk sata0 on the PVC vm-101-disk-0 (64 GiB on ceph-rbd).
func seedWin11() *kubevirtv1.VirtualMachine {
	one := uint(1)
	vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "win-11", Namespace: "default", Labels: map[string]string{LabelVMID: "101"}}}
	vm.Spec.Template = &kubevirtv1.VirtualMachineInstanceTemplateSpec{}
	spec := &vm.Spec.Template.Spec
	spec.Domain.CPU = &kubevirtv1.CPU{Sockets: 1, Cores: 4, Threads: 1}
	d := diskOn("sata0", kubevirtv1.DiskBusSATA)
	d.BootOrder = &one
	spec.Domain.Devices.Disks = []kubevirtv1.Disk{d}
	spec.Volumes = []kubevirtv1.Volume{pvcVolume("sata0", "vm-101-disk-0")}
	return vm
}

var seedClaims = claimsOf(map[string]ClaimInfo{
	"vm-100-disk-1": {StorageClass: "local-lvm", Bytes: 2 * GiB, DataVolume: true}, // vm100's unused0
	"vm-101-disk-0": {StorageClass: "ceph-rbd", Bytes: 64 * GiB},
	"data-pvc":      {StorageClass: "local-lvm", Bytes: 10 * GiB},
	"golden-disk":   {StorageClass: "local-lvm", Bytes: 3 * GiB},
})

func req101(cfg map[string]string) VMRequest {
	return VMRequest{VMID: 101, Namespace: "default", Config: cfg, Claim: seedClaims, VolumeTaken: takenBy(seedClaims),
		StorageExists: func(s string) bool { return s == "local-lvm" || s == "ceph-rbd" }}
}

// legacyVM is a VM with the kinds of disks kubectl users make: a
// containerDisk root, an inline cloud-init disk, a DataVolume template
// on SCSI and a plain PVC, none named like a PVE key.
func legacyVM() *kubevirtv1.VirtualMachine {
	vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "legacy-app", Namespace: "lab"}}
	vm.Spec.Template = &kubevirtv1.VirtualMachineInstanceTemplateSpec{}
	sc := "local-lvm"
	vm.Spec.DataVolumeTemplates = []kubevirtv1.DataVolumeTemplateSpec{{
		ObjectMeta: metav1.ObjectMeta{Name: "legacy-data"},
		Spec: cdiv1.DataVolumeSpec{Storage: &cdiv1.StorageSpec{StorageClassName: &sc,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("20Gi")}}}},
	}}
	spec := &vm.Spec.Template.Spec
	spec.Domain.Devices.Disks = []kubevirtv1.Disk{
		diskOn("rootdisk", kubevirtv1.DiskBusVirtio),
		diskOn("cloudinitdisk", kubevirtv1.DiskBusVirtio),
		diskOn("data", kubevirtv1.DiskBusSCSI),
		diskOn("scratch", ""),
		{Name: "nodisk"}, // no volume: not a disk KubeVirt would accept
	}
	spec.Volumes = []kubevirtv1.Volume{
		{Name: "rootdisk", VolumeSource: kubevirtv1.VolumeSource{ContainerDisk: &kubevirtv1.ContainerDiskSource{Image: "quay.io/containerdisks/fedora:41"}}},
		{Name: "cloudinitdisk", VolumeSource: kubevirtv1.VolumeSource{CloudInitNoCloud: &kubevirtv1.CloudInitNoCloudSource{UserData: "#cloud-config\n"}}},
		{Name: "data", VolumeSource: kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: "legacy-data"}}},
		pvcVolume("scratch", "data-pvc"),
	}
	return vm
}

func TestConfigViewShowsEveryDisk(t *testing.T) {
	for _, c := range []struct {
		name string
		vm   *kubevirtv1.VirtualMachine
		want map[string]string
	}{
		{"PVC named like a PVE key", seedWin11(), map[string]string{"sata0": "ceph-rbd:vm-101-disk-0,size=64G"}},
		{"disks named otherwise: keys from bus and order", legacyVM(), map[string]string{
			"virtio0": "containerdisk:quay.io/containerdisks/fedora:41,snapshot=1",
			"virtio1": "cloudinit:cloudinitdisk",
			"scsi0":   "local-lvm:legacy-data,size=20G",
			"virtio2": "local-lvm:data-pvc,size=10G",
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := ConfigView(c.vm, seedClaims)
			got := map[string]string{}
			for k, x := range v {
				if diskKeyRE.MatchString(k) {
					got[k] = x.(string)
				}
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("disks %v, want %v", got, c.want)
			}
			if again := ConfigView(c.vm, seedClaims); again["digest"] != v["digest"] {
				t.Fatal("the view changed between reads")
			}
		})
	}
	// Without claim facts the volume keeps PVE's shape and the size is left out.
	if v := ConfigView(seedWin11(), nil); v["sata0"] != "pvc:vm-101-disk-0" {
		t.Fatalf("no lookup: %v", v["sata0"])
	}
	// A CD-ROM on a read-only claim shows as media=cdrom.
	vm := seedWin11()
	vm.Spec.Template.Spec.Domain.Devices.Disks = append(vm.Spec.Template.Spec.Domain.Devices.Disks,
		kubevirtv1.Disk{Name: "install", DiskDevice: kubevirtv1.DiskDevice{CDRom: &kubevirtv1.CDRomTarget{}}})
	iso := pvcVolume("install", "win11-iso")
	iso.PersistentVolumeClaim.ReadOnly = true
	vm.Spec.Template.Spec.Volumes = append(vm.Spec.Template.Spec.Volumes, iso)
	if v := ConfigView(vm, seedClaims); v["sata1"] != "pvc:win11-iso,media=cdrom" {
		t.Fatalf("cdrom: %v", v)
	}
}

func TestAddDiskKeepsForeignDisks(t *testing.T) {
	vm := seedWin11()
	u, errs := UpdateVMChange(vm, req101(map[string]string{"scsi1": "ceph-rbd:1"}), nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	up := u.VM
	// The existing disk and its volume are exactly as they were.
	spec := up.Spec.Template.Spec
	if len(spec.Domain.Devices.Disks) != 2 || !reflect.DeepEqual(spec.Domain.Devices.Disks[0], vm.Spec.Template.Spec.Domain.Devices.Disks[0]) {
		t.Fatalf("disks %+v", spec.Domain.Devices.Disks)
	}
	if !slices.ContainsFunc(spec.Volumes, func(v kubevirtv1.Volume) bool {
		return reflect.DeepEqual(v, vm.Spec.Template.Spec.Volumes[0])
	}) {
		t.Fatalf("volume sata0 changed: %+v", spec.Volumes)
	}
	// The new disk gets a name no claim has.
	if len(up.Spec.DataVolumeTemplates) != 1 || up.Spec.DataVolumeTemplates[0].Name != "vm-101-disk-1" {
		t.Fatalf("templates %+v", up.Spec.DataVolumeTemplates)
	}
	v := ConfigView(up, seedClaims)
	if v["sata0"] != "ceph-rbd:vm-101-disk-0,size=64G" || v["scsi1"] != "ceph-rbd:vm-101-disk-1,size=1G" {
		t.Fatalf("view %v", v)
	}
	if _, stored := StoredConfig(up)["sata0"]; stored {
		t.Fatal("a foreign disk must be shown from the spec, not stored")
	}
	if len(u.Destroy) != 0 {
		t.Fatalf("destroy %v", u.Destroy)
	}

	// Names in use anywhere in the namespace are skipped, not only the
	// VM's own: a DataVolume of another VM holds vm-101-disk-1.
	r := req101(map[string]string{"scsi1": "ceph-rbd:1"})
	r.VolumeTaken = takenBy(seedClaims, "vm-101-disk-1")
	up2, errs := UpdateVM(vm, r, nil)
	if len(errs) > 0 || up2.Spec.DataVolumeTemplates[0].Name != "vm-101-disk-2" {
		t.Fatalf("%v %+v", errs, up2)
	}

	// The second disk added through the API keeps the first one too.
	up3, errs := UpdateVM(up, req101(map[string]string{"virtio0": "ceph-rbd:2", "cores": "2"}), nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	v = ConfigView(up3, seedClaims)
	if v["sata0"] != "ceph-rbd:vm-101-disk-0,size=64G" || v["scsi1"] != "ceph-rbd:vm-101-disk-1,size=1G" || v["virtio0"] != "ceph-rbd:vm-101-disk-2,size=2G" {
		t.Fatalf("view %v", v)
	}
}

func TestForeignDiskChangesRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		set  map[string]string
		err  string // key with an error; "" = accepted
	}{
		{"replaced by a new disk", map[string]string{"sata0": "ceph-rbd:4"}, "sata0"},
		{"options changed", map[string]string{"sata0": "ceph-rbd:vm-101-disk-0,cache=writeback"}, "sata0"},
		{"another volume", map[string]string{"sata0": "ceph-rbd:vm-101-disk-7"}, "sata0"},
		{"sent back as shown", map[string]string{"sata0": "ceph-rbd:vm-101-disk-0,size=64G"}, ""},
		{"sent back without size (proxmox_disk)", map[string]string{"sata0": "ceph-rbd:vm-101-disk-0"}, ""},
		{"another VM's claim", map[string]string{"scsi2": "local-lvm:data-pvc"}, "scsi2"},
		{"its claim under a second key", map[string]string{"scsi2": "ceph-rbd:vm-101-disk-0"}, "scsi2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			vm := seedWin11()
			up, errs := UpdateVM(vm, req101(c.set), nil)
			if c.err == "" {
				if len(errs) > 0 {
					t.Fatal(errs)
				}
				if !reflect.DeepEqual(up.Spec.Template.Spec.Domain.Devices.Disks, vm.Spec.Template.Spec.Domain.Devices.Disks) ||
					!reflect.DeepEqual(up.Spec.Template.Spec.Volumes, vm.Spec.Template.Spec.Volumes) {
					t.Fatalf("the disk changed: %+v", up.Spec.Template.Spec)
				}
				return
			}
			if up != nil || errs[c.err] == "" {
				t.Fatalf("want an error on %s, got %v", c.err, errs)
			}
		})
	}
	// When the namespace's claims cannot be read, no name is known free.
	r := req101(map[string]string{"scsi1": "ceph-rbd:1"})
	r.VolumeTaken = func(string) (bool, error) { return false, errors.New("apiserver unavailable") }
	if up, errs := UpdateVM(seedWin11(), r, nil); up != nil || !strings.Contains(errs["scsi1"], "apiserver unavailable") {
		t.Fatalf("%v", errs)
	}
}

func TestForeignDiskKeysStayPut(t *testing.T) {
	vm := legacyVM()
	// Detach the root disk: the others keep their keys, and the write
	// pins them.
	u, errs := UpdateVMChange(vm, VMRequest{VMID: 7, Namespace: "lab", Claim: seedClaims}, []string{"virtio0"})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	v := ConfigView(u.VM, seedClaims)
	if v["virtio0"] != nil || v["virtio1"] != "cloudinit:cloudinitdisk" || v["virtio2"] != "local-lvm:data-pvc,size=10G" || v["scsi0"] != "local-lvm:legacy-data,size=20G" {
		t.Fatalf("after detaching virtio0: %v", v)
	}
	if len(u.Destroy) != 0 || len(u.VM.Spec.DataVolumeTemplates) != 1 {
		t.Fatalf("destroy %v templates %v", u.Destroy, u.VM.Spec.DataVolumeTemplates)
	}
	// A repeated delete of virtio0 hits nothing.
	u2, errs := UpdateVMChange(u.VM, VMRequest{VMID: 7, Namespace: "lab", Claim: seedClaims, Force: true}, []string{"virtio0"})
	if len(errs) > 0 || len(u2.Destroy) != 0 || !reflect.DeepEqual(u2.VM.Spec.Template.Spec.Domain.Devices.Disks, u.VM.Spec.Template.Spec.Domain.Devices.Disks) {
		t.Fatalf("repeated delete: %v %v", errs, u2.Destroy)
	}
	// Detaching the PVC keeps it as unused0, and it can be attached again
	// (as a PVC, under a PVE key).
	u3, errs := UpdateVMChange(u.VM, VMRequest{VMID: 7, Namespace: "lab", Claim: seedClaims}, []string{"virtio2"})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if v := ConfigView(u3.VM, seedClaims); v["unused0"] != "local-lvm:data-pvc" || v["virtio2"] != nil || v["virtio1"] == nil {
		t.Fatalf("after detach: %v", v)
	}
	u4, errs := UpdateVMChange(u3.VM, VMRequest{VMID: 7, Namespace: "lab", Claim: seedClaims, Config: map[string]string{"scsi3": "local-lvm:data-pvc"}}, []string{"unused0"})
	if len(errs) > 0 || len(u4.Destroy) != 0 {
		t.Fatal(errs, u4.Destroy)
	}
	if v := ConfigView(u4.VM, seedClaims); v["scsi3"] != "local-lvm:data-pvc,size=10G" || v["unused0"] != nil {
		t.Fatalf("after reattach: %v", v)
	}
	if !slices.ContainsFunc(u4.VM.Spec.Template.Spec.Volumes, func(v kubevirtv1.Volume) bool {
		return v.Name == "scsi3" && v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == "data-pvc"
	}) {
		t.Fatalf("volumes %+v", u4.VM.Spec.Template.Spec.Volumes)
	}
	// Changing one of them is refused, naming the KubeVirt disk.
	if _, errs := UpdateVM(u.VM, VMRequest{VMID: 7, Namespace: "lab", Claim: seedClaims, Config: map[string]string{"scsi0": "local-lvm:30"}}, nil); !strings.Contains(errs["scsi0"], "'data'") {
		t.Fatalf("%v", errs)
	}
}

func TestDeleteVolumes(t *testing.T) {
	templates := func(vm *kubevirtv1.VirtualMachine) []string {
		var out []string
		for _, t := range vm.Spec.DataVolumeTemplates {
			out = append(out, t.Name)
		}
		return out
	}
	upd := func(t *testing.T, vm *kubevirtv1.VirtualMachine, force bool, deletes ...string) VMUpdate {
		t.Helper()
		u, errs := UpdateVMChange(vm, VMRequest{VMID: 100, Namespace: "default", StorageExists: storageOK, Force: force,
			ISOSize: func(string) (int64, bool) { return 1 << 20, true }}, deletes)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		return u
	}
	vm, errs := BuildVM(VMRequest{VMID: 100, Namespace: "default", StorageExists: storageOK, ISOSize: func(string) (int64, bool) { return 1 << 20, true },
		Config: map[string]string{"scsi0": "local-lvm:8", "scsi1": "local-lvm:2", "scsi2": "local-lvm:3", "ide2": "local:iso/x.iso,media=cdrom"}})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	// force=1 frees the volume at once.
	u := upd(t, vm, true, "scsi1")
	if !reflect.DeepEqual(u.Destroy, []string{"vm-100-disk-1"}) || slices.Contains(templates(u.VM), "vm-100-disk-1") || StoredConfig(u.VM)["unused0"] != "" {
		t.Fatalf("force: %v %v %v", u.Destroy, templates(u.VM), StoredConfig(u.VM))
	}
	// A CD-ROM's image is shared: removing the drive never frees it.
	if u := upd(t, vm, true, "ide2"); len(u.Destroy) != 0 {
		t.Fatalf("cdrom: %v", u.Destroy)
	}

	// Without force the volumes become unusedN; unusedN keep their keys.
	u = upd(t, vm, false, "scsi1", "scsi2")
	if c := StoredConfig(u.VM); c["unused0"] != "local-lvm:vm-100-disk-1" || c["unused1"] != "local-lvm:vm-100-disk-2" || len(u.Destroy) != 0 {
		t.Fatalf("detach: %v %v", c, u.Destroy)
	}
	u = upd(t, u.VM, false, "unused0")
	if c := StoredConfig(u.VM); !reflect.DeepEqual(u.Destroy, []string{"vm-100-disk-1"}) || c["unused0"] != "" || c["unused1"] != "local-lvm:vm-100-disk-2" {
		t.Fatalf("delete unused0: %v %v", c, u.Destroy)
	}
	// A detached disk's template goes (KubeVirt refuses one no volume
	// uses); its claim stays as unusedN.
	if !reflect.DeepEqual(templates(u.VM), []string{"vm-100-disk-0"}) {
		t.Fatalf("templates %v", templates(u.VM))
	}
	// Deleting unused0 again is a no-op; it does not hit unused1.
	u = upd(t, u.VM, false, "unused0")
	if c := StoredConfig(u.VM); len(u.Destroy) != 0 || c["unused1"] != "local-lvm:vm-100-disk-2" {
		t.Fatalf("repeated delete: %v %v", c, u.Destroy)
	}
	// A new detach takes the first free unusedN.
	u = upd(t, u.VM, false, "scsi0")
	if c := StoredConfig(u.VM); c["unused0"] != "local-lvm:vm-100-disk-0" || c["unused1"] != "local-lvm:vm-100-disk-2" {
		t.Fatalf("detach again: %v", c)
	}

	// A foreign PVC deleted with force goes too; without force it is kept.
	u, errs = UpdateVMChange(seedWin11(), VMRequest{VMID: 101, Namespace: "default", Claim: seedClaims, Force: true}, []string{"sata0"})
	if len(errs) > 0 || !reflect.DeepEqual(u.Destroy, []string{"vm-101-disk-0"}) || len(u.VM.Spec.Template.Spec.Volumes) != 0 {
		t.Fatalf("foreign force: %v %v %+v", errs, u.Destroy, u.VM.Spec.Template.Spec.Volumes)
	}
	u, errs = UpdateVMChange(seedWin11(), VMRequest{VMID: 101, Namespace: "default", Claim: seedClaims}, []string{"sata0"})
	if len(errs) > 0 || len(u.Destroy) != 0 || StoredConfig(u.VM)["unused0"] != "ceph-rbd:vm-101-disk-0" {
		t.Fatalf("foreign detach: %v %v %v", errs, u.Destroy, StoredConfig(u.VM))
	}
	// unusedN sent by a client is not a way to name a volume to delete.
	u, errs = UpdateVMChange(u.VM, VMRequest{VMID: 101, Namespace: "default", Claim: seedClaims, Config: map[string]string{"unused1": "local-lvm:data-pvc"}}, nil)
	if len(errs) > 0 || StoredConfig(u.VM)["unused1"] != "" {
		t.Fatalf("client unused1: %v %v", errs, StoredConfig(u.VM))
	}
	u, errs = UpdateVMChange(u.VM, VMRequest{VMID: 101, Namespace: "default", Claim: seedClaims}, []string{"unused1"})
	if len(errs) > 0 || len(u.Destroy) != 0 {
		t.Fatalf("delete client unused1: %v %v", errs, u.Destroy)
	}
}

func TestImportFromSize(t *testing.T) {
	for _, c := range []struct {
		value, want string
		bytes       int64
	}{
		{"local-lvm:0,import-from=local-lvm:golden-disk", "local-lvm:vm-100-disk-0,size=3G", 3 * GiB},
		{"local-lvm:5,import-from=local-lvm:golden-disk", "local-lvm:vm-100-disk-0,size=5G", 5 * GiB},
	} {
		vm, errs := BuildVM(VMRequest{VMID: 100, Namespace: "default", StorageExists: storageOK, Claim: seedClaims, Config: map[string]string{"scsi0": c.value}})
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		if got := StoredConfig(vm)["scsi0"]; got != c.want {
			t.Errorf("%s: %s, want %s", c.value, got, c.want)
		}
		if got := DataVolumeSize(vm.Spec.DataVolumeTemplates[0]); got != c.bytes {
			t.Errorf("%s: DataVolume asks for %d, want %d", c.value, got, c.bytes)
		}
	}
	if _, errs := BuildVM(VMRequest{VMID: 100, Namespace: "default", StorageExists: storageOK, Claim: seedClaims,
		Config: map[string]string{"scsi0": "local-lvm:0,import-from=local-lvm:vm-334-disk-0"}}); !strings.Contains(errs["scsi0"], "does not exist") {
		t.Fatalf("missing source: %v", errs)
	}
}

func TestPendingForeignDisks(t *testing.T) {
	vm := legacyVM()
	vmi := &kubevirtv1.VirtualMachineInstance{Spec: *vm.Spec.Template.Spec.DeepCopy()}
	vmi.Status.Phase = kubevirtv1.Running
	for _, r := range PendingView(vm, vmi, seedClaims) {
		if diskKeyRE.MatchString(r.Key) && (r.Pending != nil || r.Delete != 0) {
			t.Errorf("running disk shows as a change: %+v", r)
		}
	}
}

func TestCloneDiskNames(t *testing.T) {
	// VM 101 after a disk was added, one detached and its PVC re-attached
	// under a PVE key.
	up, errs := UpdateVM(seedWin11(), req101(map[string]string{"scsi1": "ceph-rbd:1", "scsi2": "local-lvm:1"}), nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	up, errs = UpdateVM(up, req101(nil), []string{"scsi2"}) // vm-101-disk-2 -> unused0
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	taken := takenBy(seedClaims, "vm-200-disk-0")
	clone, errs := CloneVM(up, CloneRequest{NewID: 200, Namespace: "default", VolumeTaken: taken})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var names []string
	for _, t := range clone.Spec.DataVolumeTemplates {
		names = append(names, t.Name)
	}
	if !reflect.DeepEqual(names, []string{"vm-200-disk-1", "vm-200-disk-2"}) {
		t.Fatalf("clone volumes %v", names)
	}
	v := ConfigView(clone, nil)
	if v["unused0"] != nil || !strings.HasPrefix(v["scsi1"].(string), "ceph-rbd:vm-200-disk-") || !strings.HasPrefix(v["sata0"].(string), "pvc:vm-200-disk-") {
		t.Fatalf("clone config %v", v)
	}
	if _, errs := CloneVM(up, CloneRequest{NewID: 200, Namespace: "default", VolumeTaken: func(string) (bool, error) { return false, errors.New("down") }}); errs["newid"] == "" {
		t.Fatal("a clone whose volume names cannot be checked was built")
	}
}

func TestClaimInfoOf(t *testing.T) {
	sc := "local-lvm"
	pvc := func(owner *metav1.OwnerReference) *corev1.PersistentVolumeClaim {
		p := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "vm-100-disk-1"}}
		p.Spec.StorageClassName = &sc
		p.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}
		if owner != nil {
			p.OwnerReferences = []metav1.OwnerReference{*owner}
		}
		return p
	}
	yes := true
	ref := func(apiVersion, kind, name string, controller bool) *metav1.OwnerReference {
		return &metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, Controller: &controller}
	}
	tests := []struct {
		name  string
		owner *metav1.OwnerReference
		dv    bool
	}{
		{"made by CDI for its DataVolume", ref("cdi.kubevirt.io/v1beta1", "DataVolume", "vm-100-disk-1", yes), true},
		{"no owner", nil, false},
		{"another DataVolume's", ref("cdi.kubevirt.io/v1beta1", "DataVolume", "other", yes), false},
		{"owned, not controlled", ref("cdi.kubevirt.io/v1beta1", "DataVolume", "vm-100-disk-1", false), false},
		{"a VM's", ref("kubevirt.io/v1", "VirtualMachine", "vm-100-disk-1", yes), false},
	}
	for _, tt := range tests {
		ci := ClaimInfoOf(pvc(tt.owner))
		if ci.DataVolume != tt.dv || ci.StorageClass != sc || ci.Bytes != 2*GiB {
			t.Errorf("%s: %+v", tt.name, ci)
		}
	}
}
