package translate

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// ConfigView is GET …/config: the stored PVE keys with live KubeVirt facts
// laid over them, integers as numbers, and a digest of the whole. claims
// describes the claims of the VM's namespace (the storage and size of
// disks not made through this API); nil knows none.
func ConfigView(vm *kubevirtv1.VirtualMachine, claims ClaimLookup) map[string]any {
	cfg, _ := configStrings(vm, claims)
	out := typedConfig(cfg)
	out["digest"] = ConfigDigest(cfg)
	return out
}

// typedConfig is cfg with the integer keys as numbers.
func typedConfig(cfg map[string]string) map[string]any {
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
	return out
}

// configStrings is the config as strings: stored keys overlaid with what
// the VM object says now (so a kubectl edit shows up). Like PVE, keys at
// their default are shown only when they were set. Every disk of the spec
// shows: those made from the config with their stored value, the others
// (foreign, see specDisk) with a value derived from their volume; they
// are returned too, keyed as the config shows them.
func configStrings(vm *kubevirtv1.VirtualMachine, claims ClaimLookup) (map[string]string, []specDisk) {
	cfg := StoredConfig(vm)
	// Made outside this API (no stored config, not an empty one: a VM made
	// with nothing but a vmid has none of these keys in PVE): show what it
	// has.
	_, made := vm.Annotations[AnnotationConfig]
	adopted := !made
	sds := specDisks(vm, cfg)
	for _, s := range sds {
		if !s.managed {
			cfg[s.key] = foreignValue(vm, s, claims)
		}
	}
	overlay := func(key, live, def string) {
		if _, set := cfg[key]; set || adopted || live != def {
			cfg[key] = live
		}
	}
	sockets, cores := CPUTopology(vm)
	overlay("sockets", strconv.Itoa(sockets), "1")
	overlay("cores", strconv.Itoa(cores), "1")
	if mem := MemoryBytes(vm); mem > 0 {
		overlay("memory", strconv.FormatInt(mem>>20, 10), "512")
	}
	// A VM made through this API without a name has none in its config, as
	// in PVE; one made outside it shows its Kubernetes name.
	if n := vm.Annotations[AnnotationName]; n != "" {
		cfg["name"] = n
	} else if adopted {
		cfg["name"] = vm.Name
	} else if cfg["name"] == "" {
		delete(cfg, "name")
	}
	if vm.Labels[LabelTemplate] == "true" {
		cfg["template"] = "1"
	}
	if adopted {
		cfg["agent"] = AgentConfig(vm)
	}
	qemuServerForms(cfg)
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
	return cfg, sds
}

