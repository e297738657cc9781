package translate

import (
	"crypto/sha1"
	"encoding/hex"
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

// VMRequest is a validated-to-be PVE create call.
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
}

// boolKeys are the boolean config keys, normalised to 0/1.
var boolKeys = []string{"acpi", "autostart", "freeze", "kvm", "localtime", "numa", "onboot", "protection", "reboot", "tablet", "template", "keephugepages"}

var dnsNameRE = regexp.MustCompile(`^(?i)[a-z0-9]([a-z0-9\-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9\-]*[a-z0-9])?)*$`)

// newDiskRE is qemu-server's NEW_DISK_RE: "[storage:]size-in-GiB".
var newDiskRE = regexp.MustCompile(`^(([^/:\s]+):)?(\d+(\.\d+)?)$`)

var diskKeyRE = regexp.MustCompile(`^(scsi|virtio|sata|ide)(\d+)$`)
var netKeyRE = regexp.MustCompile(`^net(\d+)$`)

// supportedNICModels are PVE NIC models KubeVirt also has.
var supportedNICModels = map[string]bool{"virtio": true, "e1000": true, "e1000e": true, "rtl8139": true, "pcnet": true, "ne2k_pci": true, "igb": true}

// k8sNameRE keeps what a DNS-1123 label allows.
var k8sBadRE = regexp.MustCompile(`[^a-z0-9-]+`)

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

