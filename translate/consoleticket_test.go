package translate

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestConsoleTicket(t *testing.T) {
	key := []byte("console-key")
	at := time.Unix(1700000000, 0)
	tk := SignConsoleTicket(key, "alice@pve", "/vms/100", 5901, at)
	if !strings.HasPrefix(tk, "PVEVNC:6553F100::") || len(tk) != len("PVEVNC:")+8+2+44 {
		t.Fatalf("ticket shape %q", tk)
	}
	tests := []struct {
		name   string
		ticket string
		user   string
		path   string
		port   int
		now    time.Time
		want   error
	}{
		{"valid", tk, "alice@pve", "/vms/100", 5901, at, nil},
		{"valid at 40s", tk, "alice@pve", "/vms/100", 5901, at.Add(40 * time.Second), nil},
		{"skew 20s", tk, "alice@pve", "/vms/100", 5901, at.Add(-20 * time.Second), nil},
		{"password prefix", "abcdEFGH:" + tk, "alice@pve", "/vms/100", 5901, at, nil},
		{"expired", tk, "alice@pve", "/vms/100", 5901, at.Add(41 * time.Second), ErrTicketExpired},
		{"future", tk, "alice@pve", "/vms/100", 5901, at.Add(-21 * time.Second), ErrTicketNotYetValid},
		{"other user", tk, "bob@pve", "/vms/100", 5901, at, ErrTicketSignature},
		{"other vm", tk, "alice@pve", "/vms/101", 5901, at, ErrTicketSignature},
		{"other port", tk, "alice@pve", "/vms/100", 5902, at, ErrTicketSignature},
		{"other key", SignConsoleTicket([]byte("x"), "alice@pve", "/vms/100", 5901, at), "alice@pve", "/vms/100", 5901, at, ErrTicketSignature},
		{"moved timestamp", strings.Replace(tk, "6553F100", "6553F101", 1), "alice@pve", "/vms/100", 5901, at, ErrTicketSignature},
		{"lower-case hex", strings.Replace(tk, "6553F100", "6553f100", 1), "alice@pve", "/vms/100", 5901, at, ErrTicketMalformed},
		{"session ticket", SignTicket(key, "alice@pve", at), "alice@pve", "/vms/100", 5901, at, ErrTicketMalformed},
		{"empty", "", "alice@pve", "/vms/100", 5901, at, ErrTicketMalformed},
		{"truncated", tk[:len(tk)-1], "alice@pve", "/vms/100", 5901, at, ErrTicketMalformed},
		{"short password prefix", "abc:" + tk, "alice@pve", "/vms/100", 5901, at, ErrTicketMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			issued, err := VerifyConsoleTicket(key, tc.ticket, tc.user, tc.path, tc.port, tc.now)
			if tc.want == nil {
				if err != nil || !issued.Equal(at) {
					t.Fatalf("got %v, %v", issued, err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

// Tickets with an id are distinct in the same second, verify like the
// others, and bind their id.
func TestConsoleTicketID(t *testing.T) {
	key := []byte("console-key")
	at := time.Unix(1700000000, 0)
	a := SignConsoleTicketID(key, "n0nce1", "alice@pve", "/vms/100", 5901, at)
	b := SignConsoleTicketID(key, "n0nce2", "alice@pve", "/vms/100", 5901, at)
	if a == b || !strings.HasPrefix(a, "PVEVNC:n0nce1:6553F100::") {
		t.Fatalf("tickets %q %q", a, b)
	}
	for _, tk := range []string{a, "abcdEFGH:" + a, b} {
		if issued, err := VerifyConsoleTicket(key, tk, "alice@pve", "/vms/100", 5901, at); err != nil || !issued.Equal(at) {
			t.Fatalf("%q: %v %v", tk, issued, err)
		}
	}
	for name, tc := range map[string]struct {
		ticket string
		want   error
	}{
		"swapped id":  {strings.Replace(a, "n0nce1", "n0nce2", 1), ErrTicketSignature},
		"dropped id":  {strings.Replace(a, "n0nce1:", "", 1), ErrTicketSignature},
		"bad id":      {strings.Replace(a, "n0nce1", "n0n-e1", 1), ErrTicketMalformed},
		"empty id":    {strings.Replace(a, "n0nce1", "", 1), ErrTicketMalformed},
		"long id":     {strings.Replace(a, "n0nce1", strings.Repeat("x", 33), 1), ErrTicketMalformed},
		"other port":  {SignConsoleTicketID(key, "n0nce1", "alice@pve", "/vms/100", 5902, at), ErrTicketSignature},
		"two id part": {strings.Replace(a, "n0nce1:", "n0nce1:x:", 1), ErrTicketMalformed},
	} {
		if _, err := VerifyConsoleTicket(key, tc.ticket, "alice@pve", "/vms/100", 5901, at); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
}

// The bound fields are length-prefixed: moving bytes between them breaks
// the signature.
func TestConsoleTicketFieldsDoNotBleed(t *testing.T) {
	key := []byte("k")
	at := time.Unix(1700000000, 0)
	tk := SignConsoleTicket(key, "a:b", "/vms/1", 59, at)
	if _, err := VerifyConsoleTicket(key, tk, "a", "b/vms/1", 59, at); err == nil {
		t.Fatal("user/path boundary is ambiguous")
	}
	if _, err := VerifyConsoleTicket(key, tk, "a:b", "/vms/15", 9, at); err == nil {
		t.Fatal("path/port boundary is ambiguous")
	}
}

func FuzzVerifyConsoleTicket(f *testing.F) {
	key := []byte("fuzz-key")
	at := time.Unix(1700000000, 0)
	f.Add(SignConsoleTicket(key, "root@pam", "/vms/100", 5900, at), "root@pam", "/vms/100", 5900)
	f.Add("PVEVNC:00000000::", "u@pve", "/vms/1", 5999)
	f.Add("12345678:PVEVNC:6553F100::"+strings.Repeat("A", 44), "", "", 0)
	f.Add(SignConsoleTicketID(key, "abc123", "root@pam", "/vms/100", 5900, at), "root@pam", "/vms/100", 5900)
	f.Fuzz(func(t *testing.T, ticket, user, path string, port int) {
		issued, err := VerifyConsoleTicket(key, ticket, user, path, port, at)
		if err != nil {
			return
		}
		// Whatever verifies must be exactly what we would sign (modulo the
		// password prefix).
		id := ""
		if i := strings.Index(ticket, consoleTicketPrefix); i >= 0 {
			rest := ticket[i+len(consoleTicketPrefix):]
			if len(rest) > tsLen+2+ticketSigLen {
				id = rest[:strings.Index(rest, ":")]
			}
		}
		want := SignConsoleTicketID(key, id, user, path, port, issued)
		if !strings.HasSuffix(ticket, want) {
			t.Fatalf("accepted %q for (%q, %q, %d), which signs as %q", ticket, user, path, port, want)
		}
	})
}
