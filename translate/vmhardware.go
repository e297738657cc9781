package translate

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// The pieces of applyConfigChange. Each owns a few PVE keys: it checks and
// normalises them in cfg (the whole config as it will be stored), records
// PVE-worded errors in errs under the offending key, and sets the part of
// the spec those keys map onto. A piece resets what it owns before setting
// it, so that a deleted key clears its field, and never touches the rest
// of the spec.

// intKey reads an integer key of cfg, bounded by lo and hi, and stores it
// the way PVE prints it; def when the key is absent or invalid (then errs
// says why, in pve-common's words).
func intKey(cfg, errs map[string]string, key string, def, lo, hi int) int {
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

// normalizeBools stores every boolean key as 1 or 0, as PVE prints them
// whatever spelling the client sent (yes, on, true...).
func normalizeBools(cfg, errs map[string]string) {
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
}

// checkOptions validates the option keys with no KubeVirt field (tags,
// description, agent): they live in the stored config only, but must
// read back as PVE would store them.
func checkOptions(cfg, errs map[string]string) {
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
	if a, ok := cfg["agent"]; ok {
		if !AgentEnabled(a) && !strings.HasPrefix(a, "0") && !strings.HasPrefix(a, "enabled=0") {
			errs["agent"] = fmt.Sprintf("invalid format - value '%s' is not a valid agent setting", a)
		}
		// PVE prints property strings without the name of the default key:
		// "enabled=1,type=virtio" reads back as "1,type=virtio" (Telmate
		// looks at the first character only).
		cfg["agent"] = dropDefaultKey(a, "enabled")
	}
}

// applyCPU maps sockets, cores and cpu onto the CPU topology and model.
// PVE has no threads key, so threads is 1. Only cpu=host has a KubeVirt
// counterpart (host-passthrough); any other PVE model runs as KubeVirt's
// default, and the config keeps what the client sent for it to read back.
func applyCPU(d *kubevirtv1.DomainSpec, cfg, errs map[string]string) {
	sockets := intKey(cfg, errs, "sockets", 1, 1, 4096)
	cores := intKey(cfg, errs, "cores", 1, 1, 1024)
	if c, ok := cfg["cpu"]; ok {
		cfg["cpu"] = dropDefaultKey(c, "cputype")
	}
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
}

// applyMemory maps memory (PVE's default is 512 MiB) onto the guest
// memory and balloon onto the balloon device: balloon=0 removes it, a
// positive balloon is PVE's minimum and becomes the memory request, so
// the scheduler reserves what the guest may shrink to.
func applyMemory(d *kubevirtv1.DomainSpec, cfg, errs map[string]string) {
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
	balloon := intKey(cfg, errs, "balloon", -1, 0, 4194304)
	if balloon > 0 && int64(balloon) > memMiB {
		errs["balloon"] = "balloon value too large (must be smaller than assigned memory)"
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
}

// applyMachine maps machine onto KubeVirt's machine type "q35", keeping
// PVE's value in the config. KubeVirt runs q35 machines only (its default
// emulatedMachines on amd64 are q35* and pc-q35*), and a pinned version
// (pc-q35-8.1, pc-q35-9.2+pve1) passes its webhook but never schedules:
// virt-controller selects nodes labelled with the exact type, and nodes
// are labelled with what their QEMU offers (q35 and RHEL's pc-q35-rhel*).
// So every q35 variant runs as q35, and PVE's i440fx ("pc", pc-i440fx-*)
// too, as the nearest machine KubeVirt has; "virt" is for aarch64 guests
// and refused. A value the call sets is checked against qemu-server's
// machine format; options (viommu, enable-s3/s4) have no KubeVirt form
// and stay in the config only.
func applyMachine(d *kubevirtv1.DomainSpec, cfg map[string]string, set bool, errs map[string]string) {
	d.Machine = nil
	m, ok := cfg["machine"]
	if !ok || m == "" {
		return
	}
	m = dropDefaultKey(m, "type")
	cfg["machine"] = m
	typ, _, _ := strings.Cut(m, ",")
	if strings.Contains(typ, "=") {
		typ = "" // options only: PVE's default machine
	}
	switch {
	case typ != "" && (!machineTypeRE.MatchString(typ) || len(typ) > 40) && set:
		errs["machine"] = fmt.Sprintf("invalid format - machine type '%s' does not match the regex pattern", typ)
	case strings.HasPrefix(typ, "virt") && set:
		errs["machine"] = fmt.Sprintf("machine type '%s' is for aarch64 guests; KubeVirt runs this VM on q35", typ)
	default:
		d.Machine = &kubevirtv1.Machine{Type: "q35"}
	}
}

// RunningQEMU is the QEMU version status/current reports as
// running-qemu; RunningMachine names machine types after it.
const RunningQEMU = "9.0.2"

// RunningMachine is status/current's running-machine: the machine type
// the instance booted with, which virt-handler reads from the libvirt
// domain into status.machine (libvirt resolves the alias "q35" to a
// versioned type such as RHEL's pc-q35-rhel9.6.0), in qemu-server's form
// pc-q35-<version>+pve<n>. A type with an upstream version keeps it; an
// alias or a RHEL type, which PVE's QEMU does not have, is the current
// version of its family, as PVE resolves an unpinned machine. An
// instance not booted yet (no status.machine) has the spec's type.
func RunningMachine(vmi *kubevirtv1.VirtualMachineInstance) string {
	typ := ""
	switch {
	case vmi == nil:
	case vmi.Status.Machine != nil && vmi.Status.Machine.Type != "":
		typ = vmi.Status.Machine.Type
	case vmi.Spec.Domain.Machine != nil:
		typ = vmi.Spec.Domain.Machine.Type
	}
	if m := versionedMachineRE.FindStringSubmatch(typ); m != nil {
		if m[3] == "" {
			m[3] = "+pve0"
		}
		return m[1] + "-" + m[2] + m[3]
	}
	family := "pc-q35"
	if typ == "pc" || strings.HasPrefix(typ, "pc-i440fx-") {
		family = "pc-i440fx"
	}
	major, rest, _ := strings.Cut(RunningQEMU, ".")
	minor, _, _ := strings.Cut(rest, ".")
	return family + "-" + major + "." + minor + "+pve0"
}

// versionedMachineRE is a machine type with an upstream QEMU version:
// family, version and PVE's +pve<n> suffix.
var versionedMachineRE = regexp.MustCompile(`^(pc-q35|pc-i440fx)-(\d+\.\d+)(\+pve\d+)?$`)

// machineTypeRE is qemu-server's machine type format (PVE::QemuServer::Machine).
var machineTypeRE = regexp.MustCompile(`^(pc|pc(-i440fx)?-\d+(\.\d+)+(\+pve\d+)?(\.pxe)?|q35|pc-q35-\d+(\.\d+)+(\+pve\d+)?(\.pxe)?|virt(?:-\d+(\.\d+)+)?(\+pve\d+)?)$`)

// applyFirmware maps bios and efidisk0 onto the bootloader. bios=ovmf is
// EFI; efidisk0, which keeps the EFI variables on PVE, becomes KubeVirt's
// persistent EFI state, and its pre-enrolled-keys=1 is Secure Boot (which
// needs SMM). With SeaBIOS PVE keeps an EFI disk unused (qemu-server
// reads it only for OVMF): the config keeps it, the VM boots BIOS, and it
// takes effect when bios becomes ovmf.
func applyFirmware(d *kubevirtv1.DomainSpec, vmid int, cfg, errs map[string]string) {
	if b := cfg["bios"]; b != "" && b != "seabios" && b != "ovmf" {
		errs["bios"] = fmt.Sprintf("value '%s' does not have a value in the enumeration 'seabios, ovmf'", b)
	}
	if d.Firmware == nil {
		d.Firmware = &kubevirtv1.Firmware{}
	}
	d.Features = nil
	if cfg["bios"] != "ovmf" {
		d.Firmware.Bootloader = nil
		if v, ok := cfg["efidisk0"]; ok {
			if shown, _, err := efiDisk(v, vmid); err != nil {
				errs["efidisk0"] = err.Error()
			} else {
				cfg["efidisk0"] = shown
			}
		}
		return
	}
	sb := false
	efi := &kubevirtv1.EFI{SecureBoot: &sb}
	if v, ok := cfg["efidisk0"]; ok {
		shown, secureBoot, err := efiDisk(v, vmid)
		if err != nil {
			errs["efidisk0"] = err.Error()
		} else {
			persistent := true
			efi.Persistent = &persistent
			if secureBoot {
				on := true
				efi.SecureBoot = &on
				d.Features = &kubevirtv1.Features{SMM: &kubevirtv1.FeatureState{Enabled: &on}}
			}
			cfg["efidisk0"] = shown
		}
	}
	d.Firmware.Bootloader = &kubevirtv1.Bootloader{EFI: efi}
}

// efiDisk is an efidisk0 value as this mapping stores it: the volume
// vm-<vmid>-efidisk on the storage sent (KubeVirt keeps the state, not a
// disk of the client's choosing), pre-enrolled-keys printed as PVE does
// (1 or 0), size=4M. secureBoot is the pre-enrolled-keys setting.
func efiDisk(v string, vmid int) (shown string, secureBoot bool, err error) {
	dr, err := parseDrive(v)
	if err != nil {
		return "", false, err
	}
	keys, err := parseBoolOption("pre-enrolled-keys", dr.opts)
	if err != nil {
		return "", false, errors.New("invalid format - " + err.Error())
	}
	if keys != nil {
		dr.opts["pre-enrolled-keys"] = boolDigit(*keys)
	}
	storage := strings.SplitN(dr.file, ":", 2)[0]
	dr.file = storage + ":" + EFIVolume(vmid)
	dr.set("size", "4M")
	return dr.String(), keys != nil && *keys, nil
}

// applyTPM maps tpmstate0 onto a persistent TPM: KubeVirt keeps the TPM
// state across reboots as PVE's tpmstate volume does.
func applyTPM(d *kubevirtv1.DomainSpec, vmid int, cfg, errs map[string]string) {
	d.Devices.TPM = nil
	v, ok := cfg["tpmstate0"]
	if !ok {
		return
	}
	shown, err := tpmState(v, vmid)
	if err != nil {
		errs["tpmstate0"] = err.Error()
		return
	}
	persistent := true
	d.Devices.TPM = &kubevirtv1.TPMDevice{Persistent: &persistent}
	cfg["tpmstate0"] = shown
}

// tpmState is a tpmstate0 value as this mapping stores it: the volume
// vm-<vmid>-tpmstate on the storage sent, version v2.0 unless the client
// named one (PVE's default), size=4M.
func tpmState(v string, vmid int) (string, error) {
	dr, err := parseDrive(v)
	if err != nil {
		return "", err
	}
	storage := strings.SplitN(dr.file, ":", 2)[0]
	dr.file = storage + ":" + TPMVolume(vmid)
	if dr.opts["version"] == "" {
		dr.set("version", "v2.0")
	}
	dr.set("size", "4M")
	return dr.String(), nil
}

// applyName checks name (a DNS name, as PVE requires), records it on the
// VM for listings, and makes it the guest's hostname where it can be one.
func applyName(vm *kubevirtv1.VirtualMachine, cfg, errs map[string]string) {
	name := cfg["name"]
	if name != "" && (!dnsNameRE.MatchString(name) || len(name) > 253) {
		errs["name"] = "invalid format - value does not look like a valid DNS name"
	}
	vm.Spec.Template.Spec.Hostname = hostname(name)
	if name != "" {
		vm.Annotations[AnnotationName] = name
	} else {
		delete(vm.Annotations, AnnotationName)
	}
}

// hostname is the guest hostname a PVE name gives: the name itself when
// it is a single DNS label (KubeVirt's hostname is one), lower-cased; ""
// otherwise, leaving KubeVirt's default (the VM's name).
func hostname(name string) string {
	if name != "" && dnsNameRE.MatchString(name) && !strings.Contains(name, ".") && len(name) <= 63 {
		return strings.ToLower(name)
	}
	return ""
}

// checkCloudInit validates the cloud-init keys the Secret is later built
// from (ipconfigN normalised as PVE prints them), so that a bad value is
// refused with the config call instead of failing at boot.
func checkCloudInit(cfg, errs map[string]string) {
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
}

// bootOrder reads boot=order=<dev>;<dev>... into each device's position
// (from 1), for the disks and NICs to carry as KubeVirt boot orders.
// PVE's legacy forms (boot=cdn) order nothing.
func bootOrder(cfg map[string]string) map[string]uint {
	order := map[string]uint{}
	if b := cfg["boot"]; strings.HasPrefix(b, "order=") {
		for i, dev := range strings.Split(strings.TrimPrefix(b, "order="), ";") {
			if dev = strings.TrimSpace(dev); dev != "" {
				order[dev] = uint(i + 1)
			}
		}
	}
	return order
}

// storeConfig writes cfg into the config annotation, which config reads
// show: template follows the VM's label (the label is what KubeVirt and
// the API act on), and the cloud-init password is masked, since it lives
// in the cloud-init Secret only.
func storeConfig(vm *kubevirtv1.VirtualMachine, cfg map[string]string) {
	delete(cfg, "template")
	if vm.Labels[LabelTemplate] == "true" {
		cfg["template"] = "1"
	}
	if v := cfg["cipassword"]; v != "" {
		cfg["cipassword"] = MaskedPassword
	}
	vm.Annotations[AnnotationConfig] = EncodeConfig(cfg)
}
