package translate

import (
	"regexp"
	"strings"
)

// Privileges that PVE checks per config key (qemu-server's
// check_vm_modify_config_perm): each key belongs to one VM.Config.*
// privilege, so that e.g. a PVEVMUser may swap the CD but not add a disk.
const (
	PrivConfigDisk      = "VM.Config.Disk"
	PrivConfigCDROM     = "VM.Config.CDROM"
	PrivConfigCPU       = "VM.Config.CPU"
	PrivConfigMemory    = "VM.Config.Memory"
	PrivConfigNetwork   = "VM.Config.Network"
	PrivConfigHWType    = "VM.Config.HWType"
	PrivConfigOptions   = "VM.Config.Options"
	PrivConfigCloudinit = "VM.Config.Cloudinit"
)

var (
	privDiskKeyRE = regexp.MustCompile(`^(?:ide|sata|scsi|virtio|unused)\d+$|^(?:efidisk0|tpmstate0)$`)
	ipconfigKeyRE = regexp.MustCompile(`^ipconfig\d+$`)
	hwKeyRE       = regexp.MustCompile(`^(?:usb|hostpci|serial|parallel|numa|virtiofs)\d+$`)
)

var keyPrivs = map[string]string{
	"cores": PrivConfigCPU, "sockets": PrivConfigCPU, "cpu": PrivConfigCPU, "vcpus": PrivConfigCPU,
	"cpulimit": PrivConfigCPU, "cpuunits": PrivConfigCPU, "affinity": PrivConfigCPU,
	"memory": PrivConfigMemory, "balloon": PrivConfigMemory, "shares": PrivConfigMemory,
	"ciuser": PrivConfigCloudinit, "cipassword": PrivConfigCloudinit, "citype": PrivConfigCloudinit,
	"ciupgrade": PrivConfigCloudinit, "cicustom": PrivConfigCloudinit, "sshkeys": PrivConfigCloudinit,
	"nameserver": PrivConfigCloudinit, "searchdomain": PrivConfigCloudinit,
	"acpi": PrivConfigHWType, "hotplug": PrivConfigHWType, "kvm": PrivConfigHWType, "machine": PrivConfigHWType,
	"scsihw": PrivConfigHWType, "smbios1": PrivConfigHWType, "tablet": PrivConfigHWType, "tdf": PrivConfigHWType,
	"vga": PrivConfigHWType, "watchdog": PrivConfigHWType, "bios": PrivConfigHWType, "audio0": PrivConfigHWType,
	"rng0": PrivConfigHWType, "ivshmem": PrivConfigHWType, "amd-sev": PrivConfigHWType, "arch": PrivConfigHWType,
	"numa": PrivConfigHWType, "hugepages": PrivConfigHWType, "keephugepages": PrivConfigHWType,
	"spice_enhancements": PrivConfigHWType, "vmgenid": PrivConfigHWType, "args": PrivConfigHWType,
}

// ConfigKeyPrivilege is the privilege PVE requires to set or delete key
// on a VM. value is the key's new value, if any: a drive whose media is
// cdrom needs only VM.Config.CDROM.
func ConfigKeyPrivilege(key, value string) string {
	switch {
	case privDiskKeyRE.MatchString(key):
		if isCDROMValue(value) {
			return PrivConfigCDROM
		}
		return PrivConfigDisk
	case netKeyRE.MatchString(key):
		return PrivConfigNetwork
	case ipconfigKeyRE.MatchString(key):
		return PrivConfigCloudinit
	case hwKeyRE.MatchString(key):
		return PrivConfigHWType
	}
	if p, ok := keyPrivs[key]; ok {
		return p
	}
	return PrivConfigOptions
}

// isCDROMValue tells a CD-ROM drive value (media=cdrom, or PVE's "none"
// and "cdrom" shorthands) from a disk.
func isCDROMValue(v string) bool {
	if v == "none" || v == "cdrom" {
		return true
	}
	for _, part := range strings.Split(v, ",") {
		if part == "media=cdrom" {
			return true
		}
	}
	return false
}

// AllocatedStorage names the storage a config key allocates new space on,
// for PVE's Datastore.AllocateSpace check: a new disk `<storage>:<size>`
// (also with import-from), an EFI or TPM state disk, or a cloud-init
// drive. Re-attaching an existing volume, CD-ROMs and other keys allocate
// nothing.
func AllocatedStorage(key, value string) (string, bool) {
	if !privDiskKeyRE.MatchString(key) || strings.HasPrefix(key, "unused") || isCDROMValue(value) {
		return "", false
	}
	d, err := parseDrive(value)
	if err != nil {
		return "", false
	}
	if m := newDiskRE.FindStringSubmatch(d.file); m != nil && m[2] != "" {
		return m[2], true
	}
	if st, vol, ok := strings.Cut(d.file, ":"); ok && st != "" && vol == "cloudinit" {
		return st, true
	}
	return "", false
}
