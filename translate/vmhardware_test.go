package translate

import (
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// checkKeys compares what a piece left in cfg and errs.
func checkKeys(t *testing.T, name string, cfg, wantCfg, errs, wantErrs map[string]string) {
	t.Helper()
	if !maps.Equal(cfg, wantCfg) {
		t.Errorf("%s: cfg = %v, want %v", name, cfg, wantCfg)
	}
	if len(errs) != len(wantErrs) || !maps.Equal(errs, wantErrs) {
		t.Errorf("%s: errs = %v, want %v", name, errs, wantErrs)
	}
}

func TestIntKey(t *testing.T) {
	tests := []struct {
		v       string // "" for absent
		want    int
		shown   string
		wantErr string
	}{
		{"", 1, "", ""},
		{"4", 4, "4", ""},
		{" 3 ", 3, "3", ""},
		{"007", 7, "7", ""},
		{"x", 1, "x", "type check ('integer') failed - got 'x'"},
		{"1.5", 1, "1.5", "type check ('integer') failed - got '1.5'"},
		{"0", 1, "0", "value must have a minimum value of 1"},
		{"129", 1, "129", "value may not exceed 128"},
		{"128", 128, "128", ""},
	}
	for _, tt := range tests {
		cfg, errs := map[string]string{}, map[string]string{}
		if tt.v != "" {
			cfg["cores"] = tt.v
		}
		got := intKey(cfg, errs, "cores", 1, 1, 128)
		if got != tt.want || cfg["cores"] != tt.shown || errs["cores"] != tt.wantErr {
			t.Errorf("intKey(%q) = %d, cfg %q, err %q; want %d, %q, %q", tt.v, got, cfg["cores"], errs["cores"], tt.want, tt.shown, tt.wantErr)
		}
	}
}

func TestNormalizeBools(t *testing.T) {
	cfg := map[string]string{"onboot": "yes", "numa": "Off", "tablet": "TRUE", "acpi": "0", "kvm": "maybe", "cores": "yes"}
	errs := map[string]string{}
	normalizeBools(cfg, errs)
	checkKeys(t, "bools", cfg, map[string]string{"onboot": "1", "numa": "0", "tablet": "1", "acpi": "0", "kvm": "maybe", "cores": "yes"},
		errs, map[string]string{"kvm": "type check ('boolean') failed - got 'maybe'"})
}

func TestCheckOptions(t *testing.T) {
	long := strings.Repeat("d", 8193)
	tests := []struct {
		name      string
		cfg, want map[string]string
		errs      map[string]string
	}{
		{"none", map[string]string{}, map[string]string{}, map[string]string{}},
		{"tags sorted as PVE prints them", map[string]string{"tags": "web,db"}, map[string]string{"tags": "db;web"}, map[string]string{}},
		{"bad tag", map[string]string{"tags": "a!"}, map[string]string{"tags": "a!"},
			map[string]string{"tags": "invalid format - invalid characters in tag"}},
		{"description too long", map[string]string{"description": long}, map[string]string{"description": long},
			map[string]string{"description": "value may only be 8192 characters long"}},
		{"agent without its default key", map[string]string{"agent": "enabled=1,type=virtio"}, map[string]string{"agent": "1,type=virtio"}, map[string]string{}},
		{"agent off", map[string]string{"agent": "enabled=0"}, map[string]string{"agent": "0"}, map[string]string{}},
		{"agent bogus", map[string]string{"agent": "maybe"}, map[string]string{"agent": "maybe"},
			map[string]string{"agent": "invalid format - value 'maybe' is not a valid agent setting"}},
	}
	for _, tt := range tests {
		errs := map[string]string{}
		checkOptions(tt.cfg, errs)
		checkKeys(t, tt.name, tt.cfg, tt.want, errs, tt.errs)
	}
}

func TestApplyCPU(t *testing.T) {
	tests := []struct {
		name           string
		cfg, want      map[string]string
		errs           map[string]string
		sockets, cores uint32
		model          string
	}{
		{"defaults", map[string]string{}, map[string]string{}, map[string]string{}, 1, 1, ""},
		{"topology", map[string]string{"sockets": "2", "cores": "4"}, map[string]string{"sockets": "2", "cores": "4"}, map[string]string{}, 2, 4, ""},
		{"host model", map[string]string{"cpu": "cputype=host,flags=+aes"}, map[string]string{"cpu": "host,flags=+aes"}, map[string]string{}, 1, 1, kubevirtv1.CPUModeHostPassthrough},
		{"other model runs as the default", map[string]string{"cpu": "x86-64-v2-AES"}, map[string]string{"cpu": "x86-64-v2-AES"}, map[string]string{}, 1, 1, ""},
		{"bad cores", map[string]string{"cores": "1025"}, map[string]string{"cores": "1025"},
			map[string]string{"cores": "value may not exceed 1024"}, 1, 1, ""},
		{"bad sockets", map[string]string{"sockets": "0"}, map[string]string{"sockets": "0"},
			map[string]string{"sockets": "value must have a minimum value of 1"}, 1, 1, ""},
	}
	for _, tt := range tests {
		// The previous model and topology are replaced, not merged.
		d := &kubevirtv1.DomainSpec{CPU: &kubevirtv1.CPU{Sockets: 8, Cores: 8, Threads: 2, Model: "Haswell"}}
		errs := map[string]string{}
		applyCPU(d, tt.cfg, errs)
		checkKeys(t, tt.name, tt.cfg, tt.want, errs, tt.errs)
		if d.CPU.Sockets != tt.sockets || d.CPU.Cores != tt.cores || d.CPU.Threads != 1 || d.CPU.Model != tt.model {
			t.Errorf("%s: CPU %+v", tt.name, *d.CPU)
		}
	}
}

func TestApplyMemory(t *testing.T) {
	off := false
	tests := []struct {
		name      string
		cfg, want map[string]string
		errs      map[string]string
		guest     string
		balloon   *bool
		request   string // memory request, "" for none
	}{
		{"default 512 MiB", map[string]string{}, map[string]string{}, map[string]string{}, "512Mi", nil, ""},
		{"memory", map[string]string{"memory": "2048"}, map[string]string{"memory": "2048"}, map[string]string{}, "2Gi", nil, ""},
		{"PVE 8 current=", map[string]string{"memory": "current=1024"}, map[string]string{"memory": "1024"}, map[string]string{}, "1Gi", nil, ""},
		{"balloon off", map[string]string{"memory": "1024", "balloon": "0"}, map[string]string{"memory": "1024", "balloon": "0"}, map[string]string{}, "1Gi", &off, ""},
		{"balloon minimum is the request", map[string]string{"memory": "2048", "balloon": "1024"}, map[string]string{"memory": "2048", "balloon": "1024"}, map[string]string{}, "2Gi", nil, "1Gi"},
		{"balloon above memory", map[string]string{"memory": "1024", "balloon": "2048"}, map[string]string{"memory": "1024", "balloon": "2048"},
			map[string]string{"balloon": "balloon value too large (must be smaller than assigned memory)"}, "1Gi", nil, "2Gi"},
		{"bad memory", map[string]string{"memory": "lots"}, map[string]string{"memory": "lots"},
			map[string]string{"memory": "invalid format - current: type check ('integer') failed - got 'lots'"}, "512Mi", nil, ""},
		{"bad balloon", map[string]string{"balloon": "x"}, map[string]string{"balloon": "x"},
			map[string]string{"balloon": "type check ('integer') failed - got 'x'"}, "512Mi", nil, ""},
	}
	for _, tt := range tests {
		// A request and a balloon setting from before are cleared.
		on := true
		d := &kubevirtv1.DomainSpec{Resources: kubevirtv1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourceCPU: resource.MustParse("1")}}}
		d.Devices.AutoattachMemBalloon = &on
		errs := map[string]string{}
		applyMemory(d, tt.cfg, errs)
		checkKeys(t, tt.name, tt.cfg, tt.want, errs, tt.errs)
		if g := d.Memory.Guest; g == nil || g.Cmp(resource.MustParse(tt.guest)) != 0 {
			t.Errorf("%s: guest memory %v, want %s", tt.name, g, tt.guest)
		}
		if b := d.Devices.AutoattachMemBalloon; (b == nil) != (tt.balloon == nil) || (b != nil && *b != *tt.balloon) {
			t.Errorf("%s: autoattachMemBalloon %v", tt.name, b)
		}
		req, has := d.Resources.Requests[corev1.ResourceMemory]
		if has != (tt.request != "") || (has && req.Cmp(resource.MustParse(tt.request)) != 0) {
			t.Errorf("%s: memory request %v (set %v), want %q", tt.name, req.String(), has, tt.request)
		}
		if _, ok := d.Resources.Requests[corev1.ResourceCPU]; !ok {
			t.Errorf("%s: the CPU request was lost", tt.name)
		}
	}
}

