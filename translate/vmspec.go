package translate

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// VMRequest is a PVE create or config call to map onto a VirtualMachine.
type VMRequest struct {
	VMID      int
	Node      string // PVE node, kept as the VM's stable home node
	Namespace string
	// Config holds every PVE config key sent, as strings.
	Config map[string]string
	// NameTaken reports Kubernetes VM names already used in Namespace.
	NameTaken func(name string) bool
	// StorageExists reports whether a PVE storage (StorageClass) exists.
	StorageExists func(name string) bool
	// ISOSize reports the size of the PVC holding an ISO image, by the
	// claim name ISOClaimName gives; ok is false when there is none.
	ISOSize func(claim string) (bytes int64, ok bool)
	// Claim describes the claims of Namespace: the storage and size of
	// disks not made through this API, the source of import-from. nil
	// knows none (and checks no import source).
	Claim ClaimLookup
	// VolumeTaken reports whether a claim name is in use in Namespace (a
	// PVC, a DataVolume, or a volume or DataVolume template of any VM), so
	// that a new disk never gets the name of existing data. An error
	// refuses the disk: the name cannot be known to be free.
	VolumeTaken func(name string) (bool, error)
	// Force is PVE's force=1 on a config update or unlink: a disk deleted
	// from the config loses its volume instead of becoming unusedN.
	Force bool
}

// msgNotInSchema is PVE's text for an unknown parameter.
const msgNotInSchema = "property is not defined in schema and the schema does not allow additional properties"

// intKeys are PVE config keys of integer or boolean type: the API returns
// them as JSON numbers (qemu-server check_type), everything else as strings.
var intKeys = map[string]bool{
	"balloon": true, "cores": true, "cpuunits": true, "shares": true, "sockets": true, "vcpus": true, "migrate_speed": true,
	// booleans
	"acpi": true, "autostart": true, "freeze": true, "kvm": true, "localtime": true, "numa": true,
	"onboot": true, "protection": true, "reboot": true, "tablet": true, "template": true, "keephugepages": true,
	"ciupgrade": true, "tdf": true,
}

// boolKeys are the boolean config keys, normalised to 0/1.
var boolKeys = []string{"acpi", "autostart", "ciupgrade", "freeze", "kvm", "localtime", "numa", "onboot", "protection", "reboot", "tablet", "tdf", "template", "keephugepages"}

var dnsNameRE = regexp.MustCompile(`^(?i)[a-z0-9]([a-z0-9\-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9\-]*[a-z0-9])?)*$`)

// newDiskRE is qemu-server's NEW_DISK_RE: "[storage:]size-in-GiB".
var newDiskRE = regexp.MustCompile(`^(([^/:\s]+):)?(\d+(\.\d+)?)$`)

var (
	diskKeyRE = regexp.MustCompile(`^(scsi|virtio|sata|ide)(\d+)$`)
	netKeyRE  = regexp.MustCompile(`^net(\d+)$`)
	// ownVolRE matches volumes this mapping created: vm-<vmid>-disk-<n>.
	ownVolRE = regexp.MustCompile(`^([^/:\s]+):(vm-(\d+)-disk-(\d+))$`)
	isoRE    = regexp.MustCompile(`^([^/:\s]+):iso/([^/\s]+)$`)
	ciVolRE  = regexp.MustCompile(`^([^/:\s]+):(cloudinit|vm-\d+-cloudinit)$`)
)

// supportedNICModels are PVE NIC models KubeVirt also has.
var supportedNICModels = map[string]bool{"virtio": true, "e1000": true, "e1000e": true, "rtl8139": true, "pcnet": true, "ne2k_pci": true, "igb": true}

// k8sBadRE matches what a DNS-1123 label does not allow.
var k8sBadRE = regexp.MustCompile(`[^a-z0-9-]+`)

// DefaultBridge is the PVE bridge that stands for the pod network.
const DefaultBridge = "vmbr0"

// KubeName derives a VM object name from a PVE name.
func KubeName(pveName string, vmid int) string {
	n := k8sBadRE.ReplaceAllString(strings.ToLower(pveName), "-")
	n = strings.Trim(n, "-")
	if len(n) > 50 {
		n = strings.TrimRight(n[:50], "-")
	}
	if n == "" {
		n = "vm-" + strconv.Itoa(vmid)
	}
	return n
}

// ISOClaimName is the PVC that holds the ISO image a PVE volume id like
// "local:iso/debian-12.iso" names: the file name made a DNS label, in the
// VM's namespace (PVE ISO storages are shared; here each namespace keeps
// the images its VMs use).
func ISOClaimName(file string) string {
	n := k8sBadRE.ReplaceAllString(strings.ToLower(file), "-")
	n = strings.Trim(n, "-")
	if len(n) > 63 {
		n = strings.TrimRight(n[:63], "-")
	}
	return n
}

// CloudInitSecretName is the Secret holding a VM's cloud-init data.
func CloudInitSecretName(vmid int) string { return fmt.Sprintf("vm-%d-cloudinit", vmid) }

