package translate

import (
	"errors"
	"strconv"
	"testing"
)

func TestParseVMID(t *testing.T) {
	const badFormat = "invalid format - value does not look like a valid VM ID"
	tests := []struct {
		in      string
		want    int
		wantErr string
	}{
		{in: "100", want: 100},
		{in: "101", want: 101},
		{in: "4242", want: 4242},
		{in: "999999999", want: 999999999},
		{in: "99", wantErr: badFormat},
		{in: "0", wantErr: badFormat},
		{in: "1000000000", wantErr: badFormat},
		{in: "0100", wantErr: badFormat},
		{in: "+100", wantErr: badFormat},
		{in: "-100", wantErr: badFormat},
		{in: "", wantErr: "type check ('integer') failed - got ''"},
		{in: "abc", wantErr: "type check ('integer') failed - got 'abc'"},
		{in: " 100", wantErr: "type check ('integer') failed - got ' 100'"},
		{in: "100 ", wantErr: "type check ('integer') failed - got '100 '"},
		{in: "100\n", wantErr: "type check ('integer') failed - got '100\n'"},
		{in: "1e3", wantErr: "type check ('integer') failed - got '1e3'"},
		{in: "10.0", wantErr: "type check ('integer') failed - got '10.0'"},
		{in: "+", wantErr: "type check ('integer') failed - got '+'"},
		{in: "１００", wantErr: "type check ('integer') failed - got '１００'"},
	}
	for _, tt := range tests {
		got, err := ParseVMID(tt.in)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("ParseVMID(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			if !errors.Is(err, ErrInvalidVMID) {
				t.Errorf("ParseVMID(%q) error %v does not wrap ErrInvalidVMID", tt.in, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseVMID(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func TestVMIDFromLabels(t *testing.T) {
	tests := []struct {
		name   string
		labels map[string]string
		want   int
		wantOK bool
	}{
		{name: "nil map", labels: nil},
		{name: "missing", labels: map[string]string{"app": "x"}},
		{name: "valid", labels: map[string]string{LabelVMID: "123"}, want: 123, wantOK: true},
		{name: "max", labels: map[string]string{LabelVMID: "999999999"}, want: 999999999, wantOK: true},
		{name: "too small", labels: map[string]string{LabelVMID: "99"}},
		{name: "leading zero", labels: map[string]string{LabelVMID: "0123"}},
		{name: "junk", labels: map[string]string{LabelVMID: "vm-1"}},
		{name: "empty", labels: map[string]string{LabelVMID: ""}},
	}
	for _, tt := range tests {
		got, ok := VMIDFromLabels(tt.labels)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("%s: VMIDFromLabels = %d, %v; want %d, %v", tt.name, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestFallbackVMID(t *testing.T) {
	tests := []struct {
		ns, name string
		probe    int
		want     int
	}{
		// Golden values pin the hash so that ids stay stable across releases.
		{ns: "default", name: "vm1", probe: 0, want: fallbackGolden("default/vm1")},
		{ns: "default", name: "vm1", probe: 1, want: fallbackGolden("default/vm1#1")},
		{ns: "default", name: "vm1", probe: -3, want: fallbackGolden("default/vm1")},
		{ns: "", name: "", probe: 0, want: fallbackGolden("/")},
	}
	for _, tt := range tests {
		got := FallbackVMID(tt.ns, tt.name, tt.probe)
		if got != tt.want {
			t.Errorf("FallbackVMID(%q, %q, %d) = %d, want %d", tt.ns, tt.name, tt.probe, got, tt.want)
		}
		if got < MinVMID || got > MaxVMID {
			t.Errorf("FallbackVMID(%q, %q, %d) = %d out of range", tt.ns, tt.name, tt.probe, got)
		}
		if _, err := ParseVMID(strconv.Itoa(got)); err != nil {
			t.Errorf("FallbackVMID result %d does not parse: %v", got, err)
		}
	}
	// Literal golden value computed outside Go: FNV-1a 64 of "default/vm1" is
	// 0xa3fff708282f72d5, and 100 + that % 999999900 = 393142517.
	if got := FallbackVMID("default", "vm1", 0); got != 393142517 {
		t.Errorf("FallbackVMID(default, vm1, 0) = %d, want 393142517", got)
	}
	if FallbackVMID("a", "b/c", 0) == FallbackVMID("a", "b/c", 1) {
		t.Error("probe does not change the id")
	}
	if FallbackVMID("ns1", "vm", 0) == FallbackVMID("ns2", "vm", 0) {
		t.Error("namespace does not change the id")
	}
}

// fallbackGolden is an independent FNV-1a 64 implementation for the tests.
func fallbackGolden(text string) int {
	h := uint64(14695981039346656037)
	for i := 0; i < len(text); i++ {
		h ^= uint64(text[i])
		h *= 1099511628211
	}
	return MinVMID + int(h%uint64(MaxVMID-MinVMID+1))
}

func FuzzParseVMID(f *testing.F) {
	for _, s := range []string{"100", "99", "999999999", "1000000000", "+100", "0100", "abc", "", "-5", "1e3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseVMID(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidVMID) {
				t.Fatalf("error %v does not wrap ErrInvalidVMID", err)
			}
			return
		}
		if n < MinVMID || n > MaxVMID {
			t.Fatalf("ParseVMID(%q) = %d out of range", s, n)
		}
		if strconv.Itoa(n) != s {
			t.Fatalf("ParseVMID(%q) = %d accepted a non-canonical form", s, n)
		}
	})
}
