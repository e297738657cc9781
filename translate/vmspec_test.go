package translate

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

func buildOK(t *testing.T, cfg map[string]string) *kubevirtv1.VirtualMachine {
	t.Helper()
	vm, errs := BuildVM(VMRequest{VMID: 100, Node: "pve1", Namespace: "default", Config: cfg,
		StorageExists: func(s string) bool { return s == "local-lvm" }})
	if len(errs) > 0 {
		t.Fatalf("BuildVM(%v) errors: %v", cfg, errs)
	}
	return vm
}

func TestBuildVMBasics(t *testing.T) {
	vm := buildOK(t, map[string]string{"name": "web-1", "cores": "2", "sockets": "2", "memory": "2048", "ostype": "l26", "tags": "b;a,A", "onboot": "yes", "tdf": "true", "ciupgrade": "1"})
	if vm.Name != "web-1" || vm.Namespace != "default" {
		t.Fatalf("name = %s/%s", vm.Namespace, vm.Name)
	}
	if vm.Labels[LabelVMID] != "100" || vm.Annotations[AnnotationNode] != "pve1" || vm.Annotations[AnnotationName] != "web-1" {
		t.Fatalf("labels %v annotations %v", vm.Labels, vm.Annotations)
	}
	if rs, _ := vm.RunStrategy(); rs != kubevirtv1.RunStrategyManual {
		t.Fatalf("run strategy %s, want Manual (a guest shutdown must leave the VM stopped)", rs)
	}
	cpu := vm.Spec.Template.Spec.Domain.CPU
	if cpu.Sockets != 2 || cpu.Cores != 2 || cpu.Threads != 1 {
		t.Fatalf("cpu %+v", cpu)
	}
	if got := vm.Spec.Template.Spec.Domain.Memory.Guest.Value(); got != 2048<<20 {
		t.Fatalf("memory %d", got)
	}
	if a := vm.Spec.Template.Spec.Domain.Devices.AutoattachPodInterface; a == nil || *a {
		t.Fatal("a VM without netN must not get KubeVirt's default NIC")
	}
	cfg := StoredConfig(vm)
	if cfg["tags"] != "a;b" || cfg["onboot"] != "1" || cfg["ostype"] != "l26" {
		t.Fatalf("stored config %v", cfg)
	}
	view := ConfigView(vm, nil)
	if view["memory"] != "2048" {
		t.Fatalf("memory must be a string in config, got %#v", view["memory"])
	}
	if view["cores"] != int64(2) || view["onboot"] != int64(1) {
		t.Fatalf("cores/onboot must be numbers, got %#v %#v", view["cores"], view["onboot"])
	}
	// bpg reads ciupgrade as a CustomBool, which takes the string "1" as false.
	if view["tdf"] != int64(1) || view["ciupgrade"] != int64(1) {
		t.Fatalf("tdf/ciupgrade must be numbers, got %#v %#v", view["tdf"], view["ciupgrade"])
	}
	if d, _ := view["digest"].(string); len(d) != 40 {
		t.Fatalf("digest %q", view["digest"])
	}
}

