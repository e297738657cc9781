package translate

import (
	"testing"
)

func TestNormalizeContentFilename(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"debian-12.7.0-amd64-netinst.iso", "debian-12.7.0-amd64-netinst.iso"},
		{"my image (1).iso", "my_image__1_.iso"},
		{"../../etc/passwd.iso", "passwd.iso"},
		{`C:\Users\me\win11.iso`, "win11.iso"},
		{"trailing.iso\n", "trailing.iso"},
		{"ümlaut.iso", "_mlaut.iso"}, // per character: pveproxy decodes parameters as UTF-8
		{"", ""},
	} {
		if got := NormalizeContentFilename(tc.in); got != tc.want {
			t.Errorf("NormalizeContentFilename(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestValidISOFilename(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"debian.iso", true},
		{"WIN.ISO", true},
		{"disk.img", true},
		{"a.iso", true},
		{".iso", false},
		{"debian.iso.gz", false},
		{"debian.qcow2", false},
		{"debian", false},
		{"", false},
	} {
		if got := ValidISOFilename(tc.name); got != tc.ok {
			t.Errorf("ValidISOFilename(%q) = %v, want %v", tc.name, got, tc.ok)
		}
	}
}

func TestISOClaimBytes(t *testing.T) {
	for _, tc := range []struct{ size, want int64 }{
		{0, DefaultISOClaimBytes},
		{-1, DefaultISOClaimBytes},
		{1, GiB},                          // 1 B + 256 MiB
		{700 * MiB, GiB},                  // 700 + 256 MiB
		{800 * MiB, 2 * GiB},              // 800 + 256 MiB > 1 GiB
		{3*GiB + 700*MiB, 5 * GiB},        // + 10 % = 4.07 GiB
		{10 * GiB, 11 * GiB},              // + exactly 1 GiB
		{10*GiB + 1, 12 * GiB},            // just above
		{1 << 62, 1 << 62},                // absurd sizes do not overflow
		{2*GiB - 256*MiB, 2 * GiB},        // margin exactly fills the GiB
		{2*GiB - 256*MiB + 1, 3 * GiB},    // one byte more needs another
		{5 * 1000 * 1000 * 1000, 6 * GiB}, // a "5 GB" image: 4.66 GiB + 10 %
		{4_700_372_992, 5 * GiB},          // a DVD: 4.38 GiB + 10 % = 4.81 GiB
		{DefaultISOClaimBytes, 9 * GiB},   // known sizes are not capped
		{100 * MiB, GiB},                  // small images still get a GiB
		{GiB, 2 * GiB},                    // 1 GiB + 256 MiB
	} {
		if got := ISOClaimBytes(tc.size); got != tc.want {
			t.Errorf("ISOClaimBytes(%d) = %d (%.2f GiB), want %d (%.2f GiB)", tc.size, got, float64(got)/float64(GiB), tc.want, float64(tc.want)/float64(GiB))
		}
	}
}
