package translate

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestParseDiskSize(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr string
	}{
		{in: "0", want: 0},
		{in: "512", want: 512},
		{in: "1K", want: 1024},
		{in: "4M", want: 4 << 20},
		{in: "32G", want: 32 << 30},
		{in: "2T", want: 2 << 40},
		{in: "1KiB", want: 1024},
		{in: "1MiB", want: 1 << 20},
		{in: "8GiB", want: 8 << 30},
		{in: "1TiB", want: 1 << 40},
		{in: "1.5K", want: 1536},
		{in: "1.5G", want: 1610612736},
		{in: "0.001G", want: 1073741},  // truncated like Perl's int()
		{in: "1.1G", want: 1181116006}, // 1181116006.4
		{in: "10.0", want: 10},
		{in: "007G", want: 7 << 30},
		{in: "8388607T", want: 8388607 << 40},
		{in: "9223372036854775807", want: math.MaxInt64},
		{in: "", wantErr: "value does not look like a valid disk size: "},
		{in: "G", wantErr: "value does not look like a valid disk size: G"},
		{in: "1g", wantErr: "value does not look like a valid disk size: 1g"},
		{in: "1GB", wantErr: "value does not look like a valid disk size: 1GB"},
		{in: "1Gi", wantErr: "value does not look like a valid disk size: 1Gi"},
		{in: "1iB", wantErr: "value does not look like a valid disk size: 1iB"},
		{in: "1P", wantErr: "value does not look like a valid disk size: 1P"},
		{in: "+1G", wantErr: "value does not look like a valid disk size: +1G"},
		{in: "-1", wantErr: "value does not look like a valid disk size: -1"},
		{in: ".5G", wantErr: "value does not look like a valid disk size: .5G"},
		{in: "1.G", wantErr: "value does not look like a valid disk size: 1.G"},
		{in: "1 G", wantErr: "value does not look like a valid disk size: 1 G"},
		{in: "1G\n", wantErr: "value does not look like a valid disk size: 1G\n"},
		{in: "8388608T", wantErr: "value does not look like a valid disk size: 8388608T (too large)"},
		{in: "9223372036854775808", wantErr: "value does not look like a valid disk size: 9223372036854775808 (too large)"},
	}
	for _, tt := range tests {
		got, err := ParseDiskSize(tt.in)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr || !errors.Is(err, ErrInvalidSize) {
				t.Errorf("ParseDiskSize(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseDiskSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func TestParseResize(t *testing.T) {
	const badPattern = "value does not match the regex pattern"
	tests := []struct {
		in        string
		wantDelta bool
		want      int64
		wantErr   string
	}{
		{in: "32G", want: 32 << 30},
		{in: "+2G", wantDelta: true, want: 2 << 30},
		{in: "+512M", wantDelta: true, want: 512 << 20},
		{in: "+0.5K", wantDelta: true, want: 512},
		{in: "1073741824", want: 1 << 30},
		{in: "+1", wantDelta: true, want: 1},
		{in: "+0", wantDelta: true, want: 0},
		{in: "1.0001K", want: 1024},
		{in: "+1GiB", wantErr: badPattern},
		{in: "++1G", wantErr: badPattern},
		{in: "-1G", wantErr: badPattern},
		{in: "+", wantErr: badPattern},
		{in: "", wantErr: badPattern},
		{in: "1g", wantErr: badPattern},
		{in: " +1G", wantErr: badPattern},
		{in: "+9999999T", wantErr: "size +9999999T exceeds 9223372036854775807 bytes"},
	}
	for _, tt := range tests {
		delta, got, err := ParseResize(tt.in)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr || !errors.Is(err, ErrInvalidSize) {
				t.Errorf("ParseResize(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || delta != tt.wantDelta || got != tt.want {
			t.Errorf("ParseResize(%q) = %v, %d, %v; want %v, %d", tt.in, delta, got, err, tt.wantDelta, tt.want)
		}
	}
}

func TestFormatSize(t *testing.T) {
	tests := []struct {
		in   int64
		want string
	}{
		{0, "0T"}, // PVE's format_size(0)
		{1, "1"},
		{1023, "1023"},
		{1024, "1K"},
		{1536, "1536"}, // 1.5K is not a whole number of KiB
		{1536 * 1024, "1536K"},
		{4 << 20, "4M"},
		{512 << 20, "512M"},
		{1536 << 20, "1536M"},
		{32 << 30, "32G"},
		{1 << 40, "1T"},
		{3 << 40, "3T"},
		{1<<40 + 1<<30, "1025G"},
		{8589934592, "8G"},
		{8589934593, "8589934593"},
		{-1024, "-1K"},
		{-1, "-1"},
	}
	for _, tt := range tests {
		if got := FormatSize(tt.in); got != tt.want {
			t.Errorf("FormatSize(%d) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func FuzzParseDiskSize(f *testing.F) {
	for _, s := range []string{"32G", "1.5K", "0.001G", "4MiB", "0", "9223372036854775807", "8388608T", "1.G", "", "+1G"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseDiskSize(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidSize) {
				t.Fatalf("error %v does not wrap ErrInvalidSize", err)
			}
			return
		}
		if n < 0 {
			t.Fatalf("ParseDiskSize(%q) = %d < 0", s, n)
		}
		formatted := FormatSize(n)
		back, err := ParseDiskSize(formatted)
		if err != nil || back != n {
			t.Fatalf("ParseDiskSize(%q) = %d, FormatSize = %q, re-parsed %d, %v", s, n, formatted, back, err)
		}
	})
}

func FuzzParseResize(f *testing.F) {
	for _, s := range []string{"+2G", "32G", "+0.5K", "1", "+", "+1GiB", "-1G"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		delta, n, err := ParseResize(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidSize) {
				t.Fatalf("error %v does not wrap ErrInvalidSize", err)
			}
			return
		}
		if n < 0 || delta != strings.HasPrefix(s, "+") {
			t.Fatalf("ParseResize(%q) = %v, %d", s, delta, n)
		}
		// Every resize size is also a disk size of the same value.
		abs, err := ParseDiskSize(strings.TrimPrefix(s, "+"))
		if err != nil || abs != n {
			t.Fatalf("ParseResize(%q) = %d but ParseDiskSize gives %d, %v", s, n, abs, err)
		}
	})
}

func TestClaimRequest(t *testing.T) {
	for _, c := range []struct {
		disk     int64
		overhead float64
		fs       bool
		want     int64
	}{
		{32 << 30, 0.06, true, 36421322671}, // CDI's 32 GiB claim: ~33.92 GiB
		{4 << 30, 0.06, true, 4552665334},
		{1 << 30, 0.06, true, 1138166334}, // as CDI v1.64 sized it on the real control plane
		{4 << 30, 0, true, 4 << 30},
		{(4 << 30) + 1, 0, true, (4 << 30) + (1 << 20)}, // aligned to 1 MiB first
		{32 << 30, 0.06, false, 32 << 30},               // Block: no overhead
		{5 << 30, 0.1, true, 5905580032},
	} {
		if got := ClaimRequest(c.disk, c.overhead, c.fs); got != c.want {
			t.Errorf("ClaimRequest(%d, %v, %v) = %d, want %d", c.disk, c.overhead, c.fs, got, c.want)
		}
		// What the claim holds is the disk asked for, aligned.
		aligned := (c.disk + claimAlign - 1) / claimAlign * claimAlign
		if !c.fs {
			aligned = c.disk
		}
		if got := DiskBytes(c.want, c.overhead, c.fs); got != aligned {
			t.Errorf("DiskBytes(%d, %v, %v) = %d, want %d", c.want, c.overhead, c.fs, got, aligned)
		}
	}
	if got := DiskBytes(100, 0.06, true); got != 100 {
		t.Errorf("DiskBytes of a claim below 1 MiB = %d, want the claim", got)
	}
}