func TestRunningMachine(t *testing.T) {
	tests := []struct {
		status, spec, want string
	}{
		{"pc-q35-rhel9.6.0", "q35", "pc-q35-9.0+pve0"}, // what KubeVirt's launcher boots
		{"pc-q35-rhel10.1.0", "", "pc-q35-9.0+pve0"},
		{"q35", "q35", "pc-q35-9.0+pve0"},
		{"", "q35", "pc-q35-9.0+pve0"}, // not booted yet
		{"", "", "pc-q35-9.0+pve0"},
		{"pc-q35-8.1", "q35", "pc-q35-8.1+pve0"},
		{"pc-q35-9.2+pve1", "q35", "pc-q35-9.2+pve1"},
		{"pc-i440fx-8.1", "", "pc-i440fx-8.1+pve0"},
		{"pc", "", "pc-i440fx-9.0+pve0"},
		{"pc-i440fx-rhel7.6.0", "", "pc-i440fx-9.0+pve0"},
	}
	for _, tt := range tests {
		vmi := &kubevirtv1.VirtualMachineInstance{}
		if tt.spec != "" {
			vmi.Spec.Domain.Machine = &kubevirtv1.Machine{Type: tt.spec}
		}
		if tt.status != "" {
			vmi.Status.Machine = &kubevirtv1.Machine{Type: tt.status}
		}
		if got := RunningMachine(vmi); got != tt.want {
			t.Errorf("status %q spec %q: %q, want %q", tt.status, tt.spec, got, tt.want)
		}
	}
	if got := RunningMachine(nil); got != "pc-q35-9.0+pve0" {
		t.Errorf("no instance: %q", got)
	}
}

