package translate

import (
	"math"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

func TestMiBToQuantity(t *testing.T) {
	tests := []struct {
		mib      int64
		wantText string // canonical Kubernetes text
		equals   string // an equal spelling
	}{
		{2048, "2Gi", "2048Mi"},
		{1536, "1536Mi", "1536Mi"},
		{16, "16Mi", "16Mi"},
		{1024 * 1024, "1Ti", "1048576Mi"},
		{0, "0", "0Mi"},
		{MaxMemoryMiB + 1, "8796093022207Mi", "8796093022207Mi"}, // clamped
	}
	for _, tt := range tests {
		q := MiBToQuantity(tt.mib)
		if got := q.String(); got != tt.wantText {
			t.Errorf("MiBToQuantity(%d) = %q, want %q", tt.mib, got, tt.wantText)
		}
		if q.Cmp(resource.MustParse(tt.equals)) != 0 {
			t.Errorf("MiBToQuantity(%d) = %s, not equal to %s", tt.mib, q.String(), tt.equals)
		}
	}
}

func TestQuantityToMiB(t *testing.T) {
	tests := []struct {
		q    string
		want int64
	}{
		{"2Gi", 2048},
		{"2048Mi", 2048},
		{"1536Mi", 1536},
		{"1Mi", 1},
		{"1048575", 0},  // just under 1 MiB rounds down
		{"1048577", 1},  // just over rounds down
		{"1G", 953},     // 10^9 bytes
		{"2.5Gi", 2560}, // fractional mantissa
		{"0.5Mi", 0},
		{"0", 0},
		{"-1Mi", -1},
		{"-1", -1}, // floor of a negative fraction of a MiB
		{"1E30", math.MaxInt64},
		{"-1E30", math.MinInt64},
	}
	for _, tt := range tests {
		if got := QuantityToMiB(resource.MustParse(tt.q)); got != tt.want {
			t.Errorf("QuantityToMiB(%s) = %d, want %d", tt.q, got, tt.want)
		}
	}
}

func TestQuantityToBytes(t *testing.T) {
	tests := []struct {
		q    string
		want int64
	}{
		{"32Gi", 32 << 30},
		{"1G", 1000000000},
		{"1.5Ki", 1536},
		{"0.5", 0},   // Value() would round up to 1
		{"1500m", 1}, // 1.5 bytes
		{"-0.5", -1},
		{"8Ei", math.MaxInt64}, // 2^63 does not fit
		{"1E30", math.MaxInt64},
		{"100", 100},
	}
	for _, tt := range tests {
		if got := QuantityToBytes(resource.MustParse(tt.q)); got != tt.want {
			t.Errorf("QuantityToBytes(%s) = %d, want %d", tt.q, got, tt.want)
		}
	}
}
