package translate

import (
	"regexp"
	"testing"
)

func TestGenerateMAC(t *testing.T) {
	tests := []struct {
		seed []byte
		want string
	}{
		// SHA-256("") starts e3 b0 c4, SHA-256("abc") starts ba 78 16.
		{nil, "BC:24:11:E3:B0:C4"},
		{[]byte{}, "BC:24:11:E3:B0:C4"},
		{[]byte("abc"), "BC:24:11:BA:78:16"},
	}
	for _, tt := range tests {
		if got := GenerateMAC(tt.seed); got != tt.want {
			t.Errorf("GenerateMAC(%q) = %q, want %q", tt.seed, got, tt.want)
		}
	}
	macRE := regexp.MustCompile(`^BC:24:11(:[0-9A-F]{2}){3}$`)
	seen := map[string]bool{}
	for i := 0; i < 256; i++ {
		m := GenerateMAC([]byte{byte(i)})
		if !macRE.MatchString(m) || !validUnicastMAC(m) {
			t.Errorf("GenerateMAC(%d) = %q is not a valid PVE MAC", i, m)
		}
		if _, err := ParseNetSpec("virtio=" + m); err != nil {
			t.Errorf("GenerateMAC(%d) = %q is rejected by ParseNetSpec: %v", i, m, err)
		}
		seen[m] = true
	}
	if len(seen) < 250 {
		t.Errorf("GenerateMAC produced only %d distinct MACs for 256 seeds", len(seen))
	}
}