func TestApplyMachine(t *testing.T) {
	tests := []struct {
		machine, want, stored, err string
	}{
		{"", "", "", ""},
		{"q35", "q35", "q35", ""},
		{"pc", "q35", "pc", ""},
		{"pc-i440fx-8.1", "q35", "pc-i440fx-8.1", ""},
		{"pc-i440fx-9.2+pve1", "q35", "pc-i440fx-9.2+pve1", ""},
		{"pc-q35-8.1+pve0", "q35", "pc-q35-8.1+pve0", ""},
		{"pc-q35-8.1", "q35", "pc-q35-8.1", ""},
		{"pc-q35-9.2+pve1", "q35", "pc-q35-9.2+pve1", ""},
		{"pc-q35-6.2.pxe", "q35", "pc-q35-6.2.pxe", ""},
		{"type=pc-q35-8.1,viommu=intel", "q35", "pc-q35-8.1,viommu=intel", ""},
		{"q35,viommu=virtio", "q35", "q35,viommu=virtio", ""},
		{"viommu=virtio", "q35", "viommu=virtio", ""}, // no type: PVE's default (pc)
		{"i440fx", "", "i440fx", "invalid format - machine type 'i440fx' does not match the regex pattern"},
		{"pc-q35-rhel9.6.0", "", "pc-q35-rhel9.6.0", "invalid format - machine type 'pc-q35-rhel9.6.0' does not match the regex pattern"},
		{"virt", "", "virt", "machine type 'virt' is for aarch64 guests; KubeVirt runs this VM on q35"},
	}
	for _, tt := range tests {
		for _, set := range []bool{true, false} {
			d := &kubevirtv1.DomainSpec{Machine: &kubevirtv1.Machine{Type: "old"}}
			cfg, errs := map[string]string{}, map[string]string{}
			if tt.machine != "" {
				cfg["machine"] = tt.machine
			}
			applyMachine(d, cfg, set, errs)
			got := ""
			if d.Machine != nil {
				got = d.Machine.Type
			}
			want, wantErr := tt.want, tt.err
			if !set && tt.err != "" {
				// A value stored before is not judged again by a call that
				// does not set it; it runs as q35.
				want, wantErr = "q35", ""
			}
			if got != want || cfg["machine"] != tt.stored || errs["machine"] != wantErr {
				t.Errorf("machine %q (set %v): type %q, stored %q, err %q; want %q, %q, %q", tt.machine, set, got, cfg["machine"], errs["machine"], want, tt.stored, wantErr)
			}
		}
	}
}

