package translate

import (
	"errors"
	"strconv"
	"testing"
)

func TestParseMemoryMiB(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr string
	}{
		{in: "2048", want: 2048},
		{in: "16", want: 16},
		{in: "+512", want: 512},
		{in: "0512", want: 512},
		{in: "current=2048", want: 2048},
		{in: "current=2048,", want: 2048},
		{in: ",current=4096, ", want: 4096},
		{in: "8796093022207", want: MaxMemoryMiB},
		{in: "15", wantErr: "invalid format - current: value must have a minimum value of 16"},
		{in: "0", wantErr: "invalid format - current: value must have a minimum value of 16"},
		{in: "-2048", wantErr: "invalid format - current: value must have a minimum value of 16"},
		{in: "-99999999999999999999", wantErr: "invalid format - current: value must have a minimum value of 16"},
		{in: "8796093022208", wantErr: "invalid format - current: value must have a maximum value of 8796093022207"},
		{in: "99999999999999999999", wantErr: "invalid format - current: value must have a maximum value of 8796093022207"},
		{in: "", wantErr: "invalid format - current: property is missing and it is not optional"},
		{in: " , ", wantErr: "invalid format - current: property is missing and it is not optional"},
		{in: "2G", wantErr: "invalid format - current: type check ('integer') failed - got '2G'"},
		{in: "2048.0", wantErr: "invalid format - current: type check ('integer') failed - got '2048.0'"},
		{in: " 2048", wantErr: "invalid format - current: type check ('integer') failed - got ' 2048'"},
		{in: "current=abc", wantErr: "invalid format - current: type check ('integer') failed - got 'abc'"},
		{in: "current=2048,max=4096", wantErr: "invalid format - invalid key in comma-separated list property: max"},
		{in: "2048,current=4096", wantErr: "invalid format - duplicate key in comma-separated list property: current"},
		{in: "current=4096,2048", wantErr: "invalid format - duplicate key in comma-separated list property: current"},
		{in: "2048,4096", wantErr: "invalid format - duplicate key in comma-separated list property: current"},
		{in: "current=", wantErr: "invalid format - missing key in comma-separated list property"},
		{in: "=2048", wantErr: "invalid format - missing key in comma-separated list property"},
	}
	for _, tt := range tests {
		got, err := ParseMemoryMiB(tt.in)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr || !errors.Is(err, ErrInvalidMemory) {
				t.Errorf("ParseMemoryMiB(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseMemoryMiB(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func FuzzParseMemoryMiB(f *testing.F) {
	for _, s := range []string{"2048", "current=2048", "current=2048,", "15", "2G", "current=1,max=2", "", "8796093022208"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseMemoryMiB(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidMemory) {
				t.Fatalf("error %v does not wrap ErrInvalidMemory", err)
			}
			return
		}
		if n < MinMemoryMiB || n > MaxMemoryMiB {
			t.Fatalf("ParseMemoryMiB(%q) = %d out of range", s, n)
		}
		canon := strconv.FormatInt(n, 10)
		if back, err := ParseMemoryMiB(canon); err != nil || back != n {
			t.Fatalf("ParseMemoryMiB(%q) = %d, canonical %q re-parsed %d, %v", s, n, canon, back, err)
		}
		if got := QuantityToMiB(MiBToQuantity(n)); got != n {
			t.Fatalf("QuantityToMiB(MiBToQuantity(%d)) = %d", n, got)
		}
	})
}