func TestBuildVMNetAndDisk(t *testing.T) {
	vm := buildOK(t, map[string]string{
		"net0":  "virtio,bridge=vmbr0,firewall=1",
		"net1":  "model=e1000,bridge=lab-net",
		"scsi0": "local-lvm:32,iothread=1,discard=on",
		"ide2":  "none,media=cdrom",
		"boot":  "order=scsi0;net0",
	})
	spec := vm.Spec.Template.Spec
	if len(spec.Domain.Devices.Interfaces) != 2 || len(spec.Networks) != 2 {
		t.Fatalf("interfaces %+v networks %+v", spec.Domain.Devices.Interfaces, spec.Networks)
	}
	n0 := spec.Domain.Devices.Interfaces[0]
	if n0.Name != "net0" || n0.Masquerade == nil || spec.Networks[0].Pod == nil || !strings.HasPrefix(n0.MacAddress, "BC:24:11:") {
		t.Fatalf("net0 %+v", n0)
	}
	if n0.BootOrder == nil || *n0.BootOrder != 2 {
		t.Fatalf("net0 boot order %v", n0.BootOrder)
	}
	if spec.Networks[1].Multus == nil || spec.Networks[1].Multus.NetworkName != "lab-net" || spec.Domain.Devices.Interfaces[1].Bridge == nil {
		t.Fatalf("net1 %+v", spec.Networks[1])
	}
	cfg := StoredConfig(vm)
	if want := "virtio=" + n0.MacAddress + ",bridge=vmbr0,firewall=1"; cfg["net0"] != want {
		t.Fatalf("net0 config %q want %q", cfg["net0"], want)
	}
	if cfg["scsi0"] != "local-lvm:vm-100-disk-0,iothread=1,discard=on,size=32G" {
		t.Fatalf("scsi0 config %q", cfg["scsi0"])
	}
	if cfg["ide2"] != "none,media=cdrom" {
		t.Fatalf("ide2 %q", cfg["ide2"])
	}
	if len(vm.Spec.DataVolumeTemplates) != 1 {
		t.Fatalf("dv templates %d", len(vm.Spec.DataVolumeTemplates))
	}
	dv := vm.Spec.DataVolumeTemplates[0]
	if dv.Name != "vm-100-disk-0" || *dv.Spec.Storage.StorageClassName != "local-lvm" {
		t.Fatalf("dv %+v", dv)
	}
	if q := dv.Spec.Storage.Resources.Requests[corev1.ResourceStorage]; q.Value() != 32<<30 {
		t.Fatalf("dv size %s", q.String())
	}
	d := spec.Domain.Devices.Disks[0]
	if d.Name != "scsi0" || d.Disk.Bus != kubevirtv1.DiskBusSCSI || d.BootOrder == nil || *d.BootOrder != 1 {
		t.Fatalf("disk %+v", d)
	}
	// iothread=1 stays in the config (above) but a SCSI disk gets no I/O
	// thread: KubeVirt's webhook refuses one on any bus but virtio.
	if d.DedicatedIOThread != nil {
		t.Fatalf("scsi0 got a dedicated I/O thread: %+v", d)
	}
	if spec.Volumes[0].DataVolume == nil || spec.Volumes[0].DataVolume.Name != "vm-100-disk-0" {
		t.Fatalf("volume %+v", spec.Volumes[0])
	}
	// The same request builds the same MAC: retries must not churn it.
	again := buildOK(t, map[string]string{"net0": "virtio,bridge=vmbr0,firewall=1"})
	if again.Spec.Template.Spec.Domain.Devices.Interfaces[0].MacAddress != n0.MacAddress {
		t.Fatal("MAC is not deterministic for the same vmid and key")
	}
}

func TestBuildVMErrors(t *testing.T) {
	cases := []struct {
		cfg   map[string]string
		param string
		want  string
	}{
		{map[string]string{"bogus": "1"}, "bogus", "property is not defined in schema"},
		{map[string]string{"cores": "two"}, "cores", "type check ('integer') failed - got 'two'"},
		{map[string]string{"cores": "0"}, "cores", "minimum value of 1"},
		{map[string]string{"memory": "lots"}, "memory", ""},
		{map[string]string{"name": "bad name!"}, "name", "valid DNS name"},
		{map[string]string{"net0": "vmxnet3,bridge=vmbr0"}, "net0", "no KubeVirt equivalent"},
		{map[string]string{"net0": "virtio,bridge=vmbr0", "net1": "virtio,bridge=vmbr0"}, "net1", "only one NIC"},
		{map[string]string{"net0": "virtio,macaddr=zz"}, "net0", ""},
		{map[string]string{"scsi0": "nowhere:10"}, "scsi0", "storage 'nowhere' does not exist"},
		{map[string]string{"scsi0": "local-lvm:vm-1-disk-0"}, "scsi0", "does not exist"},
		{map[string]string{"scsi0": "local-lvm:foo/bar.qcow2"}, "scsi0", "unable to parse volume"},
		{map[string]string{"ide2": "local:iso/missing.iso,media=cdrom"}, "ide2", "does not exist"},
		{map[string]string{"ide2": "doesnotexist:cloudinit"}, "ide2", "storage 'doesnotexist' does not exist"},
		{map[string]string{"ipconfig0": "ip=10.0.0.300/24"}, "ipconfig0", "IPv4"},
		{map[string]string{"ipconfig0": "gw=10.0.0.1,bogus=1"}, "ipconfig0", "bogus"},
		{map[string]string{"scsi0": "local-lvm:0"}, "scsi0", "greater than zero"},
		{map[string]string{"onboot": "maybe"}, "onboot", "type check ('boolean')"},
		{map[string]string{"bios": "coreboot"}, "bios", "enumeration"},
		{map[string]string{"tags": "bad tag!"}, "tags", ""},
	}
	for _, c := range cases {
		vm, errs := BuildVM(VMRequest{VMID: 100, Node: "pve1", Namespace: "default", Config: c.cfg,
			StorageExists: func(s string) bool { return s == "local-lvm" }})
		if vm != nil {
			t.Errorf("%v: got a VM despite errors", c.cfg)
		}
		msg, ok := errs[c.param]
		if !ok {
			t.Errorf("%v: no error for %s (errors %v)", c.cfg, c.param, errs)
			continue
		}
		if !strings.Contains(msg, c.want) {
			t.Errorf("%v: error %q does not contain %q", c.cfg, msg, c.want)
		}
	}
}

