package translate

import (
	"strings"
	"testing"
)

func TestNodeName(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"pve1", "pve1"},
		{"worker-1", "worker-1"},
		{"PVE-Node", "PVE-Node"},
		{"ip-10-0-0-1.ec2.internal", "ip-10-0-0-1-ec2-internal"},
		{"node_a.b", "node-a-b"},
		{"a--b", "a-b"},
		{"a..__b", "a-b"},
		{"-lead", "lead"},
		{"trail.", "trail"},
		{"..", "node"},
		{"", "node"},
		{"ünïcödé", "n-c-d"},
		{"日本", "node"},
		{"a\xffb", "a-b"},
		{strings.Repeat("a", 70), strings.Repeat("a", 63)},
		{strings.Repeat("a", 62) + ".b", strings.Repeat("a", 62)},
		{strings.Repeat("a", 63) + "b", strings.Repeat("a", 63)},
	}
	for _, tt := range tests {
		got := NodeName(tt.in)
		if got != tt.want {
			t.Errorf("NodeName(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if !ValidNodeName(got) {
			t.Errorf("NodeName(%q) = %q is not a valid node name", tt.in, got)
		}
	}
}

func TestValidNodeName(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{"pve", true},
		{"a", true},
		{"0", true},
		{"Pve-1", true},
		{"a--b", true},
		{strings.Repeat("a", 100), true},
		{"", false},
		{"-a", false},
		{"a-", false},
		{"-", false},
		{"a.b", false},
		{"a_b", false},
		{"a b", false},
		{"ä", false},
		{"a:b", false},
	}
	for _, tt := range tests {
		if got := ValidNodeName(tt.in); got != tt.want {
			t.Errorf("ValidNodeName(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func FuzzNodeName(f *testing.F) {
	for _, s := range []string{"pve1", "ip-10-0-0-1.ec2.internal", "", "--", "a\xffb", strings.Repeat("x.", 40)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := NodeName(s)
		if !ValidNodeName(got) || len(got) > 63 {
			t.Fatalf("NodeName(%q) = %q is invalid", s, got)
		}
		if strings.Contains(got, "--") {
			t.Fatalf("NodeName(%q) = %q has a run of dashes", s, got)
		}
		if again := NodeName(got); again != got {
			t.Fatalf("NodeName not idempotent: %q -> %q -> %q", s, got, again)
		}
	})
}