// BuildVM maps a PVE create call onto a KubeVirt VirtualMachine. Errors are
// per parameter, in PVE's words; when any is returned the VM is nil and
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
	if name != "" && (!dnsNameRE.MatchString(name) || len(name) > 253) {
		errs["name"] = "invalid format - value does not look like a valid DNS name"
	}
	kname := KubeName(name, req.VMID)
	if req.NameTaken != nil && req.NameTaken(kname) {
		kname = KubeName(kname+"-"+strconv.Itoa(req.VMID), req.VMID)
		if req.NameTaken(kname) {
			kname = "pve-" + strconv.Itoa(req.VMID)
		}
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
	boolIn := func(key string) bool {
		v, ok := cfg[key]
		if !ok {
			return false
		}
		switch strings.ToLower(v) {
		case "1", "yes", "on", "true":
			cfg[key] = "1"
			return true
		case "0", "no", "off", "false":
			cfg[key] = "0"
			return false
		}
		errs[key] = fmt.Sprintf("type check ('boolean') failed - got '%s'", v)
		return false
	}
	for _, k := range boolKeys {
		boolIn(k)
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

	spec := kubevirtv1.VirtualMachineInstanceSpec{
		Domain: kubevirtv1.DomainSpec{
			CPU:    &kubevirtv1.CPU{Sockets: uint32(sockets), Cores: uint32(cores), Threads: 1},
			Memory: &kubevirtv1.Memory{},
		},
	}
	q := MiBToQuantity(memMiB)
	spec.Domain.Memory.Guest = &q
	if balloon == 0 {
		off := false
		spec.Domain.Devices.AutoattachMemBalloon = &off
	}
	if balloon > 0 {
		spec.Domain.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: MiBToQuantity(int64(balloon))}
	}
	if cpu := cfg["cpu"]; cpu != "" {
		model := cpu
		if i := strings.IndexByte(model, ','); i >= 0 {
			model = model[:i]
		}
		model = strings.TrimPrefix(model, "cputype=")
		if model == "host" {
			spec.Domain.CPU.Model = kubevirtv1.CPUModeHostPassthrough
		}
	}
	if m := cfg["machine"]; m != "" {
		// KubeVirt allows only q35 machine types by default; PVE's "pc"
		// (i440fx) runs as q35, and the config keeps what the client sent.
		if strings.Contains(m, "q35") {
			spec.Domain.Machine = &kubevirtv1.Machine{Type: strings.TrimSuffix(m, "+pve0")}
		} else {
			spec.Domain.Machine = &kubevirtv1.Machine{Type: "q35"}
		}
	}
	if cfg["bios"] == "ovmf" {
		sb := false
		spec.Domain.Firmware = &kubevirtv1.Firmware{Bootloader: &kubevirtv1.Bootloader{EFI: &kubevirtv1.EFI{SecureBoot: &sb}}}
	} else if b := cfg["bios"]; b != "" && b != "seabios" {
		errs["bios"] = fmt.Sprintf("value '%s' does not have a value in the enumeration 'seabios, ovmf'", b)
	}
	if name != "" && dnsNameRE.MatchString(name) && !strings.Contains(name, ".") && len(name) <= 63 {
		spec.Hostname = strings.ToLower(name)
	}

	bootOrder := map[string]uint{}
	if b := cfg["boot"]; strings.HasPrefix(b, "order=") {
		for i, dev := range strings.Split(strings.TrimPrefix(b, "order="), ";") {
			if dev = strings.TrimSpace(dev); dev != "" {
				bootOrder[dev] = uint(i + 1)
			}
		}
	}

	// Networks, in index order so the first vmbr0 NIC gets the pod network.
	var netKeys []string
	for k := range cfg {
		if netKeyRE.MatchString(k) {
			netKeys = append(netKeys, k)
		}
	}
	sortIndexed(netKeys)
	podUsed := false
	for _, k := range netKeys {
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
		spec.Domain.Devices.Interfaces = append(spec.Domain.Devices.Interfaces, iface)
		spec.Networks = append(spec.Networks, network)
		cfg[k] = ns.String()
	}
	if len(netKeys) == 0 {
		// PVE without netN has no NIC; KubeVirt would add a default one.
		no := false
		spec.Domain.Devices.AutoattachPodInterface = &no
	}

	// Disks.
	var dvs []kubevirtv1.DataVolumeTemplateSpec
	var diskKeys []string
	for k := range cfg {
		if diskKeyRE.MatchString(k) {
			diskKeys = append(diskKeys, k)
		}
	}
	sortIndexed(diskKeys)
	diskIndex := 0
	for _, k := range diskKeys {
		d, err := parseDrive(cfg[k])
		if err != nil {
			errs[k] = err.Error()
			continue
		}
		bus := diskBus(k)
		if d.opts["media"] == "cdrom" {
			if d.file != "none" && d.file != "cdrom" {
				errs[k] = fmt.Sprintf("CD-ROM image '%s' is not supported yet: only empty drives ('none') can be created for now", d.file)
			}
			continue // an empty drive has no KubeVirt form; the config keeps it
		}
		m := newDiskRE.FindStringSubmatch(d.file)
		if m == nil {
			errs[k] = fmt.Sprintf("volume '%s' is not supported yet: only new disks '<storage>:<size in GiB>' can be created for now", d.file)
			continue
		}
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
		volName := fmt.Sprintf("vm-%d-disk-%d", req.VMID, diskIndex)
		diskIndex++
		sc := storage
		dvs = append(dvs, kubevirtv1.DataVolumeTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Name: volName},
			Spec: cdiv1.DataVolumeSpec{
				Source: &cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}},
				Storage: &cdiv1.StorageSpec{
					StorageClassName: &sc,
					Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(bytes, resource.BinarySI)}},
				},
			},
		})
		disk := kubevirtv1.Disk{Name: k, DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: bus}}}
		if o, ok := bootOrder[k]; ok {
			disk.BootOrder = &o
		}
		if d.opts["iothread"] == "1" {
			t := true
			disk.DedicatedIOThread = &t
		}
		if c := d.opts["cache"]; c == "none" || c == "writethrough" || c == "writeback" {
			disk.Cache = kubevirtv1.DriverCache(c)
		}
		if s := d.opts["serial"]; s != "" {
			disk.Serial = s
		}
		spec.Domain.Devices.Disks = append(spec.Domain.Devices.Disks, disk)
		spec.Volumes = append(spec.Volumes, kubevirtv1.Volume{Name: k, VolumeSource: kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: volName}}})
		d.file = storage + ":" + volName
		delete(d.opts, "size")
		d.opts["size"] = FormatSize(bytes)
		cfg[k] = d.String()
	}
	if len(errs) > 0 {
		return nil, errs
	}

	labels := map[string]string{LabelVMID: strconv.Itoa(req.VMID)}
	rs := kubevirtv1.RunStrategyManual
	if cfg["template"] == "1" {
		labels[LabelTemplate] = "true"
		rs = kubevirtv1.RunStrategyHalted
	} else {
		delete(cfg, "template")
	}
	ann := map[string]string{AnnotationNode: req.Node, AnnotationConfig: EncodeConfig(cfg)}
	if name != "" {
		ann[AnnotationName] = name
	}
	vm := &kubevirtv1.VirtualMachine{
		TypeMeta:   metav1.TypeMeta{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine"},
		ObjectMeta: metav1.ObjectMeta{Name: kname, Namespace: req.Namespace, Labels: labels, Annotations: ann},
		Spec: kubevirtv1.VirtualMachineSpec{
			RunStrategy:         &rs,
			DataVolumeTemplates: dvs,
			Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{LabelVMID: strconv.Itoa(req.VMID)}},
				Spec:       spec,
			},
		},
	}
	return vm, nil
}