func TestBuildVMNameCollision(t *testing.T) {
	taken := map[string]bool{"web": true, "web-100": true}
	vm, errs := BuildVM(VMRequest{VMID: 100, Node: "n", Namespace: "ns", Config: map[string]string{"name": "web"},
		NameTaken: func(n string) bool { return taken[n] }})
	if len(errs) > 0 || vm.Name != "pve-100" {
		t.Fatalf("name %v errs %v", vm, errs)
	}
	if vm.Annotations[AnnotationName] != "web" {
		t.Fatal("the PVE name must be kept when the object name differs")
	}
}

func TestBuildVMTemplate(t *testing.T) {
	vm := buildOK(t, map[string]string{"template": "1"})
	if vm.Labels[LabelTemplate] != "true" {
		t.Fatal("template label missing")
	}
	if rs, _ := vm.RunStrategy(); rs != kubevirtv1.RunStrategyHalted {
		t.Fatalf("template run strategy %s", rs)
	}
	plain := buildOK(t, map[string]string{"template": "0"})
	if _, ok := StoredConfig(plain)["template"]; ok {
		t.Fatal("template=0 must not be stored (PVE omits it)")
	}
}

// A VM made without a name has no name in its config, as in PVE (bpg
// plans to remove a name it never set otherwise), though its object is
// called vm-<vmid>.
func TestConfigViewWithoutName(t *testing.T) {
	for _, cfg := range []map[string]string{{}, {"cores": "2"}} {
		vm := buildOK(t, cfg)
		if vm.Name != "vm-100" {
			t.Fatalf("object name %s", vm.Name)
		}
		if v := ConfigView(vm, nil); v["name"] != nil {
			t.Errorf("config %v shows name %v", cfg, v["name"])
		}
	}
}

// TestConfigViewOfEmptyConfig: a VM made with nothing but a vmid shows no
// CPU or memory keys (bpg's proxmox_vm finds a cpu block it never set
// otherwise), while one made outside the API shows what it has.
func TestConfigViewOfEmptyConfig(t *testing.T) {
	v := ConfigView(buildOK(t, map[string]string{}), nil)
	for _, k := range []string{"name", "cores", "sockets", "memory"} {
		if x, ok := v[k]; ok {
			t.Errorf("config of a VM made with a vmid only shows %s: %v", k, x)
		}
	}
}

// TestConfigViewQemuServerForms: values read back as qemu-server reads
// its config file, where bpg compares them with what it sent.
func TestConfigViewQemuServerForms(t *testing.T) {
	for _, c := range []struct {
		key, set string
		want     any // nil: the key is absent
	}{
		{"description", "my\ndescription\nvalue\n", "my\ndescription\nvalue"},
		{"description", "  indented\n\nlast line  \t\n", "  indented\n\nlast line"},
		{"description", "one line", "one line"},
		{"description", "", nil},
		{"description", "0", nil},
		{"description", " \n", ""},
		{"ide2", "file=none,media=cdrom", "none,media=cdrom"},
		{"ide3", "file=cdrom,media=cdrom", "cdrom,media=cdrom"},
		{"sata1", "none,media=cdrom", "none,media=cdrom"},
	} {
		v := ConfigView(buildOK(t, map[string]string{c.key: c.set}), nil)
		if got, ok := v[c.key]; (c.want == nil && ok) || (c.want != nil && got != c.want) {
			t.Errorf("%s=%q reads back as %#v, want %#v", c.key, c.set, got, c.want)
		}
	}
}

