package translate

import (
	"errors"
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

func TestFreeKubeName(t *testing.T) {
	tests := []struct {
		name  string
		taken []string
		want  string
	}{
		{"Web Server", nil, "web-server"},
		{"web", []string{"web"}, "web-100"},
		{"web", []string{"web", "web-100"}, "pve-100"},
		{"", nil, "vm-100"},
	}
	for _, tt := range tests {
		var taken func(string) bool
		if tt.taken != nil {
			taken = func(n string) bool { return slices.Contains(tt.taken, n) }
		}
		if got := freeKubeName(tt.name, 100, taken); got != tt.want {
			t.Errorf("freeKubeName(%q, taken %v) = %q, want %q", tt.name, tt.taken, got, tt.want)
		}
	}
}

func TestCloneName(t *testing.T) {
	src := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "kube-name"}}
	tests := []struct {
		cfgName, asked, want string
	}{
		{"golden", "", "Copy-of-VM-golden"},
		{"", "", "Copy-of-VM-kube-name"},
		{"golden", "web2", "web2"},
	}
	for _, tt := range tests {
		if got := cloneName(src, map[string]string{"name": tt.cfgName}, tt.asked); got != tt.want {
			t.Errorf("cloneName(%q, %q) = %q, want %q", tt.cfgName, tt.asked, got, tt.want)
		}
	}
}

func TestCloneIdentityParts(t *testing.T) {
	tests := []struct {
		name, hostname, want string
	}{
		{"web.lab", "golden", "web"},
		{"Copy-of-VM-golden", "golden", "copy-of-vm-golden"},
		{"web", "", ""}, // KubeVirt's default hostname stays the default
	}
	for _, tt := range tests {
		spec := &kubevirtv1.VirtualMachineInstanceSpec{Hostname: tt.hostname}
		cfg := map[string]string{}
		cloneIdentity(spec, cfg, CloneRequest{NewID: 7, NewUUID: func() string { return "U" }}, tt.name)
		if spec.Hostname != tt.want || cfg["smbios1"] != "uuid=U" || spec.Domain.Firmware == nil || spec.Domain.Firmware.UUID != "U" {
			t.Errorf("%s: hostname %q, smbios1 %q, firmware %+v", tt.name, spec.Hostname, cfg["smbios1"], spec.Domain.Firmware)
		}
	}
}

func TestCloneMACs(t *testing.T) {
	spec := &kubevirtv1.VirtualMachineInstanceSpec{}
	spec.Domain.Devices.Interfaces = []kubevirtv1.Interface{{Name: "net0", MacAddress: "BC:24:11:00:00:01"}, {Name: "default", MacAddress: "02:00:00:00:00:01"}}
	cfg := map[string]string{"net0": "virtio=BC:24:11:00:00:01,bridge=vmbr0"}
	cloneMACs(spec, cfg, CloneRequest{NewID: 200, Namespace: "lab"})
	net0 := GenerateMAC([]byte("lab/200/net0"))
	other := GenerateMAC([]byte("lab/200/default"))
	if spec.Domain.Devices.Interfaces[0].MacAddress != net0 || spec.Domain.Devices.Interfaces[1].MacAddress != other {
		t.Fatalf("MACs %+v", spec.Domain.Devices.Interfaces)
	}
	if cfg["net0"] != "virtio="+net0+",bridge=vmbr0" || len(cfg) != 1 {
		t.Fatalf("config %v", cfg)
	}
}

func TestCloneSource(t *testing.T) {
	sc := "ceph-rbd"
	size := corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("8Gi")}
	templates := map[string]kubevirtv1.DataVolumeTemplateSpec{
		"vm-1-disk-0": blankTemplate("vm-1-disk-0", sc, 8*GiB),
		"pvc-spec":    {ObjectMeta: metav1.ObjectMeta{Name: "pvc-spec"}},
	}
	ro := pvcVolume("iso", "debian-iso")
	ro.PersistentVolumeClaim.ReadOnly = true
	tests := []struct {
		name  string
		v     kubevirtv1.Volume
		claim string
		sc    string
		size  bool
	}{
		{"DataVolume with template", kubevirtv1.Volume{VolumeSource: kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: "vm-1-disk-0"}}}, "vm-1-disk-0", sc, true},
		{"DataVolume, template without storage spec", kubevirtv1.Volume{VolumeSource: kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: "pvc-spec"}}}, "pvc-spec", "", false},
		{"DataVolume without template", kubevirtv1.Volume{VolumeSource: kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: "imported"}}}, "imported", "", false},
		{"writable PVC", pvcVolume("sata0", "data"), "data", "", false},
		{"read-only PVC: shared", ro, "", "", false},
		{"container disk: shared", kubevirtv1.Volume{VolumeSource: kubevirtv1.VolumeSource{ContainerDisk: &kubevirtv1.ContainerDiskSource{Image: "x"}}}, "", "", false},
	}
	for _, tt := range tests {
		claim, gotSC, gotSize := cloneSource(&tt.v, templates)
		scs := ""
		if gotSC != nil {
			scs = *gotSC
		}
		if claim != tt.claim || scs != tt.sc || (gotSize != nil) != tt.size || (tt.size && !maps.EqualFunc(gotSize, size, func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })) {
			t.Errorf("%s: %q %q %v", tt.name, claim, scs, gotSize)
		}
	}
}

