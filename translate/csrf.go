package translate

import (
	"crypto/hmac"
	"encoding/base64"
	"time"
)

// csrfSigLen is the length of an unpadded base64 HMAC-SHA256, as PVE's
// Digest::SHA::hmac_sha256_base64 produces it.
const csrfSigLen = 43

// CSRFToken issues a CSRFPreventionToken in PVE's exact format,
//
//	<8 upper-case hex unix seconds>:<unpadded base64 of HMAC-SHA256(key, "<hex>:<userid>")>
//
// which clients echo in the CSRFPreventionToken header of every write made
// with ticket authentication. The same key may be used for tickets: ticket
// messages start with "PVE:", which is never valid hex, so the two kinds of
// signature cannot be swapped.
func CSRFToken(key []byte, userid string, at time.Time) string {
	ts := hexTimestamp(at)
	return ts + ":" + base64.RawStdEncoding.EncodeToString(hmacSHA256(key, ts+":"+userid))
}

// VerifyCSRF checks a token made by CSRFToken for userid, comparing in
// constant time and applying the ticket validity window
// (-AuthGracePeriod < age < TicketLifetime), as PVE does.
func VerifyCSRF(key []byte, userid, token string, now time.Time) bool {
	if len(token) != tsLen+1+csrfSigLen || token[tsLen] != ':' {
		return false
	}
	secs, ok := parseUpperHex(token[:tsLen])
	if !ok {
		return false
	}
	ts := token[:tsLen]
	want := ts + ":" + base64.RawStdEncoding.EncodeToString(hmacSHA256(key, ts+":"+userid))
	if !hmac.Equal([]byte(token), []byte(want)) {
		return false
	}
	return checkAge(time.Unix(secs, 0), now, TicketLifetime) == nil
}