// BuildVM maps a PVE create call onto a new KubeVirt VirtualMachine. Errors
// are per parameter, in PVE's words; when any is returned the VM is nil and
// nothing must be written.
func BuildVM(req VMRequest) (*kubevirtv1.VirtualMachine, map[string]string) {
	errs := map[string]string{}
	cfg := map[string]string{}
	for k, v := range req.Config {
		if !ValidConfigKey(k) {
			errs[k] = msgNotInSchema
			continue
		}
		cfg[k] = v
	}
	name := cfg["name"]
	kname := KubeName(name, req.VMID)
	if req.NameTaken != nil && req.NameTaken(kname) {
		kname = KubeName(kname+"-"+strconv.Itoa(req.VMID), req.VMID)
		if req.NameTaken(kname) {
			kname = "pve-" + strconv.Itoa(req.VMID)
		}
	}
	rs := kubevirtv1.RunStrategyManual
	vm := &kubevirtv1.VirtualMachine{
		TypeMeta: metav1.TypeMeta{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine"},
		ObjectMeta: metav1.ObjectMeta{
			Name: kname, Namespace: req.Namespace,
			Labels:      map[string]string{LabelVMID: strconv.Itoa(req.VMID)},
			Annotations: map[string]string{AnnotationNode: req.Node},
		},
		Spec: kubevirtv1.VirtualMachineSpec{
			RunStrategy: &rs,
			Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{LabelVMID: strconv.Itoa(req.VMID)}},
			},
		},
	}
	switch strings.ToLower(cfg["template"]) {
	case "1", "yes", "on", "true":
		vm.Labels[LabelTemplate] = "true"
		halted := kubevirtv1.RunStrategyHalted
		vm.Spec.RunStrategy = &halted
	}
	applyConfig(vm, req, cfg, errs)
	if len(errs) > 0 {
		return nil, errs
	}
	return vm, nil
}

// UpdateVM applies a PVE config change (new values, keys to delete) to a
// copy of vm. Errors are per parameter; on any error the VM is nil.
func UpdateVM(vm *kubevirtv1.VirtualMachine, req VMRequest, deletes []string) (*kubevirtv1.VirtualMachine, map[string]string) {
	u, errs := UpdateVMChange(vm, req, deletes)
	return u.VM, errs
}

// VMUpdate is the outcome of a config change.
type VMUpdate struct {
	VM *kubevirtv1.VirtualMachine
	// Destroy lists the claims the change removes for good, as PVE frees
	// the volume of a deleted unusedN or of a disk deleted with force=1:
	// the caller deletes their DataVolume or PVC once the VM is written.
	// Each is a DataVolume template or a claim a disk of the VM used; the
	// VM no longer refers to any of them.
	Destroy []string
}

// UpdateVMChange is UpdateVM that also tells which volumes to delete.
func UpdateVMChange(vm *kubevirtv1.VirtualMachine, req VMRequest, deletes []string) (VMUpdate, map[string]string) {
	errs := map[string]string{}
	cfg, sds := configStrings(vm, req.Claim)
	chg := &diskChange{destroy: map[string]bool{}}
	claimOfKey := map[string]string{}
	for _, s := range sds {
		if s.disk.CDRom == nil {
			if n, _ := claimOfVolume(s.vol); n != "" {
				claimOfKey[s.key] = n
			}
		}
	}
	for _, k := range deletes {
		if !ValidConfigKey(k) {
			errs["delete"] = fmt.Sprintf("invalid format - unknown configuration key '%s'", k)
			continue
		}
		if _, ok := req.Config[k]; ok {
			errs["delete"] = fmt.Sprintf("cannot set and delete '%s' at the same time", k)
			continue
		}
		switch {
		case strings.HasPrefix(k, "unused"):
			// Deleting unusedN frees its volume, force or not (PVE).
			if v, ok := cfg[k]; ok {
				if n := unusedVolume(v); n != "" {
					chg.destroy[n] = true
				}
			}
		case req.Force && diskKeyRE.MatchString(k):
			if n := claimOfKey[k]; n != "" {
				chg.destroy[n] = true
			}
		}
		delete(cfg, k)
	}
	for k, v := range req.Config {
		if !ValidConfigKey(k) {
			errs[k] = msgNotInSchema
			continue
		}
		cfg[k] = v
	}
	if len(errs) > 0 {
		return VMUpdate{}, errs
	}
	out := vm.DeepCopy()
	applyConfigChange(out, req, cfg, errs, chg)
	if len(errs) > 0 {
		return VMUpdate{}, errs
	}
	return VMUpdate{VM: out, Destroy: chg.destroyed}, nil
}

// diskChange is what a config update asks of the VM's existing volumes.
type diskChange struct {
	// destroy names the claims to remove for good: the volume of a
	// deleted unusedN, or of a disk deleted with force.
	destroy map[string]bool
	// destroyed lists those the VM had and no longer refers to.
	destroyed []string
}