// qemuServerForms rewrites stored values the way qemu-server reads them
// back from its config file: write_vm_config leaves out a false
// description ("" or "0") and parse_vm_config trims trailing whitespace
// off the others; print_drive writes an empty or host CD-ROM drive with
// its volume first (bpg sends file=none,media=cdrom and reads back none).
func qemuServerForms(cfg map[string]string) {
	if d, ok := cfg["description"]; ok {
		if d == "" || d == "0" {
			delete(cfg, "description")
		} else {
			cfg["description"] = strings.TrimRight(d, " \t\n\r\f\v")
		}
	}
	for k, v := range cfg {
		if !diskKeyRE.MatchString(k) {
			continue
		}
		if d, err := parseDrive(v); err == nil && d.opts["media"] == "cdrom" && (d.file == "none" || d.file == "cdrom") {
			cfg[k] = d.String()
		}
	}
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

// PendingView is GET …/pending: every config key with its value; keys
// KubeVirt applies only at the next start (the running instance still
// has the old CPU, memory or device set) carry the new value as "pending",
// devices removed from the config carry delete:1.
func PendingView(vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance, claims ClaimLookup) []PendingEntry {
	cfg, sds := configStrings(vm, claims)
	view := typedConfig(cfg)
	running := map[string]any{}
	devices := map[string]bool{}
	if vmi != nil && !vmi.IsFinal() && vm.Spec.Template != nil {
		live := vm.DeepCopy()
		live.Spec.Template.Spec = *vmi.Spec.DeepCopy()
		instanceHas(&live.Spec.Template.Spec, vmi)
		lcfg, _ := configStrings(live, claims)
		lv := typedConfig(lcfg)
		for _, k := range []string{"cores", "sockets", "memory"} {
			running[k] = lv[k]
		}
		if restartRequired(vm) {
			restartOnly(running, vm, vmi)
		}
		// The instance's disks under the keys the VM shows them with.
		keyOf := map[string]string{}
		for _, s := range sds {
			keyOf[s.disk.Name] = s.key
		}
		for _, d := range vmi.Spec.Domain.Devices.Disks {
			if k, ok := keyOf[d.Name]; ok {
				devices[k] = true
			} else {
				devices[d.Name] = true
			}
		}
		for _, i := range vmi.Spec.Domain.Devices.Interfaces {
			devices[i.Name] = true
		}
	}
	keys := orderedKeys(view)
	out := make([]PendingEntry, 0, len(keys))
	for _, k := range keys {
		e := PendingEntry{Key: k, Value: view[k]}
		if old, ok := running[k]; ok && fmt.Sprint(old) != fmt.Sprint(view[k]) {
			e.Value, e.Pending = old, view[k]
		}
		if len(devices) > 0 && (diskKeyRE.MatchString(k) || netKeyRE.MatchString(k)) && !devices[k] && !isEmptyCDROM(fmt.Sprint(view[k])) {
			e.Value, e.Pending = nil, view[k]
		}
		out = append(out, e)
	}
	for d := range devices {
		if _, ok := view[d]; !ok && (diskKeyRE.MatchString(d) || netKeyRE.MatchString(d)) {
			out = append(out, PendingEntry{Key: d, Delete: 1})
		}
	}
	return out
}

// instanceHas sets, in spec (the instance's), the CPUs and memory the
// guest has now. Under KubeVirt's LiveUpdate rollout a change of sockets
// or guest memory is patched into the instance's spec at once, but the
// guest has it only once virt-handler has hot-plugged it, which takes a
// live migration (or never happens, without the LiveMigrate workload
// update method, until the next start): status.currentCPUTopology and
// status.memory.guestCurrent are what it has.
func instanceHas(spec *kubevirtv1.VirtualMachineInstanceSpec, vmi *kubevirtv1.VirtualMachineInstance) {
	if t := vmi.Status.CurrentCPUTopology; t != nil && spec.Domain.CPU != nil {
		if t.Sockets > 0 {
			spec.Domain.CPU.Sockets = t.Sockets
		}
		if t.Cores > 0 {
			spec.Domain.CPU.Cores = t.Cores
		}
		if t.Threads > 0 {
			spec.Domain.CPU.Threads = t.Threads
		}
	}
	if m := vmi.Status.Memory; m != nil && m.GuestCurrent != nil && spec.Domain.Memory != nil && spec.Domain.Memory.Guest != nil {
		q := m.GuestCurrent.DeepCopy()
		spec.Domain.Memory.Guest = &q
	}
}

// restartRequired tells whether KubeVirt says the VM's template has
// changes it applies only at the next start (condition RestartRequired).
func restartRequired(vm *kubevirtv1.VirtualMachine) bool {
	for _, c := range vm.Status.Conditions {
		if c.Type == kubevirtv1.VirtualMachineRestartRequired && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// restartOnly adds to running the keys KubeVirt applies only at restart
// whose running value the instance's spec tells, when the VM has
// RestartRequired: the CPU model (cpu) and the firmware (bios).
func restartOnly(running map[string]any, vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) {
	want, have := &vm.Spec.Template.Spec.Domain, &vmi.Spec.Domain
	model := func(d *kubevirtv1.DomainSpec) string {
		if d.CPU != nil {
			return d.CPU.Model
		}
		return ""
	}
	if model(want) != model(have) {
		switch {
		case model(have) == kubevirtv1.CPUModeHostPassthrough:
			running["cpu"] = "host"
		default:
			// KubeVirt's default model: PVE's default, no cpu key.
			running["cpu"] = nil
		}
	}
	efi := func(d *kubevirtv1.DomainSpec) bool {
		return d.Firmware != nil && d.Firmware.Bootloader != nil && d.Firmware.Bootloader.EFI != nil
	}
	if efi(want) != efi(have) {
		running["bios"] = map[bool]any{true: "ovmf", false: nil}[efi(have)]
	}
}

func isEmptyCDROM(v string) bool {
	return strings.HasPrefix(v, "none,") || strings.HasPrefix(v, "cdrom,")
}

// LiveUpdatable tells whether the change from VM old to VM vm touches
// what KubeVirt's LiveUpdate rollout hot-plugs into a running instance:
// CPU sockets or guest memory.
func LiveUpdatable(old, vm *kubevirtv1.VirtualMachine) bool {
	os, _ := CPUTopology(old)
	ns, _ := CPUTopology(vm)
	return os != ns || MemoryBytes(old) != MemoryBytes(vm)
}

// LiveUpdateTaken tells whether KubeVirt has done, for now, what it does
// with vm's CPU sockets and guest memory while instance vmi runs: patched
// them into the instance's spec (the guest gets them on the next live
// migration), or said that they need a restart (RestartRequired), or has
// nothing to do until a hot-plug or migration under way ends (its VM
// controller retries then). KubeVirt v1.8.0 pkg/virt-controller/watch/vm
// handleCPUChangeRequest, handleMemoryHotplugRequest.
func LiveUpdateTaken(vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) bool {
	if vmi == nil || vmi.IsFinal() || vm.Spec.Template == nil || restartRequired(vm) {
		return true
	}
	busy := func(c kubevirtv1.VirtualMachineInstanceConditionType) bool {
		if ms := vmi.Status.MigrationState; ms != nil && !ms.Completed && !ms.Failed {
			return true
		}
		for _, cond := range vmi.Status.Conditions {
			if cond.Type == c && cond.Status == corev1.ConditionTrue {
				return true
			}
		}
		return false
	}
	want, have := &vm.Spec.Template.Spec.Domain, &vmi.Spec.Domain
	cpu := want.CPU == nil || have.CPU == nil || want.CPU.Sockets == have.CPU.Sockets || busy(kubevirtv1.VirtualMachineInstanceVCPUChange)
	mem := want.Memory == nil || want.Memory.Guest == nil || have.Memory == nil || have.Memory.Guest == nil ||
		want.Memory.Guest.Equal(*have.Memory.Guest) || vmi.Status.Memory == nil || vmi.Status.Memory.GuestCurrent == nil ||
		busy(kubevirtv1.VirtualMachineInstanceMemoryChange)
	return cpu && mem
}
