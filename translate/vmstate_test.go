package translate

import (
	"testing"

	kubevirtv1 "kubevirt.io/api/core/v1"
)

func TestHasPersistentState(t *testing.T) {
	yes, no := true, false
	efi := func(p *bool) *kubevirtv1.Firmware {
		return &kubevirtv1.Firmware{Bootloader: &kubevirtv1.Bootloader{EFI: &kubevirtv1.EFI{Persistent: p}}}
	}
	for _, tc := range []struct {
		name string
		fw   *kubevirtv1.Firmware
		tpm  *kubevirtv1.TPMDevice
		want bool
	}{
		{"bios", nil, nil, false},
		{"efi without efidisk0", efi(nil), nil, false},
		{"efidisk0", efi(&yes), nil, true},
		{"efi not persistent", efi(&no), nil, false},
		{"tpmstate0", nil, &kubevirtv1.TPMDevice{Persistent: &yes}, true},
		{"tpm without state", nil, &kubevirtv1.TPMDevice{}, false},
		{"tpm disabled", nil, &kubevirtv1.TPMDevice{Enabled: &no, Persistent: &yes}, false},
	} {
		spec := &kubevirtv1.VirtualMachineInstanceSpec{}
		spec.Domain.Firmware, spec.Domain.Devices.TPM = tc.fw, tc.tpm
		if got := HasPersistentState(spec); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if HasPersistentState(nil) {
		t.Error("nil spec")
	}
}
