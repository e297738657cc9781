package translate

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// TicketLifetime is how long PVE accepts a ticket (and a CSRF token) after it
// was issued; clients renew before it ends.
const TicketLifetime = 2 * time.Hour

// AuthGracePeriod is the clock skew PVE tolerates for tickets and CSRF tokens
// issued "in the future" by another node.
const AuthGracePeriod = 5 * time.Minute

// Ticket verification failures. All of them mean HTTP 401 to the client;
// they are distinct so that logs say why.
var (
	ErrTicketMalformed   = errors.New("malformed ticket")
	ErrTicketSignature   = errors.New("invalid ticket signature")
	ErrTicketExpired     = errors.New("ticket expired")
	ErrTicketNotYetValid = errors.New("ticket issued in the future")
)

const (
	ticketPrefix = "PVE:"
	tsLen        = 8  // upper-case hex unix seconds
	ticketSigLen = 44 // base64 (padded) of a 32-byte HMAC-SHA256
)

// SignTicket issues a ticket in PVE's format,
//
//	PVE:<userid>:<8 upper-case hex unix seconds>::<base64 signature>
//
// signed with HMAC-SHA256 under key instead of PVE's RSA key, since only the
// emulator verifies its tickets. Clients only look at the shape (bpg wants
// more than three ':'-separated parts and an '@' in the second). As in PVE,
// ':' in the userid is percent-escaped; so are '%', white space and control
// bytes, which makes every userid round-trip and leaves real PVE userids
// (which contain none of them) exactly as PVE prints them. The timestamp
// wraps for times outside 1970…2106. An empty userid yields a ticket that
// VerifyTicket rejects.
func SignTicket(key []byte, userid string, at time.Time) string {
	plain := ticketPrefix + escapeUserID(userid) + ":" + hexTimestamp(at)
	return plain + "::" + base64.StdEncoding.EncodeToString(hmacSHA256(key, plain))
}

// VerifyTicket checks a ticket made by SignTicket and returns its userid and
// issue time. Like PVE it accepts a ticket whose age is strictly between
// -AuthGracePeriod and lifetime (lifetime <= 0 means TicketLifetime). The
// signature is compared in constant time, as text, so that no other spelling
// of the same signature bytes verifies. Errors wrap ErrTicketMalformed,
// ErrTicketSignature, ErrTicketExpired or ErrTicketNotYetValid.
func VerifyTicket(key []byte, ticket string, now time.Time, lifetime time.Duration) (userid string, issued time.Time, err error) {
	rest, ok := strings.CutPrefix(ticket, ticketPrefix)
	if !ok {
		return "", time.Time{}, fmt.Errorf("%w: missing %q prefix", ErrTicketMalformed, ticketPrefix)
	}
	escaped, rest, ok := strings.Cut(rest, ":")
	if !ok || escaped == "" {
		return "", time.Time{}, fmt.Errorf("%w: missing userid", ErrTicketMalformed)
	}
	if len(rest) != tsLen+2+ticketSigLen || rest[tsLen:tsLen+2] != "::" {
		return "", time.Time{}, fmt.Errorf("%w: bad timestamp or signature length", ErrTicketMalformed)
	}
	ts, sig := rest[:tsLen], rest[tsLen+2:]
	secs, ok := parseUpperHex(ts)
	if !ok {
		return "", time.Time{}, fmt.Errorf("%w: bad timestamp %q", ErrTicketMalformed, ts)
	}
	userid, ok = unescapeUserID(escaped)
	if !ok {
		return "", time.Time{}, fmt.Errorf("%w: bad userid escaping", ErrTicketMalformed)
	}
	plain := ticketPrefix + escaped + ":" + ts
	want := base64.StdEncoding.EncodeToString(hmacSHA256(key, plain))
	if !hmac.Equal([]byte(sig), []byte(want)) {
		return "", time.Time{}, fmt.Errorf("%w for user %q", ErrTicketSignature, userid)
	}
	issued = time.Unix(secs, 0)
	if err := checkAge(issued, now, lifetime); err != nil {
		return "", time.Time{}, fmt.Errorf("ticket of user %q: %w", userid, err)
	}
	return userid, issued, nil
}

// checkAge applies PVE's validity window, -AuthGracePeriod < age < lifetime,
// in whole seconds as PVE computes it.
func checkAge(issued, now time.Time, lifetime time.Duration) error {
	if lifetime <= 0 {
		lifetime = TicketLifetime
	}
	age := now.Unix() - issued.Unix()
	if age <= -int64(AuthGracePeriod/time.Second) {
		return fmt.Errorf("%w: issued %ds ahead of now", ErrTicketNotYetValid, -age)
	}
	if age >= int64(lifetime/time.Second) {
		return fmt.Errorf("%w: issued %ds ago", ErrTicketExpired, age)
	}
	return nil
}

// hexTimestamp formats at as PVE's 8 upper-case hex digits of unix seconds.
func hexTimestamp(at time.Time) string {
	return fmt.Sprintf("%08X", uint32(at.Unix()))
}

// parseUpperHex parses exactly 8 upper-case hex digits.
func parseUpperHex(s string) (int64, bool) {
	if len(s) != tsLen {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9') && !(c >= 'A' && c <= 'F') {
			return 0, false
		}
	}
	v, err := strconv.ParseUint(s, 16, 32)
	return int64(v), err == nil
}

// hmacSHA256 returns HMAC-SHA256(key, msg).
func hmacSHA256(key []byte, msg string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msg)) // hash.Hash never returns an error
	return m.Sum(nil)
}

// userIDNeedsEscape reports whether b must be percent-escaped in a ticket.
func userIDNeedsEscape(b byte) bool {
	return b == ':' || b == '%' || b <= ' ' || b == 0x7f
}

// escapeUserID percent-escapes the bytes of s for which userIDNeedsEscape
// holds, with upper-case hex as URI::Escape does.
func escapeUserID(s string) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if userIDNeedsEscape(c) {
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xf])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// unescapeUserID reverses escapeUserID. It accepts only the canonical
// escaping (exactly the escaped bytes, upper-case hex), so each userid has one
// ticket spelling.
func unescapeUserID(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			if userIDNeedsEscape(c) {
				return "", false
			}
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		v, ok := upperHexByte(s[i+1], s[i+2])
		if !ok || !userIDNeedsEscape(v) {
			return "", false
		}
		b.WriteByte(v)
		i += 2
	}
	return b.String(), true
}

// upperHexByte decodes two upper-case hex digits.
func upperHexByte(hi, lo byte) (byte, bool) {
	h, ok1 := upperHexNibble(hi)
	l, ok2 := upperHexNibble(lo)
	return h<<4 | l, ok1 && ok2
}

// upperHexNibble decodes one upper-case hex digit.
func upperHexNibble(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