func TestEFIDisk(t *testing.T) {
	tests := []struct {
		v          string
		shown      string
		secureBoot bool
		err        string
	}{
		{"local-lvm:1", "local-lvm:vm-100-efidisk,size=4M", false, ""},
		{"local-lvm:1,efitype=4m,pre-enrolled-keys=1", "local-lvm:vm-100-efidisk,efitype=4m,pre-enrolled-keys=1,size=4M", true, ""},
		{"local-lvm:1,pre-enrolled-keys=yes", "local-lvm:vm-100-efidisk,pre-enrolled-keys=1,size=4M", true, ""},
		{"local-lvm:1,pre-enrolled-keys=off", "local-lvm:vm-100-efidisk,pre-enrolled-keys=0,size=4M", false, ""},
		{"local-lvm:vm-100-efidisk,size=4M", "local-lvm:vm-100-efidisk,size=4M", false, ""},
		{"local-lvm:1,pre-enrolled-keys=maybe", "", false, "invalid format - pre-enrolled-keys: type check ('boolean') failed - got 'maybe'"},
		{"efitype=4m", "", false, "invalid format - missing key in comma-separated list property: file"},
	}
	for _, tt := range tests {
		shown, sb, err := efiDisk(tt.v, 100)
		gotErr := ""
		if err != nil {
			gotErr = err.Error()
		}
		if shown != tt.shown || sb != tt.secureBoot || gotErr != tt.err {
			t.Errorf("efiDisk(%q) = %q, %v, %q; want %q, %v, %q", tt.v, shown, sb, gotErr, tt.shown, tt.secureBoot, tt.err)
		}
	}
}

