package translate

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

// testIssued is 2024-09-23 17:17:39 UTC, hex 66F1A2B3.
var testIssued = time.Unix(0x66F1A2B3, 0)

func TestSignTicket(t *testing.T) {
	// Expected signature computed independently of SignTicket.
	sign := func(plain string) string {
		m := hmac.New(sha256.New, testKey)
		m.Write([]byte(plain))
		return base64.StdEncoding.EncodeToString(m.Sum(nil))
	}
	tests := []struct {
		userid, wantPlain string
	}{
		{"root@pam", "PVE:root@pam:66F1A2B3"},
		{"user@pve!token", "PVE:user@pve!token:66F1A2B3"},
		{"we:ird@pve", "PVE:we%3Aird@pve:66F1A2B3"},
		{"100%@pve", "PVE:100%25@pve:66F1A2B3"},
		{"a b\t@pve", "PVE:a%20b%09@pve:66F1A2B3"},
		{"ünï@pve", "PVE:ünï@pve:66F1A2B3"},
	}
	for _, tt := range tests {
		got := SignTicket(testKey, tt.userid, testIssued)
		want := tt.wantPlain + "::" + sign(tt.wantPlain)
		if got != want {
			t.Errorf("SignTicket(%q) = %q, want %q", tt.userid, got, want)
		}
		// bpg's ticket mode: more than 3 ':' parts and '@' in the second.
		if parts := strings.Split(got, ":"); len(parts) <= 3 || !strings.Contains(parts[1], "@") {
			t.Errorf("SignTicket(%q) = %q does not look like a PVE ticket to bpg", tt.userid, got)
		}
	}
}

func TestVerifyTicket(t *testing.T) {
	valid := SignTicket(testKey, "root@pam", testIssued)
	tampered := func(old, new string) string { return strings.Replace(valid, old, new, 1) }
	sig := valid[strings.LastIndex(valid, ":")+1:]
	flipped := string(sig[0]^1) + sig[1:]
	flippedEnd := sig[:42] + string(sig[42]^1) + sig[43:]
	tests := []struct {
		name     string
		ticket   string
		key      []byte
		now      time.Time
		lifetime time.Duration
		wantUser string
		wantErr  error
	}{
		{name: "fresh", ticket: valid, now: testIssued, wantUser: "root@pam"},
		{name: "almost expired", ticket: valid, now: testIssued.Add(2*time.Hour - time.Second), wantUser: "root@pam"},
		{name: "expired", ticket: valid, now: testIssued.Add(2 * time.Hour), wantErr: ErrTicketExpired},
		{name: "custom lifetime", ticket: valid, now: testIssued.Add(30 * time.Minute), lifetime: 10 * time.Minute, wantErr: ErrTicketExpired},
		{name: "skew inside grace", ticket: valid, now: testIssued.Add(-299 * time.Second), wantUser: "root@pam"},
		{name: "skew at grace", ticket: valid, now: testIssued.Add(-300 * time.Second), wantErr: ErrTicketNotYetValid},
		{name: "far future", ticket: valid, now: testIssued.Add(-24 * time.Hour), wantErr: ErrTicketNotYetValid},
		{name: "wrong key", ticket: valid, key: []byte("other"), now: testIssued, wantErr: ErrTicketSignature},
		{name: "tampered user", ticket: tampered("root@pam", "rooT@pam"), now: testIssued, wantErr: ErrTicketSignature},
		{name: "tampered time", ticket: tampered("66F1A2B3", "66F1A2B4"), now: testIssued, wantErr: ErrTicketSignature},
		{name: "tampered signature", ticket: tampered(sig, flipped), now: testIssued, wantErr: ErrTicketSignature},
		{name: "tampered signature end", ticket: tampered(sig, flippedEnd), now: testIssued, wantErr: ErrTicketSignature},
		{name: "signature of other ticket", ticket: valid[:len(valid)-44] + SignTicket(testKey, "admin@pam", testIssued)[len("PVE:admin@pam:66F1A2B3::"):], now: testIssued, wantErr: ErrTicketSignature},
		{name: "lower-case time", ticket: tampered("66F1A2B3", "66f1a2b3"), now: testIssued, wantErr: ErrTicketMalformed},
		{name: "tampered prefix", ticket: "PVX" + valid[3:], now: testIssued, wantErr: ErrTicketMalformed},
		{name: "unpadded signature", ticket: strings.TrimSuffix(valid, "="), now: testIssued, wantErr: ErrTicketMalformed},
		{name: "extra byte", ticket: valid + "=", now: testIssued, wantErr: ErrTicketMalformed},
		{name: "no separator", ticket: tampered("::", ":"), now: testIssued, wantErr: ErrTicketMalformed},
		{name: "empty", ticket: "", now: testIssued, wantErr: ErrTicketMalformed},
		{name: "empty user", ticket: SignTicket(testKey, "", testIssued), now: testIssued, wantErr: ErrTicketMalformed},
		{name: "corral style", ticket: "PVE:root@pam:SECRET", now: testIssued, wantErr: ErrTicketMalformed},
		{name: "bad escape", ticket: tampered("root@pam", "root%3@pam"), now: testIssued, wantErr: ErrTicketMalformed},
		{name: "lower-case escape", ticket: strings.Replace(SignTicket(testKey, "a:b@pve", testIssued), "%3A", "%3a", 1), now: testIssued, wantErr: ErrTicketMalformed},
		{name: "needless escape", ticket: tampered("root@pam", "roo%74@pam"), now: testIssued, wantErr: ErrTicketMalformed},
		{name: "raw space", ticket: tampered("root@pam", "ro t@pam"), now: testIssued, wantErr: ErrTicketMalformed},
	}
	for _, tt := range tests {
		key := tt.key
		if key == nil {
			key = testKey
		}
		user, issued, err := VerifyTicket(key, tt.ticket, tt.now, tt.lifetime)
		if tt.wantErr != nil {
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("%s: VerifyTicket error = %v, want %v", tt.name, err, tt.wantErr)
			}
			if user != "" || !issued.IsZero() {
				t.Errorf("%s: VerifyTicket returned %q, %v with an error", tt.name, user, issued)
			}
			continue
		}
		if err != nil || user != tt.wantUser || !issued.Equal(testIssued) {
			t.Errorf("%s: VerifyTicket = %q, %v, %v; want %q, %v", tt.name, user, issued, err, tt.wantUser, testIssued)
		}
	}
}

