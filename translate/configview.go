package translate

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"

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
		lcfg, _ := configStrings(live, claims)
		lv := typedConfig(lcfg)
		for _, k := range []string{"cores", "sockets", "memory"} {
			running[k] = lv[k]
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

func isEmptyCDROM(v string) bool {
	return strings.HasPrefix(v, "none,") || strings.HasPrefix(v, "cdrom,")
}
