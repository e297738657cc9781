package translate

import (
	"strconv"
	"strings"
)

// configKeys are the non-indexed keys that qemu-server 8.x accepts in a VM
// config through the API (json_config_properties without the snapshot-only
// keys parent, snaptime, vmstate, runningmachine, runningcpu and meta).
var configKeys = map[string]bool{
	"acpi": true, "affinity": true, "agent": true, "amd-sev": true, "arch": true,
	"args": true, "audio0": true, "autostart": true, "balloon": true, "bios": true,
	"boot": true, "bootdisk": true, "cdrom": true, "cicustom": true, "cipassword": true,
	"citype": true, "ciupgrade": true, "ciuser": true, "cores": true, "cpu": true,
	"cpulimit": true, "cpuunits": true, "description": true, "efidisk0": true,
	"freeze": true, "hookscript": true, "hotplug": true, "hugepages": true,
	"ivshmem": true, "keephugepages": true, "keyboard": true, "kvm": true,
	"localtime": true, "lock": true, "machine": true, "memory": true,
	"migrate_downtime": true, "migrate_speed": true, "name": true, "nameserver": true,
	"numa": true, "onboot": true, "ostype": true, "protection": true, "reboot": true,
	"rng0": true, "scsihw": true, "searchdomain": true, "shares": true, "smbios1": true,
	"smp": true, "sockets": true, "spice_enhancements": true, "sshkeys": true,
	"startdate": true, "startup": true, "tablet": true, "tags": true, "tdf": true,
	"template": true, "tpmstate0": true, "vcpus": true, "vga": true, "vmgenid": true,
	"vmstatestorage": true, "watchdog": true,
}

// indexedConfigKeys maps the prefix of each indexed config key to its
// number of slots in qemu-server 8.x (index 0 … n-1).
var indexedConfigKeys = map[string]int{
	"ide":      4,   // $MAX_IDE_DISKS
	"sata":     6,   // $MAX_SATA_DISKS
	"scsi":     31,  // $MAX_SCSI_DISKS
	"virtio":   16,  // $MAX_VIRTIO_DISKS
	"unused":   256, // $MAX_UNUSED_DISKS
	"net":      32,  // $MAX_NETS
	"ipconfig": 32,  // one per net
	"serial":   4,   // $MAX_SERIAL_PORTS
	"parallel": 3,   // $MAX_PARALLEL_PORTS
	"usb":      14,  // $MAX_USB_DEVICES
	"hostpci":  16,  // $MAX_HOSTPCI_DEVICES
	"numa":     8,   // $MAX_NUMA
	"virtiofs": 10,  // $MAX_VIRTIOFS
}

// ValidConfigKey reports whether key is a VM config key that PVE 8 accepts
// on create and config updates, so that unknown keys can be refused with
// PVE's 400 instead of being stored. Indexed keys must use a canonical
// decimal index (no leading zeros) within PVE's limits, e.g. scsi0…scsi30,
// virtio0…virtio15, sata0…sata5, ide0…ide3, net0…net31, ipconfig0…ipconfig31.
func ValidConfigKey(key string) bool {
	if configKeys[key] {
		return true
	}
	i := strings.IndexAny(key, "0123456789")
	if i <= 0 {
		return false
	}
	slots, ok := indexedConfigKeys[key[:i]]
	if !ok {
		return false
	}
	idx := key[i:]
	if !allDigits(idx) || (len(idx) > 1 && idx[0] == '0') || len(idx) > 3 {
		return false
	}
	n, err := strconv.Atoi(idx)
	return err == nil && n < slots
}