func TestVerifyTicketUserIDs(t *testing.T) {
	for _, userid := range []string{"root@pam", "a:b@pve", "x%41@pve", "tok@pve!id:x", "sp ace@pve", "\x00\x7f@pve", "日本@pve", ":", "%"} {
		ticket := SignTicket(testKey, userid, testIssued)
		got, _, err := VerifyTicket(testKey, ticket, testIssued.Add(time.Minute), TicketLifetime)
		if err != nil || got != userid {
			t.Errorf("round trip of %q via %q = %q, %v", userid, ticket, got, err)
		}
	}
}

func FuzzVerifyTicket(f *testing.F) {
	f.Add("root@pam", uint(0), byte('x'), SignTicket(testKey, "root@pam", testIssued))
	f.Add("a:b@pve", uint(20), byte('A'), "PVE:a%3Ab@pve:66F1A2B3::"+strings.Repeat("A", 43)+"=")
	f.Add("", uint(5), byte(0), "")
	f.Add("x@y", uint(1000), byte('='), "PVE:root@pam:SECRET")
	f.Fuzz(func(t *testing.T, userid string, pos uint, b byte, raw string) {
		now := testIssued.Add(time.Minute)

		// Whatever raw is, it may only verify if it is exactly what
		// SignTicket would have issued.
		if user, issued, err := VerifyTicket(testKey, raw, now, TicketLifetime); err == nil {
			if want := SignTicket(testKey, user, issued); raw != want {
				t.Fatalf("forged ticket %q verified as %q (canonical %q)", raw, user, want)
			}
		}

		ticket := SignTicket(testKey, userid, testIssued)
		if userid != "" {
			user, issued, err := VerifyTicket(testKey, ticket, now, TicketLifetime)
			if err != nil || user != userid || !issued.Equal(testIssued) {
				t.Fatalf("round trip of %q = %q, %v, %v", userid, user, issued, err)
			}
		}

		// A mutated ticket must never verify.
		mutated := []byte(ticket)
		i := int(pos % uint(len(mutated)))
		mutated[i] = b
		if string(mutated) == ticket {
			return
		}
		if user, _, err := VerifyTicket(testKey, string(mutated), now, TicketLifetime); err == nil {
			t.Fatalf("mutated ticket %q verified as %q", mutated, user)
		}
	})
}