func TestConfigViewPreexisting(t *testing.T) {
	// A VM made with kubectl: no stored config at all.
	vm := &kubevirtv1.VirtualMachine{}
	vm.Name = "legacy"
	vm.Spec.Template = &kubevirtv1.VirtualMachineInstanceTemplateSpec{}
	vm.Spec.Template.Spec.Domain.CPU = &kubevirtv1.CPU{Cores: 4}
	vm.Spec.Template.Spec.Domain.Devices.Interfaces = []kubevirtv1.Interface{{Name: "net0", Model: "virtio", MacAddress: "02:00:00:aa:bb:cc"}}
	v := ConfigView(vm, nil)
	if v["name"] != "legacy" || v["cores"] != int64(4) || v["sockets"] != int64(1) {
		t.Fatalf("view %v", v)
	}
	if v["net0"] != "virtio=02:00:00:AA:BB:CC,bridge=vmbr0" {
		t.Fatalf("net0 %v", v["net0"])
	}
	// Every KubeVirt domain has the guest agent's channel.
	if v["agent"] != "1" || AgentConfig(vm) != "1" {
		t.Fatalf("agent %v", v["agent"])
	}
}

// TestAgentConfig: a VM made through the API has the agent it was made
// with, as in PVE; one made outside it has KubeVirt's, always there.
func TestAgentConfig(t *testing.T) {
	for _, c := range []struct {
		cfg  map[string]string
		want string
	}{
		{map[string]string{}, ""},
		{map[string]string{"agent": "1"}, "1"},
		{map[string]string{"agent": "0"}, "0"},
	} {
		vm := buildOK(t, c.cfg)
		if got := AgentConfig(vm); got != c.want {
			t.Errorf("%v: agent %q, want %q", c.cfg, got, c.want)
		}
		if v, ok := ConfigView(vm, nil)["agent"]; (c.want == "") == ok || (ok && v != c.want) {
			t.Errorf("%v: view shows agent %v", c.cfg, v)
		}
	}
}

func TestPendingView(t *testing.T) {
	vm := buildOK(t, map[string]string{"cores": "3"})
	rows := PendingView(vm, nil, nil)
	found := false
	for _, r := range rows {
		if r.Key == "digest" {
			t.Fatal("digest must not be a pending row")
		}
		if r.Key == "cores" && r.Value == int64(3) && r.Pending == nil {
			found = true
		}
	}
	if !found {
		t.Fatalf("rows %+v", rows)
	}
}

func TestPendingRestartRequired(t *testing.T) {
	vm := buildOK(t, map[string]string{"cores": "2", "memory": "2048", "net0": "virtio,bridge=vmbr0"})
	vmi := &kubevirtv1.VirtualMachineInstance{Spec: *vm.Spec.Template.Spec.DeepCopy()}
	vmi.Status.Phase = kubevirtv1.Running
	up, errs := UpdateVM(vm, VMRequest{VMID: 100, Namespace: "default", StorageExists: storageOK,
		Config: map[string]string{"cores": "4", "net1": "e1000,bridge=lab"}}, []string{"net0"})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	rows := map[string]PendingEntry{}
	for _, r := range PendingView(up, vmi, nil) {
		rows[r.Key] = r
	}
	if r := rows["cores"]; r.Value != int64(2) || r.Pending != int64(4) {
		t.Fatalf("cores %+v", r)
	}
	if r := rows["memory"]; r.Pending != nil {
		t.Fatalf("unchanged memory must not be pending: %+v", r)
	}
	if r := rows["net1"]; r.Value != nil || r.Pending == nil {
		t.Fatalf("added NIC %+v", r)
	}
	if r := rows["net0"]; r.Delete != 1 {
		t.Fatalf("removed NIC %+v", r)
	}
}

func FuzzBuildVM(f *testing.F) {
	f.Add("net0", "virtio,bridge=vmbr0")
	f.Add("scsi0", "local-lvm:32,iothread=1")
	f.Add("memory", "current=1024")
	f.Add("ide2", "local:iso/x.iso,media=cdrom")
	f.Fuzz(func(t *testing.T, key, value string) {
		vm, errs := BuildVM(VMRequest{VMID: 100, Node: "n", Namespace: "ns", Config: map[string]string{key: value},
			StorageExists: func(s string) bool { return s == "local-lvm" }})
		if (vm == nil) == (len(errs) == 0) {
			t.Fatalf("exactly one of VM and errors must be set: vm=%v errs=%v", vm != nil, errs)
		}
		if vm != nil {
			_ = ConfigView(vm, nil)
		}
	})
}