func TestApplyFirmware(t *testing.T) {
	tests := []struct {
		name       string
		cfg, want  map[string]string
		errs       map[string]string
		efi        bool // an EFI bootloader
		persistent bool
		secureBoot bool
	}{
		{"seabios by default", map[string]string{}, map[string]string{}, map[string]string{}, false, false, false},
		{"seabios", map[string]string{"bios": "seabios"}, map[string]string{"bios": "seabios"}, map[string]string{}, false, false, false},
		{"ovmf without EFI disk", map[string]string{"bios": "ovmf"}, map[string]string{"bios": "ovmf"}, map[string]string{}, true, false, false},
		{"ovmf with EFI disk", map[string]string{"bios": "ovmf", "efidisk0": "local-lvm:1"},
			map[string]string{"bios": "ovmf", "efidisk0": "local-lvm:vm-100-efidisk,size=4M"}, map[string]string{}, true, true, false},
		{"secure boot", map[string]string{"bios": "ovmf", "efidisk0": "local-lvm:1,pre-enrolled-keys=1"},
			map[string]string{"bios": "ovmf", "efidisk0": "local-lvm:vm-100-efidisk,pre-enrolled-keys=1,size=4M"}, map[string]string{}, true, true, true},
		{"bad EFI disk", map[string]string{"bios": "ovmf", "efidisk0": "local-lvm:1,pre-enrolled-keys=2"},
			map[string]string{"bios": "ovmf", "efidisk0": "local-lvm:1,pre-enrolled-keys=2"},
			map[string]string{"efidisk0": "invalid format - pre-enrolled-keys: type check ('boolean') failed - got '2'"}, true, false, false},
		// PVE keeps an EFI disk of a SeaBIOS VM unused.
		{"EFI disk without ovmf", map[string]string{"efidisk0": "local-lvm:1,efitype=4m"}, map[string]string{"efidisk0": "local-lvm:vm-100-efidisk,efitype=4m,size=4M"},
			map[string]string{}, false, false, false},
		{"bad EFI disk without ovmf", map[string]string{"bios": "seabios", "efidisk0": "local-lvm:1,pre-enrolled-keys=x"},
			map[string]string{"bios": "seabios", "efidisk0": "local-lvm:1,pre-enrolled-keys=x"},
			map[string]string{"efidisk0": "invalid format - pre-enrolled-keys: type check ('boolean') failed - got 'x'"}, false, false, false},
		{"unknown bios", map[string]string{"bios": "uefi"}, map[string]string{"bios": "uefi"},
			map[string]string{"bios": "value 'uefi' does not have a value in the enumeration 'seabios, ovmf'"}, false, false, false},
	}
	for _, tt := range tests {
		// Secure Boot's SMM from before goes when Secure Boot does; the
		// firmware UUID, which no key owns, stays.
		on := true
		d := &kubevirtv1.DomainSpec{
			Firmware: &kubevirtv1.Firmware{UUID: "keep", Bootloader: &kubevirtv1.Bootloader{BIOS: &kubevirtv1.BIOS{}}},
			Features: &kubevirtv1.Features{SMM: &kubevirtv1.FeatureState{Enabled: &on}},
		}
		errs := map[string]string{}
		applyFirmware(d, 100, tt.cfg, errs)
		checkKeys(t, tt.name, tt.cfg, tt.want, errs, tt.errs)
		if d.Firmware.UUID != "keep" {
			t.Errorf("%s: firmware UUID lost", tt.name)
		}
		bl := d.Firmware.Bootloader
		if (bl != nil) != tt.efi || (bl != nil && bl.EFI == nil) {
			t.Errorf("%s: bootloader %+v", tt.name, bl)
			continue
		}
		if !tt.efi {
			if d.Features != nil {
				t.Errorf("%s: features %+v", tt.name, d.Features)
			}
			continue
		}
		efi := bl.EFI
		if (efi.Persistent != nil && *efi.Persistent) != tt.persistent || efi.SecureBoot == nil || *efi.SecureBoot != tt.secureBoot {
			t.Errorf("%s: EFI %+v", tt.name, efi)
		}
		if smm := d.Features != nil && d.Features.SMM != nil && *d.Features.SMM.Enabled; smm != tt.secureBoot {
			t.Errorf("%s: SMM %v, want %v", tt.name, smm, tt.secureBoot)
		}
	}
}

func TestApplyTPM(t *testing.T) {
	tests := []struct {
		name      string
		cfg, want map[string]string
		errs      map[string]string
		tpm       bool
	}{
		{"none", map[string]string{}, map[string]string{}, map[string]string{}, false},
		{"default version", map[string]string{"tpmstate0": "local-lvm:1"},
			map[string]string{"tpmstate0": "local-lvm:vm-100-tpmstate,version=v2.0,size=4M"}, map[string]string{}, true},
		{"version kept", map[string]string{"tpmstate0": "local-lvm:1,version=v1.2"},
			map[string]string{"tpmstate0": "local-lvm:vm-100-tpmstate,version=v1.2,size=4M"}, map[string]string{}, true},
		{"bad value", map[string]string{"tpmstate0": "version=v2.0"}, map[string]string{"tpmstate0": "version=v2.0"},
			map[string]string{"tpmstate0": "invalid format - missing key in comma-separated list property: file"}, false},
	}
	for _, tt := range tests {
		d := &kubevirtv1.DomainSpec{}
		d.Devices.TPM = &kubevirtv1.TPMDevice{} // from before: replaced
		errs := map[string]string{}
		applyTPM(d, 100, tt.cfg, errs)
		checkKeys(t, tt.name, tt.cfg, tt.want, errs, tt.errs)
		tpm := d.Devices.TPM
		if (tpm != nil) != tt.tpm || (tpm != nil && (tpm.Persistent == nil || !*tpm.Persistent)) {
			t.Errorf("%s: TPM %+v", tt.name, tpm)
		}
	}
}

