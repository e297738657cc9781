package translate

import (
	"strings"
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

// TestStateVolumes: the state claim holds the volumes efidisk0 and
// tpmstate0 name (the config's names, so that a listing and the config
// agree), found as KubeVirt finds a VM's claim.
func TestStateVolumes(t *testing.T) {
	yes := true
	spec := func(efi, tpm bool) *kubevirtv1.VirtualMachineInstanceSpec {
		s := &kubevirtv1.VirtualMachineInstanceSpec{}
		if efi {
			s.Domain.Firmware = &kubevirtv1.Firmware{Bootloader: &kubevirtv1.Bootloader{EFI: &kubevirtv1.EFI{Persistent: &yes}}}
		}
		if tpm {
			s.Domain.Devices.TPM = &kubevirtv1.TPMDevice{Persistent: &yes}
		}
		return s
	}
	for _, tc := range []struct {
		efi, tpm bool
		want     string
	}{
		{true, true, "vm-100-efidisk vm-100-tpmstate"},
		{true, false, "vm-100-efidisk"},
		{false, true, "vm-100-tpmstate"},
		{false, false, ""},
	} {
		if got := strings.Join(StateVolumes(100, spec(tc.efi, tc.tpm)), " "); got != tc.want {
			t.Errorf("efi %v tpm %v: %q, want %q", tc.efi, tc.tpm, got, tc.want)
		}
	}
	if cfg, _, _ := efiDisk("local-lvm:1", 100); !strings.HasPrefix(cfg, "local-lvm:"+EFIVolume(100)+",") {
		t.Errorf("efidisk0 %q names another volume than %s", cfg, EFIVolume(100))
	}
	for name, want := range map[string]int{"vm-100-efidisk": 100, "vm-7-tpmstate": 7, "vm-100-disk-0": 0, "vm-x-efidisk": 0, "base-100-efidisk": 0} {
		if got := StateVolumeOwner(name); got != want {
			t.Errorf("StateVolumeOwner(%s) = %d, want %d", name, got, want)
		}
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   string
	}{
		{"persistent-state-for-win-11-x7k2p", map[string]string{StateClaimLabel: "win-11"}, "win-11"},
		{"persistent-state-for-legacy", nil, "legacy"},
		{"vm-100-disk-0", nil, ""},
		{"persistent-state-for", nil, ""},
	} {
		if got := StateClaimOwner(tc.name, tc.labels); got != tc.want {
			t.Errorf("StateClaimOwner(%s, %v) = %q, want %q", tc.name, tc.labels, got, tc.want)
		}
	}
}