// runningFrom is the instance KubeVirt starts from vm, as its defaults
// leave it: the status has the CPUs and memory of the spec.
func runningFrom(vm *kubevirtv1.VirtualMachine) *kubevirtv1.VirtualMachineInstance {
	vmi := &kubevirtv1.VirtualMachineInstance{Spec: *vm.Spec.Template.Spec.DeepCopy()}
	vmi.Status.Phase = kubevirtv1.Running
	cpu := vmi.Spec.Domain.CPU
	vmi.Status.CurrentCPUTopology = &kubevirtv1.CPUTopology{Sockets: cpu.Sockets, Cores: cpu.Cores, Threads: cpu.Threads}
	g := vmi.Spec.Domain.Memory.Guest.DeepCopy()
	vmi.Status.Memory = &kubevirtv1.MemoryStatus{GuestAtBoot: &g, GuestCurrent: &g, GuestRequested: &g}
	return vmi
}

func pendingRows(vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) map[string]PendingEntry {
	rows := map[string]PendingEntry{}
	for _, r := range PendingView(vm, vmi, nil) {
		rows[r.Key] = r
	}
	return rows
}

// Under LiveUpdate, virt-controller patches new sockets and guest memory
// into the instance's spec at once; the guest has them only once
// virt-handler has hot-plugged them (status), which may never happen
// before a restart.
func TestPendingHotplug(t *testing.T) {
	vm := buildOK(t, map[string]string{"sockets": "1", "memory": "1024"})
	vmi := runningFrom(vm)
	up, errs := UpdateVM(vm, VMRequest{VMID: 100, Namespace: "default", StorageExists: storageOK,
		Config: map[string]string{"sockets": "2", "memory": "2048"}}, nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	vmi.Spec.Domain.CPU.Sockets = 2
	vmi.Spec.Domain.Memory.Guest = up.Spec.Template.Spec.Domain.Memory.Guest
	rows := pendingRows(up, vmi)
	if r := rows["sockets"]; fmt.Sprint(r.Value) != "1" || fmt.Sprint(r.Pending) != "2" {
		t.Errorf("sockets not hot-plugged yet: %+v", r)
	}
	if r := rows["memory"]; fmt.Sprint(r.Value) != "1024" || fmt.Sprint(r.Pending) != "2048" {
		t.Errorf("memory not hot-plugged yet: %+v", r)
	}
	// virt-handler on the migration target: the guest has them.
	vmi.Status.CurrentCPUTopology.Sockets = 2
	g := up.Spec.Template.Spec.Domain.Memory.Guest.DeepCopy()
	vmi.Status.Memory.GuestCurrent, vmi.Status.Memory.GuestRequested = &g, &g
	rows = pendingRows(up, vmi)
	if r := rows["sockets"]; fmt.Sprint(r.Value) != "2" || r.Pending != nil {
		t.Errorf("sockets hot-plugged: %+v", r)
	}
	if r := rows["memory"]; fmt.Sprint(r.Value) != "2048" || r.Pending != nil {
		t.Errorf("memory hot-plugged: %+v", r)
	}
}

// Keys KubeVirt applies only at restart show as pending while the VM has
// RestartRequired.
func TestPendingRestartOnlyKeys(t *testing.T) {
	vm := buildOK(t, map[string]string{"cores": "1"})
	vmi := runningFrom(vm)
	up, errs := UpdateVM(vm, VMRequest{VMID: 100, Namespace: "default", StorageExists: storageOK,
		Config: map[string]string{"cpu": "host", "bios": "ovmf"}}, nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if r := pendingRows(up, vmi)["cpu"]; r.Pending != nil {
		t.Errorf("without RestartRequired: %+v", r)
	}
	up.Status.Conditions = append(up.Status.Conditions, kubevirtv1.VirtualMachineCondition{
		Type: kubevirtv1.VirtualMachineRestartRequired, Status: corev1.ConditionTrue})
	rows := pendingRows(up, vmi)
	if r := rows["cpu"]; r.Value != nil || r.Pending != "host" {
		t.Errorf("cpu: %+v", r)
	}
	if r := rows["bios"]; r.Value != nil || r.Pending != "ovmf" {
		t.Errorf("bios: %+v", r)
	}
	if r := rows["cores"]; r.Pending != nil {
		t.Errorf("unchanged cores: %+v", r)
	}
}