func TestCloneCloudInit(t *testing.T) {
	ours := &corev1.LocalObjectReference{Name: "vm-100-cloudinit"}
	theirs := &corev1.LocalObjectReference{Name: "app-userdata"}
	clone := "vm-200-cloudinit"
	name := func(r *corev1.LocalObjectReference) string {
		if r == nil {
			return ""
		}
		return r.Name
	}
	tests := []struct {
		name          string
		v             kubevirtv1.Volume
		user, network string // the clone's Secret references
		inline        [4]string
	}{
		{"this API's drive: the clone's Secret",
			kubevirtv1.Volume{VolumeSource: kubevirtv1.VolumeSource{CloudInitNoCloud: &kubevirtv1.CloudInitNoCloudSource{UserDataSecretRef: ours, NetworkDataSecretRef: ours}}},
			clone, clone, [4]string{}},
		{"ConfigDrive of this API",
			kubevirtv1.Volume{VolumeSource: kubevirtv1.VolumeSource{CloudInitConfigDrive: &kubevirtv1.CloudInitConfigDriveSource{UserDataSecretRef: ours, NetworkDataSecretRef: ours}}},
			clone, clone, [4]string{}},
		{"inline NoCloud, base64 network data: kept, no Secret",
			kubevirtv1.Volume{VolumeSource: kubevirtv1.VolumeSource{CloudInitNoCloud: &kubevirtv1.CloudInitNoCloudSource{UserData: "#cloud-config", NetworkDataBase64: "dmVyc2lvbjogMgo="}}},
			"", "", [4]string{"#cloud-config", "", "", "dmVyc2lvbjogMgo="}},
		{"inline ConfigDrive user data: kept, no Secret",
			kubevirtv1.Volume{VolumeSource: kubevirtv1.VolumeSource{CloudInitConfigDrive: &kubevirtv1.CloudInitConfigDriveSource{UserDataBase64: "I2Nsb3VkLWNvbmZpZw=="}}},
			"", "", [4]string{"", "I2Nsb3VkLWNvbmZpZw==", "", ""}},
		{"the user's Secret is shared; ours is the clone's",
			kubevirtv1.Volume{VolumeSource: kubevirtv1.VolumeSource{CloudInitNoCloud: &kubevirtv1.CloudInitNoCloudSource{UserDataSecretRef: theirs, NetworkDataSecretRef: ours}}},
			"app-userdata", clone, [4]string{}},
		{"empty ConfigDrive stays empty",
			kubevirtv1.Volume{VolumeSource: kubevirtv1.VolumeSource{CloudInitConfigDrive: &kubevirtv1.CloudInitConfigDriveSource{}}},
			"", "", [4]string{}},
	}
	for _, tt := range tests {
		if !cloneCloudInit(&tt.v, 200) {
			t.Fatalf("%s: not handled", tt.name)
		}
		var user, network string
		var inline [4]string
		if c := tt.v.CloudInitNoCloud; c != nil {
			user, network, inline = name(c.UserDataSecretRef), name(c.NetworkDataSecretRef), [4]string{c.UserData, c.UserDataBase64, c.NetworkData, c.NetworkDataBase64}
		} else if c := tt.v.CloudInitConfigDrive; c != nil {
			user, network, inline = name(c.UserDataSecretRef), name(c.NetworkDataSecretRef), [4]string{c.UserData, c.UserDataBase64, c.NetworkData, c.NetworkDataBase64}
		}
		if user != tt.user || network != tt.network || inline != tt.inline {
			t.Errorf("%s: secrets %q %q inline %q", tt.name, user, network, inline)
		}
	}
	if pvc := pvcVolume("scsi0", "x"); cloneCloudInit(&pvc, 200) {
		t.Fatal("a PVC is not cloud-init")
	}
}

