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
