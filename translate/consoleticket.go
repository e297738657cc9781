package translate

import (
	"crypto/hmac"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Console ticket validity, as PVE's verify_vnc_ticket: a ticket is accepted
// from ConsoleTicketSkew before its timestamp (another node's clock may run
// ahead) until ConsoleTicketLifetime after it.
const (
	ConsoleTicketLifetime = 40 * time.Second
	ConsoleTicketSkew     = 20 * time.Second
)

const (
	consoleTicketPrefix = "PVEVNC:"
	// consolePasswordLen is the length of the random VNC password newer
	// PVE versions put in front of the ticket ("<password>:PVEVNC:...").
	consolePasswordLen = 8
)

// SignConsoleTicket issues a console (vncproxy/termproxy) ticket in PVE's
// shape,
//
//	PVEVNC:<8 upper-case hex unix seconds>::<base64 signature>
//
// Two tickets for the same caller, VM and port in the same second are
// equal; SignConsoleTicketID tells them apart.
//
// The user, the ACL path ("/vms/<vmid>") and the port are not in the text
// but in the signature (HMAC-SHA256 under key), as in PVE where they are
// the ticket's "secret data": the ticket is only valid for the same triple.
func SignConsoleTicket(key []byte, user, path string, port int, at time.Time) string {
	return SignConsoleTicketID(key, "", user, path, port, at)
}

// maxConsoleTicketID bounds the id of SignConsoleTicketID.
const maxConsoleTicketID = 32

// SignConsoleTicketID is SignConsoleTicket with a signed id (1 to 32
// letters and digits, e.g. random) in the data field of PVE's ticket
// grammar, so that every ticket is distinct:
//
//	PVEVNC:<id>:<8 upper-case hex unix seconds>::<base64 signature>
//
// An empty id gives SignConsoleTicket's form; an invalid one panics (it is
// the caller's constant or random alphabet, never user input).
func SignConsoleTicketID(key []byte, id, user, path string, port int, at time.Time) string {
	plain := consoleTicketPrefix
	if id != "" {
		if !validConsoleTicketID(id) {
			panic("translate: invalid console ticket id " + strconv.Quote(id))
		}
		plain += id + ":"
	}
	plain += hexTimestamp(at)
	return plain + "::" + base64.StdEncoding.EncodeToString(consoleMAC(key, plain, user, path, port))
}

func validConsoleTicketID(id string) bool {
	if id == "" || len(id) > maxConsoleTicketID {
		return false
	}
	for _, c := range []byte(id) {
		if !(c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z') {
			return false
		}
	}
	return true
}

// consoleMAC signs the visible part plus the bound fields, each length
// prefixed so that no two triples share a message.
func consoleMAC(key []byte, plain, user, path string, port int) []byte {
	msg := plain + "\n" + strconv.Itoa(len(user)) + ":" + user + strconv.Itoa(len(path)) + ":" + path + strconv.Itoa(port)
	return hmacSHA256(key, msg)
}

// StripConsolePassword drops the "<8 chars>:" VNC password newer PVE
// versions put in front of a console ticket.
func StripConsolePassword(ticket string) string {
	if len(ticket) > consolePasswordLen && ticket[consolePasswordLen] == ':' && !strings.HasPrefix(ticket, consoleTicketPrefix) {
		return ticket[consolePasswordLen+1:]
	}
	return ticket
}

// VerifyConsoleTicket checks a ticket made by SignConsoleTicket for user,
// path and port at now, and returns when it was issued. A leading
// "<8 chars>:" (the generated VNC password newer PVE prepends) is ignored.
// The age must lie within [-ConsoleTicketSkew, ConsoleTicketLifetime].
// Errors wrap ErrTicketMalformed, ErrTicketSignature, ErrTicketExpired or
// ErrTicketNotYetValid. Single use is the caller's business.
func VerifyConsoleTicket(key []byte, ticket, user, path string, port int, now time.Time) (time.Time, error) {
	ticket = StripConsolePassword(ticket)
	rest, ok := strings.CutPrefix(ticket, consoleTicketPrefix)
	if !ok {
		return time.Time{}, fmt.Errorf("%w: missing %q prefix", ErrTicketMalformed, consoleTicketPrefix)
	}
	idPart := "" // "<id>:" of SignConsoleTicketID
	if len(rest) > tsLen+2+ticketSigLen {
		id, after, found := strings.Cut(rest, ":")
		if !found || !validConsoleTicketID(id) {
			return time.Time{}, fmt.Errorf("%w: bad ticket id", ErrTicketMalformed)
		}
		idPart, rest = id+":", after
	}
	if len(rest) != tsLen+2+ticketSigLen || rest[tsLen:tsLen+2] != "::" {
		return time.Time{}, fmt.Errorf("%w: bad timestamp or signature length", ErrTicketMalformed)
	}
	ts, sig := rest[:tsLen], rest[tsLen+2:]
	secs, ok := parseUpperHex(ts)
	if !ok {
		return time.Time{}, fmt.Errorf("%w: bad timestamp %q", ErrTicketMalformed, ts)
	}
	want := base64.StdEncoding.EncodeToString(consoleMAC(key, consoleTicketPrefix+idPart+ts, user, path, port))
	if !hmac.Equal([]byte(sig), []byte(want)) {
		return time.Time{}, fmt.Errorf("%w for %q on %s port %d", ErrTicketSignature, user, path, port)
	}
	issued := time.Unix(secs, 0)
	age := now.Unix() - secs
	if age < -int64(ConsoleTicketSkew/time.Second) {
		return time.Time{}, fmt.Errorf("%w: issued %ds ahead of now", ErrTicketNotYetValid, -age)
	}
	if age > int64(ConsoleTicketLifetime/time.Second) {
		return time.Time{}, fmt.Errorf("%w: issued %ds ago", ErrTicketExpired, age)
	}
	return issued, nil
}