func TestCloneVolumes(t *testing.T) {
	src := buildOK(t, map[string]string{"scsi0": "local-lvm:8", "ide2": "local-lvm:cloudinit"})
	src.Spec.Template.Spec.Volumes = append(src.Spec.Template.Spec.Volumes, pvcVolume("sata0", "data"))
	tests := []struct {
		name    string
		storage string
		taken   func(string) (bool, error)
		names   []string
		classes []string
		err     string
	}{
		{"source classes", "", nil, []string{"vm-200-disk-0", "vm-200-disk-1"}, []string{"local-lvm", ""}, ""},
		{"storage override", "ceph-rbd", nil, []string{"vm-200-disk-0", "vm-200-disk-1"}, []string{"ceph-rbd", "ceph-rbd"}, ""},
		{"names in use skipped", "", takenBy(claimsOf(nil), "vm-200-disk-0"), []string{"vm-200-disk-1", "vm-200-disk-2"}, []string{"local-lvm", ""}, ""},
		{"names cannot be checked", "", func(string) (bool, error) { return false, errors.New("down") }, nil, nil,
			"cannot tell whether volume name 'vm-200-disk-0' is free: down"},
	}
	for _, tt := range tests {
		spec := src.Spec.Template.Spec.DeepCopy()
		dvs, renamed, err := cloneVolumes(src, spec, CloneRequest{NewID: 200, Storage: tt.storage, VolumeTaken: tt.taken})
		if errText(err) != tt.err {
			t.Errorf("%s: err %q", tt.name, errText(err))
			continue
		}
		if err != nil {
			continue
		}
		var names, classes []string
		for _, dv := range dvs {
			names = append(names, dv.Name)
			classes = append(classes, TemplateStorageClass(dv))
			if dv.Spec.Source.PVC == nil || dv.Spec.Source.PVC.Namespace != "default" {
				t.Errorf("%s: source %+v", tt.name, dv.Spec.Source)
			}
		}
		if !slices.Equal(names, tt.names) || !slices.Equal(classes, tt.classes) {
			t.Errorf("%s: copies %v classes %v, want %v %v", tt.name, names, classes, tt.names, tt.classes)
		}
		want := map[string]string{"vm-100-disk-0": tt.names[0], "data": tt.names[1]}
		if !maps.Equal(renamed, want) {
			t.Errorf("%s: renamed %v, want %v", tt.name, renamed, want)
		}
		if DataVolumeSize(dvs[0]) != 8*GiB || DataVolumeSize(dvs[1]) != 0 {
			t.Errorf("%s: sizes %d %d", tt.name, DataVolumeSize(dvs[0]), DataVolumeSize(dvs[1]))
		}
		sourceOf := map[string]string{"scsi0": "vm-100-disk-0", "sata0": "data"}
		for _, v := range spec.Volumes {
			switch v.Name {
			case "scsi0", "sata0":
				if v.DataVolume == nil || v.DataVolume.Name != renamed[sourceOf[v.Name]] {
					t.Errorf("%s: volume %+v", tt.name, v)
				}
			case "ide2":
				if v.CloudInitNoCloud == nil || v.CloudInitNoCloud.UserDataSecretRef.Name != "vm-200-cloudinit" {
					t.Errorf("%s: cloud-init %+v", tt.name, v)
				}
			}
		}
	}
}

func TestCloneDiskKeys(t *testing.T) {
	tests := []struct {
		name      string
		storage   string
		cfg, want map[string]string
	}{
		{"copies, cloud-init, unused and uncopied volumes",
			"",
			map[string]string{
				"scsi0": "local-lvm:vm-100-disk-0,iothread=1,size=8G", "ide2": "local-lvm:vm-100-cloudinit,media=cdrom",
				"ide0": "local:iso/debian.iso,media=cdrom", "unused0": "local-lvm:vm-100-disk-1", "scsi1": "local-lvm:vm-100-disk-5",
				"cores": "2", "virtio0": ",,bad"},
			map[string]string{
				"scsi0": "local-lvm:vm-200-disk-0,iothread=1,size=8G", "ide2": "local-lvm:vm-200-cloudinit,media=cdrom",
				"ide0": "local:iso/debian.iso,media=cdrom", "cores": "2", "virtio0": ",,bad"}},
		{"storage override", "ceph-rbd",
			map[string]string{"scsi0": "local-lvm:vm-100-disk-0,size=8G"},
			map[string]string{"scsi0": "ceph-rbd:vm-200-disk-0,size=8G"}},
	}
	for _, tt := range tests {
		cloneDiskKeys(tt.cfg, map[string]string{"vm-100-disk-0": "vm-200-disk-0"}, CloneRequest{NewID: 200, Storage: tt.storage})
		if !maps.Equal(tt.cfg, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, tt.cfg, tt.want)
		}
	}
}