// applyConfig writes every PVE key with a KubeVirt meaning into vm's
// template and stores the whole config (normalised the way PVE prints it)
// in the config annotation. Parts of the spec no PVE key owns (volumes and
// devices under other names, the firmware UUID, ...) are left alone.
func applyConfig(vm *kubevirtv1.VirtualMachine, req VMRequest, cfg map[string]string, errs map[string]string) {
	applyConfigChange(vm, req, cfg, errs, &diskChange{})
}

func applyConfigChange(vm *kubevirtv1.VirtualMachine, req VMRequest, cfg map[string]string, errs map[string]string, chg *diskChange) {
	if vm.Annotations == nil {
		vm.Annotations = map[string]string{} // made with kubectl: none yet
	}
	intIn := func(key string, def, lo, hi int) int {
		v, ok := cfg[key]
		if !ok {
			return def
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		switch {
		case err != nil:
			errs[key] = fmt.Sprintf("type check ('integer') failed - got '%s'", v)
		case n < lo:
			errs[key] = fmt.Sprintf("value must have a minimum value of %d", lo)
		case n > hi:
			errs[key] = fmt.Sprintf("value may not exceed %d", hi)
		default:
			cfg[key] = strconv.Itoa(n)
			return n
		}
		return def
	}
	for _, k := range boolKeys {
		v, ok := cfg[k]
		if !ok {
			continue
		}
		switch strings.ToLower(v) {
		case "1", "yes", "on", "true":
			cfg[k] = "1"
		case "0", "no", "off", "false":
			cfg[k] = "0"
		default:
			errs[k] = fmt.Sprintf("type check ('boolean') failed - got '%s'", v)
		}
	}
	name := cfg["name"]
	if name != "" && (!dnsNameRE.MatchString(name) || len(name) > 253) {
		errs["name"] = "invalid format - value does not look like a valid DNS name"
	}
	sockets := intIn("sockets", 1, 1, 4096)
	cores := intIn("cores", 1, 1, 1024)
	memMiB := int64(512)
	if v, ok := cfg["memory"]; ok {
		m, err := ParseMemoryMiB(v)
		if err != nil {
			errs["memory"] = err.Error()
		} else {
			memMiB = m
			cfg["memory"] = strconv.FormatInt(m, 10)
		}
	}
	balloon := intIn("balloon", -1, 0, 4194304)
	if balloon > 0 && int64(balloon) > memMiB {
		errs["balloon"] = "balloon value too large (must be smaller than assigned memory)"
	}
	if v, ok := cfg["tags"]; ok {
		tags, err := ParseTags(v)
		if err != nil {
			errs["tags"] = err.Error()
		} else {
			cfg["tags"] = FormatTags(tags)
		}
	}
	if v, ok := cfg["description"]; ok && len(v) > 8192 {
		errs["description"] = "value may only be 8192 characters long"
	}
	if b := cfg["bios"]; b != "" && b != "seabios" && b != "ovmf" {
		errs["bios"] = fmt.Sprintf("value '%s' does not have a value in the enumeration 'seabios, ovmf'", b)
	}
	if a, ok := cfg["agent"]; ok {
		if !AgentEnabled(a) && !strings.HasPrefix(a, "0") && !strings.HasPrefix(a, "enabled=0") {
			errs["agent"] = fmt.Sprintf("invalid format - value '%s' is not a valid agent setting", a)
		}
		// PVE prints property strings without the name of the default key:
		// "enabled=1,type=virtio" reads back as "1,type=virtio" (Telmate
		// looks at the first character only).
		cfg["agent"] = dropDefaultKey(a, "enabled")
	}
	if c, ok := cfg["cpu"]; ok {
		cfg["cpu"] = dropDefaultKey(c, "cputype")
	}

	spec := &vm.Spec.Template.Spec
	d := &spec.Domain
	if d.CPU == nil {
		d.CPU = &kubevirtv1.CPU{}
	}
	d.CPU.Sockets, d.CPU.Cores, d.CPU.Threads = uint32(sockets), uint32(cores), 1
	d.CPU.Model = ""
	if cpu := cfg["cpu"]; cpu != "" {
		model := strings.TrimPrefix(strings.SplitN(cpu, ",", 2)[0], "cputype=")
		if model == "host" {
			d.CPU.Model = kubevirtv1.CPUModeHostPassthrough
		}
	}
	if d.Memory == nil {
		d.Memory = &kubevirtv1.Memory{}
	}
	q := MiBToQuantity(memMiB)
	d.Memory.Guest = &q
	d.Devices.AutoattachMemBalloon = nil
	delete(d.Resources.Requests, corev1.ResourceMemory)
	switch {
	case balloon == 0:
		off := false
		d.Devices.AutoattachMemBalloon = &off
	case balloon > 0:
		if d.Resources.Requests == nil {
			d.Resources.Requests = corev1.ResourceList{}
		}
		d.Resources.Requests[corev1.ResourceMemory] = MiBToQuantity(int64(balloon))
	}
	d.Machine = nil
	if m := cfg["machine"]; m != "" {
		// KubeVirt allows only q35 machine types by default; PVE's "pc"
		// (i440fx) runs as q35, and the config keeps what the client sent.
		typ := "q35"
		if strings.Contains(m, "q35") {
			typ = strings.TrimSuffix(m, "+pve0")
		}
		d.Machine = &kubevirtv1.Machine{Type: typ}
	}
	if d.Firmware == nil {
		d.Firmware = &kubevirtv1.Firmware{}
	}
	d.Devices.TPM = nil
	d.Features = nil
	if cfg["bios"] == "ovmf" {
		// efidisk0 keeps the EFI variables (KubeVirt's persistent EFI state);
		// pre-enrolled-keys=1 is Secure Boot, which needs SMM.
		sb := false
		efi := &kubevirtv1.EFI{SecureBoot: &sb}
		if v, ok := cfg["efidisk0"]; ok {
			dr, err := parseDrive(v)
			if err != nil {
				errs["efidisk0"] = err.Error()
			} else {
				persistent := true
				efi.Persistent = &persistent
				// A boolean option is stored as PVE prints it: 1 or 0.
				keys, err := parseBoolOption("pre-enrolled-keys", dr.opts)
				if err != nil {
					errs["efidisk0"] = "invalid format - " + err.Error()
				} else if keys != nil {
					dr.opts["pre-enrolled-keys"] = boolDigit(*keys)
				}
				if keys != nil && *keys {
					on := true
					efi.SecureBoot = &on
					d.Features = &kubevirtv1.Features{SMM: &kubevirtv1.FeatureState{Enabled: &on}}
				}
				storage := strings.SplitN(dr.file, ":", 2)[0]
				dr.file = storage + ":" + fmt.Sprintf("vm-%d-efidisk", req.VMID)
				dr.set("size", "4M")
				cfg["efidisk0"] = dr.String()
			}
		}
		d.Firmware.Bootloader = &kubevirtv1.Bootloader{EFI: efi}
	} else {
		d.Firmware.Bootloader = nil
		if _, ok := cfg["efidisk0"]; ok {
			errs["efidisk0"] = "an EFI disk needs bios=ovmf"
		}
	}
	if v, ok := cfg["tpmstate0"]; ok {
		dr, err := parseDrive(v)
		if err != nil {
			errs["tpmstate0"] = err.Error()
		} else {
			persistent := true
			d.Devices.TPM = &kubevirtv1.TPMDevice{Persistent: &persistent}
			storage := strings.SplitN(dr.file, ":", 2)[0]
			dr.file = storage + ":" + fmt.Sprintf("vm-%d-tpmstate", req.VMID)
			if dr.opts["version"] == "" {
				dr.set("version", "v2.0")
			}
			dr.set("size", "4M")
			cfg["tpmstate0"] = dr.String()
		}
	}
	spec.Hostname = ""
	if name != "" && dnsNameRE.MatchString(name) && !strings.Contains(name, ".") && len(name) <= 63 {
		spec.Hostname = strings.ToLower(name)
	}
	if name != "" {
		vm.Annotations[AnnotationName] = name
	} else {
		delete(vm.Annotations, AnnotationName)
	}

	bootOrder := map[string]uint{}
	if b := cfg["boot"]; strings.HasPrefix(b, "order=") {
		for i, dev := range strings.Split(strings.TrimPrefix(b, "order="), ";") {
			if dev = strings.TrimSpace(dev); dev != "" {
				bootOrder[dev] = uint(i + 1)
			}
		}
	}
	for k, v := range cfg {
		if strings.HasPrefix(k, "ipconfig") {
			c, err := ParseIPConfig(v)
			if err != nil {
				errs[k] = err.Error()
				continue
			}
			cfg[k] = c.String()
		}
	}
	if v, ok := cfg["sshkeys"]; ok {
		if _, err := SSHKeys(v); err != nil {
			errs["sshkeys"] = err.Error()
		}
	}
	if t := cfg["citype"]; t != "" && t != "nocloud" && t != "configdrive2" {
		errs["citype"] = fmt.Sprintf("value '%s' does not have a value in the enumeration 'configdrive2, nocloud, opennebula'", t)
	}
	applyNets(vm, req, cfg, bootOrder, errs)
	applyDrives(vm, req, cfg, bootOrder, errs, chg)
	delete(cfg, "template")
	if vm.Labels[LabelTemplate] == "true" {
		cfg["template"] = "1"
	}
	if v := cfg["cipassword"]; v != "" {
		// The password itself lives in the cloud-init Secret only.
		cfg["cipassword"] = MaskedPassword
	}
	vm.Annotations[AnnotationConfig] = EncodeConfig(cfg)
}

// MaskedPassword is how PVE shows cipassword.
const MaskedPassword = "**********"

// applyNets maps netN keys onto interfaces and networks of the same name.
func applyNets(vm *kubevirtv1.VirtualMachine, req VMRequest, cfg map[string]string, bootOrder map[string]uint, errs map[string]string) {
	spec := &vm.Spec.Template.Spec
	var keys []string
	for k := range cfg {
		if netKeyRE.MatchString(k) {
			keys = append(keys, k)
		}
	}
	sortIndexed(keys)
	var ifaces []kubevirtv1.Interface
	for _, i := range spec.Domain.Devices.Interfaces {
		if !netKeyRE.MatchString(i.Name) {
			ifaces = append(ifaces, i) // not ours: keep
		}
	}
	var nets []kubevirtv1.Network
	podUsed := false
	for _, n := range spec.Networks {
		if !netKeyRE.MatchString(n.Name) {
			nets = append(nets, n)
			podUsed = podUsed || n.Pod != nil
		}
	}
	for _, k := range keys {
		ns, err := ParseNetSpec(cfg[k])
		if err != nil {
			errs[k] = err.Error()
			continue
		}
		if !supportedNICModels[ns.Model] {
			errs[k] = fmt.Sprintf("NIC model '%s' has no KubeVirt equivalent (use virtio, e1000, e1000e, igb, rtl8139, pcnet or ne2k_pci)", ns.Model)
			continue
		}
		if ns.MAC == "" {
			ns.MAC = GenerateMAC([]byte(fmt.Sprintf("%s/%d/%s", req.Namespace, req.VMID, k)))
		}
		iface := kubevirtv1.Interface{Name: k, Model: ns.Model, MacAddress: ns.MAC}
		if ns.LinkDown != nil && *ns.LinkDown {
			iface.State = kubevirtv1.InterfaceStateLinkDown
		}
		if o, ok := bootOrder[k]; ok {
			iface.BootOrder = &o
		}
		network := kubevirtv1.Network{Name: k}
		if ns.Bridge == "" || ns.Bridge == DefaultBridge {
			if podUsed {
				errs[k] = "only one NIC can use the pod network (bridge " + DefaultBridge + "); name a Multus network as the bridge for the others"
				continue
			}
			podUsed = true
			iface.InterfaceBindingMethod = kubevirtv1.InterfaceBindingMethod{Masquerade: &kubevirtv1.InterfaceMasquerade{}}
			network.NetworkSource = kubevirtv1.NetworkSource{Pod: &kubevirtv1.PodNetwork{}}
		} else {
			iface.InterfaceBindingMethod = kubevirtv1.InterfaceBindingMethod{Bridge: &kubevirtv1.InterfaceBridge{}}
			network.NetworkSource = kubevirtv1.NetworkSource{Multus: &kubevirtv1.MultusNetwork{NetworkName: ns.Bridge}}
		}
		ifaces = append(ifaces, iface)
		nets = append(nets, network)
		cfg[k] = ns.String()
	}
	spec.Domain.Devices.Interfaces = ifaces
	spec.Networks = nets
	spec.Domain.Devices.AutoattachPodInterface = nil
	if len(ifaces) == 0 {
		// PVE without netN has no NIC; KubeVirt would add a default one.
		no := false
		spec.Domain.Devices.AutoattachPodInterface = &no
	}
}

// applyDrives maps disk keys onto disks, volumes and DataVolume templates
// of the same name. Volumes of the VM ("<storage>:<claim>") are attached
// by name; new "<storage>:<GiB>" disks get the first vm-<id>-disk-<n> that
// no claim, DataVolume or VM of the namespace uses. Foreign disks (see
// specDisk) are kept exactly as they are unless the update deletes their
// key (then they are detached); an update that would change one is
// refused, since it cannot be rebuilt from a PVE value without guessing.
func applyDrives(vm *kubevirtv1.VirtualMachine, req VMRequest, cfg map[string]string, bootOrder map[string]uint, errs map[string]string, chg *diskChange) {
	spec := &vm.Spec.Template.Spec
	stored := StoredConfig(vm)
	sds := specDisks(vm, stored)
	foreign := map[string]specDisk{} // by disk name
	foreignKey := map[string]bool{}
	for _, s := range sds {
		if !s.managed {
			foreign[s.disk.Name] = s
			foreignKey[s.key] = true
		}
	}
	_, setBoot := req.Config["boot"]

	// The claims this VM may attach by name, detach and delete: its
	// DataVolume templates, the claims its disks use, its unusedN.
	existingDV := map[string]kubevirtv1.DataVolumeTemplateSpec{}
	owned := map[string]*ownedClaim{}
	for _, dv := range vm.Spec.DataVolumeTemplates {
		existingDV[dv.Name] = dv
		owned[dv.Name] = &ownedClaim{storage: TemplateStorageClass(dv), template: true, dv: true}
	}
	for _, s := range sds {
		if s.disk.CDRom != nil {
			continue
		}
		if n, dv := claimOfVolume(s.vol); n != "" && owned[n] == nil {
			owned[n] = &ownedClaim{dv: dv}
		}
	}
	for _, k := range orderedKeys(stored) {
		if !strings.HasPrefix(k, "unused") {
			continue
		}
		if n := unusedVolume(stored[k]); n != "" && owned[n] == nil {
			st, _, _ := strings.Cut(stored[k], ":")
			owned[n] = &ownedClaim{storage: st, dv: false}
		}
	}
	for n, o := range owned {
		if o.storage == "" {
			if ci, ok := req.Claim.get(n); ok {
				o.storage = ci.StorageClass
			}
		}
		if o.storage == "" {
			o.storage = unknownStorage
		}
	}
	usedDV := map[string]bool{} // claims a drive uses after this change

	// Foreign disks first, in their order: kept as they are, or detached.
	var disks []kubevirtv1.Disk
	keepVol, dropVol := map[string]bool{}, map[string]bool{}
	for _, d := range spec.Domain.Devices.Disks {
		s, isForeign := foreign[d.Name]
		switch {
		case isForeign:
			if _, keep := cfg[s.key]; !keep {
				dropVol[d.Name] = true // detached: its claim becomes unusedN
				continue
			}
			if v, set := req.Config[s.key]; set && !sameDrive(v, foreignValue(vm, s, req.Claim)) {
				errs[s.key] = fmt.Sprintf("'%s' is the KubeVirt disk '%s', which was not made through this API: it can be detached or removed (delete, unlink), not changed or replaced", s.key, d.Name)
				continue
			}
			if setBoot {
				d.BootOrder = nil
				if o, ok := bootOrder[s.key]; ok {
					d.BootOrder = &o
				}
			}
			keepVol[d.Name] = true
			if n, _ := claimOfVolume(s.vol); n != "" && d.CDRom == nil {
				usedDV[n] = true
			}
			disks = append(disks, d)
		case !diskKeyRE.MatchString(d.Name):
			disks = append(disks, d) // no key to show it under: not ours
		}
	}
	var vols []kubevirtv1.Volume
	for _, v := range spec.Volumes {
		if keepVol[v.Name] || (!diskKeyRE.MatchString(v.Name) && !dropVol[v.Name]) {
			vols = append(vols, v)
		}
	}

	var keys []string
	for k := range cfg {
		if diskKeyRE.MatchString(k) && !foreignKey[k] {
			keys = append(keys, k)
		}
	}
	sortIndexed(keys)
	next := 0
	// newVolume is the first vm-<id>-disk-<n> nothing in the namespace uses.
	newVolume := func() (string, error) {
		return freeVolumeName(req.VMID, &next, func(name string) bool { return owned[name] != nil || chg.destroy[name] }, req.VolumeTaken)
	}
	var ciDrive string
	for _, k := range keys {
		d, err := parseDrive(cfg[k])
		if err != nil {
			errs[k] = err.Error()
			continue
		}
		bus := diskBus(k)
		disk := kubevirtv1.Disk{Name: k}
		if o, ok := bootOrder[k]; ok {
			disk.BootOrder = &o
		}
		var vol *kubevirtv1.Volume
		switch {
		case ciVolRE.MatchString(d.file):
			m := ciVolRE.FindStringSubmatch(d.file)
			if req.StorageExists != nil && !req.StorageExists(m[1]) {
				errs[k] = fmt.Sprintf("storage '%s' does not exist", m[1])
				continue
			}
			if ciDrive != "" {
				errs[k] = "only one cloud-init drive is allowed (already on " + ciDrive + ")"
				continue
			}
			ciDrive = k
			secret := CloudInitSecretName(req.VMID)
			disk.DiskDevice = kubevirtv1.DiskDevice{CDRom: &kubevirtv1.CDRomTarget{Bus: cdromBus(bus)}}
			src := &kubevirtv1.CloudInitNoCloudSource{UserDataSecretRef: &corev1.LocalObjectReference{Name: secret}, NetworkDataSecretRef: &corev1.LocalObjectReference{Name: secret}}
			if cfg["citype"] == "configdrive2" {
				vol = &kubevirtv1.Volume{Name: k, VolumeSource: kubevirtv1.VolumeSource{CloudInitConfigDrive: &kubevirtv1.CloudInitConfigDriveSource{UserDataSecretRef: src.UserDataSecretRef, NetworkDataSecretRef: src.NetworkDataSecretRef}}}
			} else {
				vol = &kubevirtv1.Volume{Name: k, VolumeSource: kubevirtv1.VolumeSource{CloudInitNoCloud: src}}
			}
			d.file = m[1] + ":" + CloudInitSecretName(req.VMID)
			d.set("media", "cdrom")
		case d.opts["media"] == "cdrom":
			if d.file == "none" || d.file == "cdrom" {
				continue // an empty drive has no KubeVirt form; the config keeps it
			}
			m := isoRE.FindStringSubmatch(d.file)
			if m == nil {
				errs[k] = fmt.Sprintf("invalid CD-ROM volume '%s': use '<storage>:iso/<file>', 'none' or 'cdrom'", d.file)
				continue
			}
			claim := ISOClaimName(m[2])
			size, ok := int64(0), false
			if req.ISOSize != nil {
				size, ok = req.ISOSize(claim)
			}
			if !ok {
				errs[k] = fmt.Sprintf("volume '%s' does not exist (expected a PVC '%s' in namespace '%s')", d.file, claim, req.Namespace)
				continue
			}
			disk.DiskDevice = kubevirtv1.DiskDevice{CDRom: &kubevirtv1.CDRomTarget{Bus: cdromBus(bus)}}
			vol = &kubevirtv1.Volume{Name: k, VolumeSource: kubevirtv1.VolumeSource{PersistentVolumeClaim: &kubevirtv1.PersistentVolumeClaimVolumeSource{
				PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: true},
			}}}
			if size > 0 {
				d.set("size", FormatSize(size))
			}
		default:
			disk.DiskDevice = kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: bus}}
			if d.opts["iothread"] == "1" {
				t := true
				disk.DedicatedIOThread = &t
			}
			if c := d.opts["cache"]; c == "none" || c == "writethrough" || c == "writeback" {
				disk.Cache = kubevirtv1.DriverCache(c)
			}
			disk.Serial = d.opts["serial"]
			var volName string
			asDV := true
			if imp, ok := d.opts["import-from"]; ok && newDiskRE.MatchString(d.file) {
				// import-from copies a volume of this cluster: a DataVolume
				// cloned from that claim (same namespace), at least as
				// large as the source.
				m := newDiskRE.FindStringSubmatch(d.file)
				src := strings.SplitN(imp, ":", 2)
				if len(src) != 2 || strings.Contains(src[1], "/") || m[2] == "" {
					errs[k] = fmt.Sprintf("import-from '%s': only volumes of this cluster ('<storage>:<volume>') can be imported", imp)
					continue
				}
				storage := m[2]
				if req.StorageExists != nil && !req.StorageExists(storage) {
					errs[k] = fmt.Sprintf("storage '%s' does not exist", storage)
					continue
				}
				gib, _ := strconv.ParseFloat(m[3], 64)
				bytes := int64(gib * (1 << 30))
				if req.Claim != nil {
					ci, ok := req.Claim.get(src[1])
					if !ok {
						errs[k] = fmt.Sprintf("import-from: volume '%s' does not exist", imp)
						continue
					}
					bytes = max(bytes, ci.Bytes)
				}
				bytes = (bytes + (1<<20 - 1)) &^ (1<<20 - 1)
				if volName, err = newVolume(); err != nil {
					errs[k] = err.Error()
					continue
				}
				sc := storage
				st := &cdiv1.StorageSpec{StorageClassName: &sc}
				if bytes > 0 {
					st.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(bytes, resource.BinarySI)}
					d.set("size", FormatSize(bytes))
				}
				existingDV[volName] = kubevirtv1.DataVolumeTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Name: volName},
					Spec: cdiv1.DataVolumeSpec{
						Source:  &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: req.Namespace, Name: src[1]}},
						Storage: st,
					},
				}
				owned[volName] = &ownedClaim{storage: storage, template: true, dv: true}
				delete(d.opts, "import-from")
				d.file = storage + ":" + volName
			} else if m := newDiskRE.FindStringSubmatch(d.file); m != nil {
				storage := m[2]
				if storage == "" {
					errs[k] = "missing storage ID in '" + d.file + "'"
					continue
				}
				if req.StorageExists != nil && !req.StorageExists(storage) {
					errs[k] = fmt.Sprintf("storage '%s' does not exist", storage)
					continue
				}
				gib, _ := strconv.ParseFloat(m[3], 64)
				bytes := int64(gib * (1 << 30))
				if bytes <= 0 {
					errs[k] = "disk size must be greater than zero"
					continue
				}
				bytes = (bytes + (1<<20 - 1)) &^ (1<<20 - 1) // whole MiB, as PVE allocates
				if volName, err = newVolume(); err != nil {
					errs[k] = err.Error()
					continue
				}
				sc := storage
				existingDV[volName] = kubevirtv1.DataVolumeTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Name: volName},
					Spec: cdiv1.DataVolumeSpec{
						Source: &cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}},
						Storage: &cdiv1.StorageSpec{
							StorageClassName: &sc,
							Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(bytes, resource.BinarySI)}},
						},
					},
				}
				owned[volName] = &ownedClaim{storage: storage, template: true, dv: true}
				d.file = storage + ":" + volName
				d.set("size", FormatSize(bytes))
			} else if st, name, ok := strings.Cut(d.file, ":"); ok && st != "" && owned[name] != nil {
				// A volume of this VM: re-attached, or kept under its key.
				o := owned[name]
				if usedDV[name] {
					errs[k] = fmt.Sprintf("volume '%s' is already used by another drive", d.file)
					continue
				}
				// Re-attached in the same call that deletes its unusedN
				// (or its old key, with force): moved, not deleted.
				delete(chg.destroy, name)
				volName, asDV = name, o.dv
				size := int64(0)
				if o.template {
					size = DataVolumeSize(existingDV[name])
				}
				if ci, ok := req.Claim.get(name); ok && size == 0 {
					size = ci.Bytes
				}
				if size > 0 {
					d.set("size", FormatSize(size))
				}
			} else {
				_, claimed := req.Claim.get(name)
				switch {
				case ok && st != "" && claimed:
					errs[k] = fmt.Sprintf("volume '%s' is not a volume of VM %d", d.file, req.VMID)
				case ownVolRE.MatchString(d.file):
					errs[k] = fmt.Sprintf("volume '%s' does not exist", d.file)
				default:
					errs[k] = fmt.Sprintf("unable to parse volume '%s': use '<storage>:<size in GiB>' for a new disk or '<storage>:vm-<vmid>-disk-<n>' for an existing one", d.file)
				}
				continue
			}
			usedDV[volName] = true
			if asDV {
				vol = &kubevirtv1.Volume{Name: k, VolumeSource: kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: volName}}}
			} else {
				vol = &kubevirtv1.Volume{Name: k, VolumeSource: kubevirtv1.VolumeSource{PersistentVolumeClaim: &kubevirtv1.PersistentVolumeClaimVolumeSource{
					PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: volName},
				}}}
			}
		}
		disks = append(disks, disk)
		vols = append(vols, *vol)
		cfg[k] = d.String()
	}

	// Claims no drive uses are PVE's unusedN: their data is kept until the
	// key is deleted (or the disk was deleted with force). An unusedN
	// keeps its key, as on PVE: a repeated delete of unused0 must not
	// free the volume that would move into it.
	prevKey := map[string]string{}
	for _, k := range orderedKeys(cfg) {
		if !strings.HasPrefix(k, "unused") {
			continue
		}
		if v, ok := stored[k]; ok && v == cfg[k] {
			if n := unusedVolume(v); n != "" && prevKey[n] == "" {
				prevKey[n] = k
			}
		}
		delete(cfg, k)
	}
	var dvs []kubevirtv1.DataVolumeTemplateSpec
	for _, n := range orderedKeys(existingDV) {
		if !chg.destroy[n] {
			dvs = append(dvs, existingDV[n])
		}
	}
	takenKey := map[string]bool{}
	var fresh []string
	for _, n := range orderedKeys(owned) {
		switch {
		case usedDV[n]:
		case chg.destroy[n]:
			chg.destroyed = append(chg.destroyed, n)
		case prevKey[n] != "":
			cfg[prevKey[n]] = owned[n].storage + ":" + n
			takenKey[prevKey[n]] = true
		default:
			fresh = append(fresh, n)
		}
	}
	unused := 0
	for _, n := range fresh {
		for takenKey["unused"+strconv.Itoa(unused)] {
			unused++
		}
		cfg["unused"+strconv.Itoa(unused)] = owned[n].storage + ":" + n
		unused++
	}
	// Foreign disks are shown from the spec, never stored.
	for k := range foreignKey {
		delete(cfg, k)
	}
	var kept []specDisk
	for _, s := range sds {
		if !s.managed && keepVol[s.disk.Name] {
			kept = append(kept, s)
		}
	}
	pinDiskKeys(vm, kept)
	vm.Spec.DataVolumeTemplates = dvs
	spec.Domain.Devices.Disks = disks
	spec.Volumes = vols
}

