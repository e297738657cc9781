package translate

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"testing"
	"time"
)

func TestCSRFToken(t *testing.T) {
	m := hmac.New(sha256.New, testKey)
	m.Write([]byte("66F1A2B3:root@pam"))
	want := "66F1A2B3:" + base64.RawStdEncoding.EncodeToString(m.Sum(nil))

	tests := []struct {
		userid string
		want   string
	}{
		{"root@pam", want},
	}
	for _, tt := range tests {
		got := CSRFToken(testKey, tt.userid, testIssued)
		if got != tt.want {
			t.Errorf("CSRFToken(%q) = %q, want %q", tt.userid, got, tt.want)
		}
		if _, sig, _ := strings.Cut(got, ":"); len(sig) != 43 {
			t.Errorf("CSRFToken(%q) signature has %d chars, want 43", tt.userid, len(sig))
		}
	}
	if CSRFToken(testKey, "a@pve", testIssued) == CSRFToken(testKey, "b@pve", testIssued) {
		t.Error("CSRF tokens of different users are equal")
	}
}

func TestVerifyCSRF(t *testing.T) {
	valid := CSRFToken(testKey, "root@pam", testIssued)
	sig := valid[9:]
	flipped := valid[:9] + string(sig[0]^1) + sig[1:]
	flippedEnd := valid[:len(valid)-1] + string(valid[len(valid)-1]^1)
	tests := []struct {
		name   string
		key    []byte
		userid string
		token  string
		now    time.Time
		want   bool
	}{
		{name: "fresh", userid: "root@pam", token: valid, now: testIssued, want: true},
		{name: "almost expired", userid: "root@pam", token: valid, now: testIssued.Add(2*time.Hour - time.Second), want: true},
		{name: "expired", userid: "root@pam", token: valid, now: testIssued.Add(2 * time.Hour)},
		{name: "skew inside grace", userid: "root@pam", token: valid, now: testIssued.Add(-299 * time.Second), want: true},
		{name: "skew at grace", userid: "root@pam", token: valid, now: testIssued.Add(-300 * time.Second)},
		{name: "other user", userid: "admin@pam", token: valid, now: testIssued},
		{name: "wrong key", key: []byte("k"), userid: "root@pam", token: valid, now: testIssued},
		{name: "tampered time", userid: "root@pam", token: "66F1A2B4" + valid[8:], now: testIssued},
		{name: "lower-case time", userid: "root@pam", token: "66f1a2b3" + valid[8:], now: testIssued},
		{name: "tampered signature", userid: "root@pam", token: flipped, now: testIssued},
		{name: "tampered signature end", userid: "root@pam", token: flippedEnd, now: testIssued},
		{name: "padded", userid: "root@pam", token: valid + "=", now: testIssued},
		{name: "truncated", userid: "root@pam", token: valid[:len(valid)-1], now: testIssued},
		{name: "no colon", userid: "root@pam", token: valid[:8] + valid[9:], now: testIssued},
		{name: "empty", userid: "root@pam", token: "", now: testIssued},
		{name: "ticket is not a csrf token", userid: "root@pam", token: SignTicket(testKey, "root@pam", testIssued), now: testIssued},
	}
	for _, tt := range tests {
		key := tt.key
		if key == nil {
			key = testKey
		}
		if got := VerifyCSRF(key, tt.userid, tt.token, tt.now); got != tt.want {
			t.Errorf("%s: VerifyCSRF = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func FuzzVerifyCSRF(f *testing.F) {
	f.Add("root@pam", uint(0), byte('x'), CSRFToken(testKey, "root@pam", testIssued))
	f.Add("", uint(9), byte('+'), "")
	f.Fuzz(func(t *testing.T, userid string, pos uint, b byte, raw string) {
		now := testIssued.Add(time.Minute)
		// Whatever raw is, it may only verify if it is exactly the token
		// CSRFToken issues for userid at raw's own timestamp.
		if VerifyCSRF(testKey, userid, raw, now) {
			secs, _ := parseUpperHex(raw[:8])
			if want := CSRFToken(testKey, userid, time.Unix(secs, 0)); raw != want {
				t.Fatalf("forged token %q verified for %q (canonical %q)", raw, userid, want)
			}
		}
		token := CSRFToken(testKey, userid, testIssued)
		if !VerifyCSRF(testKey, userid, token, now) {
			t.Fatalf("fresh token %q for %q does not verify", token, userid)
		}
		mutated := []byte(token)
		mutated[int(pos%uint(len(mutated)))] = b
		if string(mutated) != token && VerifyCSRF(testKey, userid, string(mutated), now) {
			t.Fatalf("mutated token %q verified for %q", mutated, userid)
		}
	})
}