// DefaultBridge is the PVE bridge that stands for the pod network.
const DefaultBridge = "vmbr0"

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

// drive is a parsed disk property string: the volume and its options in
// the order given.
type drive struct {
	file string
	keys []string
	opts map[string]string
}

func parseDrive(s string) (*drive, error) {
	d := &drive{opts: map[string]string{}}
	for i, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, hasEq := strings.Cut(part, "=")
		if i == 0 && (!hasEq || strings.Contains(k, ":")) {
			d.file = part
			continue
		}
		if !hasEq {
			return nil, fmt.Errorf("invalid format - format error: '%s' is not a key=value pair", part)
		}
		if k == "file" || k == "volume" {
			d.file = v
			continue
		}
		if _, dup := d.opts[k]; dup {
			return nil, fmt.Errorf("invalid format - duplicate key in comma-separated list property: %s", k)
		}
		d.keys = append(d.keys, k)
		d.opts[k] = v
	}
	if d.file == "" {
		return nil, fmt.Errorf("invalid format - missing key in comma-separated list property: file")
	}
	return d, nil
}

func (d *drive) String() string {
	parts := []string{d.file}
	for _, k := range d.keys {
		if v, ok := d.opts[k]; ok && k != "size" {
			parts = append(parts, k+"="+v)
		}
	}
	if s, ok := d.opts["size"]; ok {
		parts = append(parts, "size="+s)
	}
	return strings.Join(parts, ",")
}

// ConfigView is GET …/config: the stored PVE keys with live KubeVirt facts
// laid over them, integers as numbers, and a digest of the whole.
func ConfigView(vm *kubevirtv1.VirtualMachine) map[string]any {
	cfg := configStrings(vm)
	out := make(map[string]any, len(cfg)+1)
	for k, v := range cfg {
		if intKeys[k] {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				out[k] = n
				continue
			}
		}
		out[k] = v
	}
	out["digest"] = ConfigDigest(cfg)
	return out
}

// configStrings is the config as strings: stored keys overlaid with what
// the VM object says now (so a kubectl edit shows up).
func configStrings(vm *kubevirtv1.VirtualMachine) map[string]string {
	cfg := StoredConfig(vm)
	sockets, cores := CPUTopology(vm)
	cfg["sockets"] = strconv.Itoa(sockets)
	cfg["cores"] = strconv.Itoa(cores)
	if mem := MemoryBytes(vm); mem > 0 {
		cfg["memory"] = strconv.FormatInt(mem>>20, 10)
	}
	if n := vm.Annotations[AnnotationName]; n != "" {
		cfg["name"] = n
	} else if cfg["name"] == "" {
		cfg["name"] = vm.Name
	}
	if vm.Labels[LabelTemplate] == "true" {
		cfg["template"] = "1"
	}
	if vm.Spec.Template != nil {
		for _, iface := range vm.Spec.Template.Spec.Domain.Devices.Interfaces {
			if _, ok := cfg[iface.Name]; ok || !netKeyRE.MatchString(iface.Name) {
				continue
			}
			model := iface.Model
			if model == "" {
				model = "virtio"
			}
			spec := model
			if iface.MacAddress != "" {
				spec += "=" + strings.ToUpper(iface.MacAddress)
			}
			cfg[iface.Name] = spec + ",bridge=" + DefaultBridge
		}
	}
	if _, ok := cfg["ostype"]; !ok {
		cfg["ostype"] = "other"
	}
	return cfg
}

// ConfigDigest is PVE's config digest: a SHA-1 over the config, here over
// its sorted key=value lines.
func ConfigDigest(cfg map[string]string) string {
	keys := make([]string, 0, len(cfg))
	for k := range cfg {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha1.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%s: %s\n", k, cfg[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// PendingEntry is a row of GET …/pending.
type PendingEntry struct {
	Key     string `json:"key"`
	Value   any    `json:"value,omitempty"`
	Pending any    `json:"pending,omitempty"`
	Delete  int    `json:"delete,omitempty"`
}

// PendingView lists the config as pending rows; nothing is pending yet
// (config changes arrive with the full lifecycle).
func PendingView(vm *kubevirtv1.VirtualMachine) []PendingEntry {
	view := ConfigView(vm)
	delete(view, "digest")
	keys := make([]string, 0, len(view))
	for k := range view {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]PendingEntry, 0, len(keys))
	for _, k := range keys {
		out = append(out, PendingEntry{Key: k, Value: view[k]})
	}
	return out
}
