package translate

import (
	"strconv"
	"testing"
)

func TestValidConfigKey(t *testing.T) {
	tests := []struct {
		key  string
		want bool
	}{
		{"name", true},
		{"memory", true},
		{"cores", true},
		{"agent", true},
		{"tags", true},
		{"cipassword", true},
		{"efidisk0", true},
		{"tpmstate0", true},
		{"rng0", true},
		{"audio0", true},
		{"numa", true},
		{"lock", true},
		{"scsi0", true},
		{"scsi30", true},
		{"scsi31", false},
		{"virtio15", true},
		{"virtio16", false},
		{"sata5", true},
		{"sata6", false},
		{"ide3", true},
		{"ide4", false},
		{"net0", true},
		{"net31", true},
		{"net32", false},
		{"ipconfig31", true},
		{"ipconfig32", false},
		{"unused255", true},
		{"unused256", false},
		{"serial3", true},
		{"serial4", false},
		{"parallel2", true},
		{"parallel3", false},
		{"usb13", true},
		{"usb14", false},
		{"hostpci15", true},
		{"hostpci16", false},
		{"numa7", true},
		{"numa8", false},
		{"virtiofs9", true},
		{"virtiofs10", false},
		{"net01", false},
		{"net-1", false},
		{"net", false},
		{"net0a", false},
		{"scsi0000000000000000001", false},
		{"efidisk1", false},
		{"rng1", false},
		{"audio1", false},
		{"NAME", false},
		{"", false},
		{"0", false},
		{"vmid", false},
		{"digest", false},
		{"delete", false},
		{"parent", false},         // snapshot-only
		{"snaptime", false},       // snapshot-only
		{"vmstate", false},        // snapshot-only
		{"runningmachine", false}, // snapshot-only
		{"meta", false},           // read-only
		{"allow-ksm", false},      // PVE 9 only
		{"intel-tdx", false},      // PVE 9 only
	}
	for _, tt := range tests {
		if got := ValidConfigKey(tt.key); got != tt.want {
			t.Errorf("ValidConfigKey(%q) = %v, want %v", tt.key, got, tt.want)
		}
	}
	// Every slot of every indexed key is valid.
	for prefix, slots := range indexedConfigKeys {
		for i := 0; i < slots; i++ {
			if key := prefix + strconv.Itoa(i); !ValidConfigKey(key) {
				t.Errorf("ValidConfigKey(%q) = false", key)
			}
		}
	}
}