// DataVolumeSize is the requested size of a DataVolume template.
func DataVolumeSize(dv kubevirtv1.DataVolumeTemplateSpec) int64 {
	if dv.Spec.Storage != nil {
		if q, ok := dv.Spec.Storage.Resources.Requests[corev1.ResourceStorage]; ok {
			return q.Value()
		}
	}
	if dv.Spec.PVC != nil {
		if q, ok := dv.Spec.PVC.Resources.Requests[corev1.ResourceStorage]; ok {
			return q.Value()
		}
	}
	return 0
}

func cdromBus(b kubevirtv1.DiskBus) kubevirtv1.DiskBus {
	if b == kubevirtv1.DiskBusSCSI {
		return b
	}
	return kubevirtv1.DiskBusSATA // CD-ROMs sit on SATA or SCSI in KubeVirt
}

func diskBus(key string) kubevirtv1.DiskBus {
	switch {
	case strings.HasPrefix(key, "scsi"):
		return kubevirtv1.DiskBusSCSI
	case strings.HasPrefix(key, "virtio"):
		return kubevirtv1.DiskBusVirtio
	}
	return kubevirtv1.DiskBusSATA // KubeVirt has no IDE
}

// sortIndexed orders keys like net10 after net2.
func sortIndexed(keys []string) {
	split := func(k string) (string, int) {
		i := strings.IndexAny(k, "0123456789")
		if i < 0 {
			return k, -1
		}
		n, _ := strconv.Atoi(k[i:])
		return k[:i], n
	}
	sort.Slice(keys, func(i, j int) bool {
		pi, ni := split(keys[i])
		pj, nj := split(keys[j])
		if pi != pj {
			return pi < pj
		}
		return ni < nj
	})
}

// dropDefaultKey prints a property string the way PVE does: a leading
// "<defaultKey>=<v>" part becomes just "<v>", wherever the client put it.
func dropDefaultKey(v, defaultKey string) string {
	parts := strings.Split(v, ",")
	for i, p := range parts {
		if val, ok := strings.CutPrefix(p, defaultKey+"="); ok {
			rest := append(parts[:i:i], parts[i+1:]...)
			return strings.Join(append([]string{val}, rest...), ",")
		}
	}
	return v
}
