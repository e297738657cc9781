package translate

import "testing"

func TestConfigKeyPrivilege(t *testing.T) {
	for _, tc := range []struct{ key, value, want string }{
		{"scsi0", "local-lvm:8", PrivConfigDisk},
		{"ide2", "local:iso/debian.iso,media=cdrom", PrivConfigCDROM},
		{"ide2", "none", PrivConfigCDROM},
		{"ide2", "local-lvm:cloudinit", PrivConfigDisk},
		{"unused0", "", PrivConfigDisk},
		{"efidisk0", "local-lvm:1", PrivConfigDisk},
		{"net0", "virtio,bridge=vmbr0", PrivConfigNetwork},
		{"ipconfig0", "ip=dhcp", PrivConfigCloudinit},
		{"ciuser", "debian", PrivConfigCloudinit},
		{"sshkeys", "", PrivConfigCloudinit},
		{"cores", "2", PrivConfigCPU},
		{"cpu", "host", PrivConfigCPU},
		{"memory", "2048", PrivConfigMemory},
		{"balloon", "0", PrivConfigMemory},
		{"machine", "q35", PrivConfigHWType},
		{"bios", "ovmf", PrivConfigHWType},
		{"hostpci0", "0000:01:00", PrivConfigHWType},
		{"serial0", "socket", PrivConfigHWType},
		{"name", "web", PrivConfigOptions},
		{"onboot", "1", PrivConfigOptions},
		{"tags", "a;b", PrivConfigOptions},
		{"description", "x", PrivConfigOptions},
		{"scsi0x", "", PrivConfigOptions},
	} {
		if got := ConfigKeyPrivilege(tc.key, tc.value); got != tc.want {
			t.Errorf("ConfigKeyPrivilege(%q, %q) = %q, want %q", tc.key, tc.value, got, tc.want)
		}
	}
}

func TestAllocatedStorage(t *testing.T) {
	for _, tc := range []struct {
		key, value, want string
		ok               bool
	}{
		{"scsi0", "local-lvm:8", "local-lvm", true},
		{"virtio1", "ceph-block:32,discard=on", "ceph-block", true},
		{"scsi1", "ceph-block:0,import-from=local-lvm:vm-100-disk-0", "ceph-block", true},
		{"efidisk0", "local-lvm:1,efitype=4m", "local-lvm", true},
		{"ide2", "local-lvm:cloudinit", "local-lvm", true},
		{"scsi0", "local-lvm:vm-100-disk-0", "", false},
		{"scsi0", "8", "", false},
		{"ide2", "nfs-iso:iso/debian.iso,media=cdrom", "", false},
		{"unused0", "local-lvm:vm-100-disk-1", "", false},
		{"net0", "virtio,bridge=vmbr0", "", false},
		{"memory", "2048", "", false},
		{"scsi0", ",,", "", false},
	} {
		got, ok := AllocatedStorage(tc.key, tc.value)
		if got != tc.want || ok != tc.ok {
			t.Errorf("AllocatedStorage(%q, %q) = %q, %v; want %q, %v", tc.key, tc.value, got, ok, tc.want, tc.ok)
		}
	}
}
