package translate

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	kubevirtv1 "kubevirt.io/api/core/v1"
)

// StateClaimLabel is the label KubeVirt finds a VM's backend-storage claim
// by (the persistent EFI variables and TPM state PVE keeps on efidisk0 and
// tpmstate0); its value is the VM's name (kubevirt
// pkg/storage/backend-storage PVCPrefix).
const StateClaimLabel = "persistent-state-for"

// StateClaimName is the claim name KubeVirt also takes as a VM's state
// claim when no claim carries the label (its legacy name, which it then
// labels); KubeVirt's own claims take it as a generateName prefix.
func StateClaimName(vm string) string {
	return StateClaimLabel + "-" + vm
}

// HasPersistentState tells whether KubeVirt keeps state of a VM with spec
// in a backend-storage claim: a persistent EFI or a persistent TPM (as
// backend-storage's IsBackendStorageNeeded, whose third reason, changed
// block tracking, this mapping never turns on).
func HasPersistentState(spec *kubevirtv1.VirtualMachineInstanceSpec) bool {
	return persistentEFI(spec) || persistentTPM(spec)
}

func persistentTPM(spec *kubevirtv1.VirtualMachineInstanceSpec) bool {
	if spec == nil {
		return false
	}
	tpm := spec.Domain.Devices.TPM
	return tpm != nil && (tpm.Enabled == nil || *tpm.Enabled) && tpm.Persistent != nil && *tpm.Persistent
}

func persistentEFI(spec *kubevirtv1.VirtualMachineInstanceSpec) bool {
	if spec == nil {
		return false
	}
	fw := spec.Domain.Firmware
	return fw != nil && fw.Bootloader != nil && fw.Bootloader.EFI != nil &&
		fw.Bootloader.EFI.Persistent != nil && *fw.Bootloader.EFI.Persistent
}

// EFIVolume and TPMVolume are the volumes efidisk0 and tpmstate0 name for
// VM vmid: KubeVirt keeps both in the VM's one state claim, not in disks
// of the client's choosing.
func EFIVolume(vmid int) string { return fmt.Sprintf("vm-%d-efidisk", vmid) }

// TPMVolume: see EFIVolume.
func TPMVolume(vmid int) string { return fmt.Sprintf("vm-%d-tpmstate", vmid) }

// stateVolumeRE matches EFIVolume and TPMVolume names.
var stateVolumeRE = regexp.MustCompile(`^vm-(\d+)-(?:efidisk|tpmstate)$`)

// StateVolumeOwner returns the vmid whose EFI/TPM state volume name is
// (EFIVolume, TPMVolume), or 0.
func StateVolumeOwner(name string) int {
	m := stateVolumeRE.FindStringSubmatch(name)
	if m == nil {
		return 0
	}
	id, _ := strconv.Atoi(m[1])
	return id
}

// StateVolumes lists the volumes the state claim of VM vmid (its spec)
// holds, as its config names them: efidisk0's, then tpmstate0's.
func StateVolumes(vmid int, spec *kubevirtv1.VirtualMachineInstanceSpec) []string {
	var out []string
	if persistentEFI(spec) {
		out = append(out, EFIVolume(vmid))
	}
	if persistentTPM(spec) {
		out = append(out, TPMVolume(vmid))
	}
	return out
}

// StateClaimOwner names the VM whose EFI/TPM state a claim in its
// namespace may hold, as KubeVirt's backend storage finds a VM's claim:
// by its StateClaimLabel, else by the legacy name (StateClaimName). ""
// for a claim that is neither; the caller checks that the VM keeps
// state.
func StateClaimOwner(name string, labels map[string]string) string {
	if vm := labels[StateClaimLabel]; vm != "" {
		return vm
	}
	vm, _ := strings.CutPrefix(name, StateClaimLabel+"-")
	if vm == name {
		return ""
	}
	return vm
}
