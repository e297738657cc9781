package translate

import kubevirtv1 "kubevirt.io/api/core/v1"

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
	if spec == nil {
		return false
	}
	if tpm := spec.Domain.Devices.TPM; tpm != nil && (tpm.Enabled == nil || *tpm.Enabled) &&
		tpm.Persistent != nil && *tpm.Persistent {
		return true
	}
	fw := spec.Domain.Firmware
	return fw != nil && fw.Bootloader != nil && fw.Bootloader.EFI != nil &&
		fw.Bootloader.EFI.Persistent != nil && *fw.Bootloader.EFI.Persistent
}
