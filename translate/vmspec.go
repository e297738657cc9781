package translate

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
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
	// FileStorage reports whether a PVE storage keeps files only (the
	// directory storage when no StorageClass has its name): a cloud-init
	// drive may name it (the drive is a Secret), a new disk may not.
	FileStorage func(name string) bool
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

// freeKubeName is the VM object name for a PVE name that taken (if set)
// does not report in use: KubeName, else KubeName with the vmid appended,
// else pve-<vmid>.
func freeKubeName(pveName string, vmid int, taken func(string) bool) string {
	kname := KubeName(pveName, vmid)
	if taken != nil && taken(kname) {
		kname = KubeName(kname+"-"+strconv.Itoa(vmid), vmid)
		if taken(kname) {
			kname = "pve-" + strconv.Itoa(vmid)
		}
	}
	return kname
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
	kname := freeKubeName(cfg["name"], req.VMID, req.NameTaken)
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

// applyConfigChange maps a config as it will be after the call (cfg: the
// stored config with the call's keys set and its deletes removed) onto
// vm's template, and stores cfg, normalised the way PVE prints it, in the
// config annotation. PVE checks every key of a call before it writes any
// and reports all bad keys at once, so every piece runs and records its
// errors in errs; the caller discards vm when errs is not empty. Each piece
// owns a few keys and the fields they map onto (see vmhardware.go),
// resetting those so that a deleted key clears its field; fields no PVE
// key owns (the firmware UUID, devices under other names) are left alone.
// chg carries the volumes an update deletes for good (none on create).
func applyConfigChange(vm *kubevirtv1.VirtualMachine, req VMRequest, cfg map[string]string, errs map[string]string, chg *diskChange) {
	if vm.Annotations == nil {
		vm.Annotations = map[string]string{} // made with kubectl: none yet
	}
	normalizeBools(cfg, errs)
	checkOptions(cfg, errs)
	d := &vm.Spec.Template.Spec.Domain
	applyCPU(d, cfg, errs)
	applyMemory(d, cfg, errs)
	_, setMachine := req.Config["machine"]
	applyMachine(d, cfg, setMachine, errs)
	applyFirmware(d, req.VMID, cfg, errs)
	applyTPM(d, req.VMID, cfg, errs)
	applyName(vm, cfg, errs)
	checkCloudInit(cfg, errs)
	boot := bootOrder(cfg)
	applyNets(vm, req, cfg, boot, errs)
	applyDrives(vm, req, cfg, boot, errs, chg)
	storeConfig(vm, cfg)
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
