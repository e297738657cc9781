package translate

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

func TestUPIDString(t *testing.T) {
	tests := []struct {
		u    UPID
		want string
	}{
		{
			u:    UPID{Node: "pve1", PID: 0x2a, PStart: 0x1234, StartTime: 0x66F1A2B3, Type: TaskStart, ID: "100", User: "root@pam"},
			want: "UPID:pve1:0000002A:00001234:66F1A2B3:qmstart:100:root@pam:",
		},
		{
			u:    UPID{Node: "n", Type: "vncproxy", User: "u@pve!tok"},
			want: "UPID:n:00000000:00000000:00000000:vncproxy::u@pve!tok:",
		},
		{
			u:    UPID{Node: "pve", PID: 0xFFFFFFFF, PStart: 0xFFFFFFFF, StartTime: 0xFFFFFFFF, Type: "t", ID: "i", User: "u"},
			want: "UPID:pve:FFFFFFFF:FFFFFFFF:FFFFFFFF:t:i:u:",
		},
	}
	for _, tt := range tests {
		got := tt.u.String()
		if got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.u, got, tt.want)
		}
		if n := len(strings.Split(got, ":")); n != 9 {
			t.Errorf("%q has %d ':' fields, want 9", got, n)
		}
	}
}

func TestParseUPID(t *testing.T) {
	tests := []struct {
		in      string
		want    UPID
		wantErr bool
	}{
		{
			in:   "UPID:pve1:0000002A:00001234:66F1A2B3:qmstart:100:root@pam:",
			want: UPID{Node: "pve1", PID: 0x2a, PStart: 0x1234, StartTime: 0x66F1A2B3, Type: "qmstart", ID: "100", User: "root@pam"},
		},
		{
			in:   "UPID:pve-a:0000abcd:0abcdef01:66f1a2b3:vncproxy::root@pam!tok:",
			want: UPID{Node: "pve-a", PID: 0xabcd, PStart: 0xabcdef01, StartTime: 0x66f1a2b3, Type: "vncproxy", User: "root@pam!tok"},
		},
		{
			in:   "UPID:N:00000000:FFFFFFFF:00000000:qmmove:100-scsi0>101-scsi1:a@b:",
			want: UPID{Node: "N", PStart: 0xFFFFFFFF, Type: "qmmove", ID: "100-scsi0>101-scsi1", User: "a@b"},
		},
		{in: "", wantErr: true},
		{in: "UPID:pve1:0000002A:00001234:66F1A2B3:qmstart:100:root@pam", wantErr: true},       // no trailing ':'
		{in: "upid:pve1:0000002A:00001234:66F1A2B3:qmstart:100:root@pam:", wantErr: true},      // prefix case
		{in: "UPID:pve.1:0000002A:00001234:66F1A2B3:qmstart:100:root@pam:", wantErr: true},     // dot in node
		{in: "UPID:-pve:0000002A:00001234:66F1A2B3:qmstart:100:root@pam:", wantErr: true},      // node grammar
		{in: "UPID::0000002A:00001234:66F1A2B3:qmstart:100:root@pam:", wantErr: true},          // empty node
		{in: "UPID:pve1:2A:00001234:66F1A2B3:qmstart:100:root@pam:", wantErr: true},            // short pid
		{in: "UPID:pve1:00000002A:00001234:66F1A2B3:qmstart:100:root@pam:", wantErr: true},     // long pid
		{in: "UPID:pve1:0000002G:00001234:66F1A2B3:qmstart:100:root@pam:", wantErr: true},      // non-hex pid
		{in: "UPID:pve1:0000002A:0001234:66F1A2B3:qmstart:100:root@pam:", wantErr: true},       // short pstart
		{in: "UPID:pve1:0000002A:0000001234:66F1A2B3:qmstart:100:root@pam:", wantErr: true},    // 10-digit pstart
		{in: "UPID:pve1:0000002A:100000000:66F1A2B3:qmstart:100:root@pam:", wantErr: true},     // pstart > 32 bit
		{in: "UPID:pve1:0000002A:00001234:166F1A2B3:qmstart:100:root@pam:", wantErr: true},     // long starttime
		{in: "UPID:pve1:0000002A:00001234:66F1A2B3::100:root@pam:", wantErr: true},             // empty type
		{in: "UPID:pve1:0000002A:00001234:66F1A2B3:qm start:100:root@pam:", wantErr: true},     // space in type
		{in: "UPID:pve1:0000002A:00001234:66F1A2B3:qm/start:100:root@pam:", wantErr: true},     // slash in type
		{in: "UPID:pve1:0000002A:00001234:66F1A2B3:qmstart:1 0:root@pam:", wantErr: true},      // space in id
		{in: "UPID:pve1:0000002A:00001234:66F1A2B3:qmstart:100::", wantErr: true},              // empty user
		{in: "UPID:pve1:0000002A:00001234:66F1A2B3:qmstart:100:root@pam:x:", wantErr: true},    // extra field
		{in: "UPID:pve1:0000002A:00001234:66F1A2B3:qmstart:100:root@pam:\n", wantErr: true},    // trailing newline
		{in: "UPID:pve1:0000002A:00001234:66F1A2B3:qmstart:100:root\u00a0pam:", wantErr: true}, // unicode space
	}
	for _, tt := range tests {
		got, err := ParseUPID(tt.in)
		if tt.wantErr {
			want := "unable to parse worker upid '" + tt.in + "'"
			if err == nil || err.Error() != want {
				t.Errorf("ParseUPID(%q) error = %v, want %q", tt.in, err, want)
			}
			if !errors.Is(err, ErrInvalidUPID) {
				t.Errorf("ParseUPID(%q) error does not wrap ErrInvalidUPID", tt.in)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseUPID(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

func TestUPIDKey(t *testing.T) {
	long := strings.Repeat("n", 30)
	tests := []struct {
		name string
		u    UPID
		want string
	}{
		{
			name: "readable",
			u:    UPID{Node: "pve1", PID: 0x2a, PStart: 0x1234, StartTime: 0x66F1A2B3, Type: "qmstart", ID: "100", User: "root@pam"},
			want: "pve1-0000002a-00001234-66f1a2b3",
		},
		{
			name: "type, id and user do not matter",
			u:    UPID{Node: "pve1", PID: 0x2a, PStart: 0x1234, StartTime: 0x66F1A2B3, Type: "qmstop", User: "x@y"},
			want: "pve1-0000002a-00001234-66f1a2b3",
		},
		{
			name: "longest readable node",
			u:    UPID{Node: strings.Repeat("a", 23)},
			want: strings.Repeat("a", 23) + "-00000000-00000000-00000000",
		},
		{
			name: "long node is hashed",
			u:    UPID{Node: long, PID: 1},
			want: "nnnnnnnnnnnnnn-",
		},
		{
			name: "upper case node is hashed",
			u:    UPID{Node: "PVE1", PID: 0x2a},
			want: "pve1-",
		},
		{
			name: "invalid node",
			u:    UPID{},
			want: "upid-",
		},
	}
	keyRE := regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-f0-9])?$`)
	for _, tt := range tests {
		got := tt.u.Key()
		if strings.HasSuffix(tt.want, "-") {
			// hashed form: prefix plus 32 hex digits
			if !strings.HasPrefix(got, tt.want) || len(got) != len(tt.want)+32 {
				t.Errorf("%s: Key() = %q, want %q + 32 hex digits", tt.name, got, tt.want)
			}
		} else if got != tt.want {
			t.Errorf("%s: Key() = %q, want %q", tt.name, got, tt.want)
		}
		if len(got) > 50 || !keyRE.MatchString(got) {
			t.Errorf("%s: Key() = %q is not a short DNS-safe key", tt.name, got)
		}
	}
	// Hashed keys are deterministic and distinguish the identifying fields.
	a := UPID{Node: long, PID: 1, PStart: 2, StartTime: 3}
	variants := []UPID{
		{Node: long, PID: 9, PStart: 2, StartTime: 3},
		{Node: long, PID: 1, PStart: 9, StartTime: 3},
		{Node: long, PID: 1, PStart: 2, StartTime: 9},
		{Node: long + "x", PID: 1, PStart: 2, StartTime: 3},
		{Node: "PVE1", PID: 1, PStart: 2, StartTime: 3},
	}
	if again := (UPID{Node: long, PID: 1, PStart: 2, StartTime: 3}); a.Key() != again.Key() {
		t.Error("Key() is not deterministic")
	}
	for _, v := range variants {
		if v.Key() == a.Key() {
			t.Errorf("Key() of %+v collides with %+v", v, a)
		}
	}
	if (UPID{Node: "PVE1", PID: 1}).Key() == (UPID{Node: "pve1", PID: 1}).Key() {
		t.Error("Key() collides for nodes differing in case")
	}
}

func FuzzParseUPID(f *testing.F) {
	seeds := []string{
		"UPID:pve1:0000002A:00001234:66F1A2B3:qmstart:100:root@pam:",
		"UPID:pve-a:0000abcd:0abcdef01:66f1a2b3:vncproxy::root@pam!tok:",
		"UPID:node:00000000:100000000:00000000:t:i:u:",
		"UPID:x:00000000:00000000:00000000:t::u:",
		"UPID:pve1:0000002A:00001234:66F1A2B3:qmstart:100:root@pam",
		"",
	}
	for _, s := range seeds {
		f.Add(s)
	}
	keyRE := regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-f0-9])?$`)
	f.Fuzz(func(t *testing.T, s string) {
		u, err := ParseUPID(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidUPID) {
				t.Fatalf("error %v does not wrap ErrInvalidUPID", err)
			}
			return
		}
		enc := u.String()
		if n := len(strings.Split(enc, ":")); n != 9 {
			t.Fatalf("String() %q has %d fields", enc, n)
		}
		u2, err := ParseUPID(enc)
		if err != nil || u2 != u {
			t.Fatalf("round trip %q -> %q -> %+v, %v; want %+v", s, enc, u2, err, u)
		}
		if k := u.Key(); len(k) > 50 || !keyRE.MatchString(k) {
			t.Fatalf("Key() = %q is not DNS-safe", k)
		}
	})
}