func TestApplyName(t *testing.T) {
	long64 := "a-" + strings.Repeat("0123456789", 6) + "12"
	tests := []struct {
		name, hostname, annotation, err string
	}{
		{"", "", "", ""},
		{"web", "web", "web", ""},
		{"Web-01", "web-01", "Web-01", ""},
		{"web.lab.example", "", "web.lab.example", ""},
		// A DNS name, but longer than a label: no hostname.
		{long64, "", long64, ""},
		{"bad_name", "", "bad_name", "invalid format - value does not look like a valid DNS name"},
		{"-web", "", "-web", "invalid format - value does not look like a valid DNS name"},
	}
	for _, tt := range tests {
		vm := &kubevirtv1.VirtualMachine{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationName: "old"}},
			Spec: kubevirtv1.VirtualMachineSpec{Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
				Spec: kubevirtv1.VirtualMachineInstanceSpec{Hostname: "old"}}},
		}
		cfg, errs := map[string]string{}, map[string]string{}
		if tt.name != "" {
			cfg["name"] = tt.name
		}
		applyName(vm, cfg, errs)
		a, has := vm.Annotations[AnnotationName]
		if vm.Spec.Template.Spec.Hostname != tt.hostname || a != tt.annotation || has != (tt.name != "") || errs["name"] != tt.err {
			t.Errorf("name %q: hostname %q, annotation %q (%v), err %q", tt.name, vm.Spec.Template.Spec.Hostname, a, has, errs["name"])
		}
	}
}

func TestCheckCloudInit(t *testing.T) {
	tests := []struct {
		name      string
		cfg, want map[string]string
		errs      map[string]string
	}{
		{"ipconfig normalised", map[string]string{"ipconfig0": "ip=10.0.0.2/24,gw=10.0.0.1", "ipconfig1": "ip=dhcp"},
			map[string]string{"ipconfig0": "gw=10.0.0.1,ip=10.0.0.2/24", "ipconfig1": "ip=dhcp"}, map[string]string{}},
		{"citype", map[string]string{"citype": "configdrive2"}, map[string]string{"citype": "configdrive2"}, map[string]string{}},
		{"citype PVE has but KubeVirt not", map[string]string{"citype": "opennebula"}, map[string]string{"citype": "opennebula"},
			map[string]string{"citype": "value 'opennebula' does not have a value in the enumeration 'configdrive2, nocloud, opennebula'"}},
	}
	for _, tt := range tests {
		errs := map[string]string{}
		checkCloudInit(tt.cfg, errs)
		checkKeys(t, tt.name, tt.cfg, tt.want, errs, tt.errs)
	}
	// Errors in the parsers' own words: only their keys are checked.
	cfg := map[string]string{"ipconfig0": "bogus=1", "sshkeys": "%zz"}
	errs := map[string]string{}
	checkCloudInit(cfg, errs)
	if errs["ipconfig0"] == "" || errs["sshkeys"] == "" || len(errs) != 2 {
		t.Errorf("bad cloud-init keys: %v", errs)
	}
}

func TestBootOrder(t *testing.T) {
	tests := []struct {
		boot string
		want map[string]uint
	}{
		{"", map[string]uint{}},
		{"order=scsi0;net0", map[string]uint{"scsi0": 1, "net0": 2}},
		{"order= ide2 ;;virtio0", map[string]uint{"ide2": 1, "virtio0": 3}},
		{"cdn", map[string]uint{}},
	}
	for _, tt := range tests {
		if got := bootOrder(map[string]string{"boot": tt.boot}); !maps.Equal(got, tt.want) {
			t.Errorf("bootOrder(%q) = %v, want %v", tt.boot, got, tt.want)
		}
	}
}

func TestStoreConfig(t *testing.T) {
	tests := []struct {
		name     string
		template bool
		cfg      map[string]string
		want     map[string]string
	}{
		{"template follows the label", true, map[string]string{"cores": "2"}, map[string]string{"cores": "2", "template": "1"}},
		{"template=1 without the label is dropped", false, map[string]string{"template": "1"}, map[string]string{}},
		{"password masked", false, map[string]string{"cipassword": "s3cret"}, map[string]string{"cipassword": MaskedPassword}},
		{"empty password kept empty", false, map[string]string{"cipassword": ""}, map[string]string{"cipassword": ""}},
	}
	for _, tt := range tests {
		vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}, Labels: map[string]string{}}}
		if tt.template {
			vm.Labels[LabelTemplate] = "true"
		}
		storeConfig(vm, tt.cfg)
		if got := StoredConfig(vm); !maps.Equal(got, tt.want) {
			t.Errorf("%s: stored %v, want %v", tt.name, got, tt.want)
		}
	}
}
