package translate

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
)

// UPID is PVE's "unique process ID" of a task. Clients take the node to poll
// from it and some split it on ':' (proxmoxer needs exactly 9 fields), so the
// emulator's synthetic tasks must use the real encoding.
type UPID struct {
	Node      string // PVE node name, see ValidNodeName
	PID       uint32 // worker process id
	PStart    uint32 // process start time in clock ticks since boot
	StartTime int64  // unix seconds, must fit in 32 bits to round-trip
	Type      string // task type such as TaskStart; no ':', '/' or white space
	ID        string // task subject, usually the vmid; may be empty
	User      string // user or token id, e.g. root@pam or root@pam!tok
}

// ErrInvalidUPID classifies errors returned by ParseUPID.
var ErrInvalidUPID = errors.New("invalid UPID")

// upidKeyMaxLen bounds UPID.Key so that callers can prefix it and still stay
// within Kubernetes' 63-character label and 253-character name limits.
const upidKeyMaxLen = 50

// String encodes the UPID exactly like pve-common's PVE::UPID::encode,
// including the trailing colon that gives 9 fields when split on ':'.
func (u UPID) String() string {
	return fmt.Sprintf("UPID:%s:%08X:%08X:%08X:%s:%s:%s:",
		u.Node, u.PID, u.PStart, u.StartTime, u.Type, u.ID, u.User)
}

// ParseUPID decodes a UPID with the same rules as PVE::UPID::decode: node in
// PVE's node grammar, pid of 8 hex digits, pstart of 8 or 9 hex digits,
// starttime of 8 hex digits, a non-empty type and user and a possibly empty
// id, none of them containing ':', '/' or white space, and a trailing ':'.
// Hex digits may be of either case.
//
// Two deliberate differences from Perl: a trailing newline is rejected (Perl's
// $ accepts it), and a 9-digit pstart above 0xFFFFFFFF is rejected because
// UPID.PStart has 32 bits; the emulator never issues such UPIDs. The error
// text is PVE's "unable to parse worker upid '<s>'".
func ParseUPID(s string) (UPID, error) {
	fail := func() (UPID, error) {
		return UPID{}, newParamError(ErrInvalidUPID,
			fmt.Sprintf("unable to parse worker upid '%s'", s))
	}
	rest, ok := strings.CutPrefix(s, "UPID:")
	if !ok {
		return fail()
	}
	rest, ok = strings.CutSuffix(rest, ":")
	if !ok {
		return fail()
	}
	f := strings.Split(rest, ":")
	if len(f) != 7 {
		return fail()
	}
	var u UPID
	if !ValidNodeName(f[0]) {
		return fail()
	}
	u.Node = f[0]
	pid, ok := parseHexField(f[1], 8, 8)
	if !ok {
		return fail()
	}
	pstart, ok := parseHexField(f[2], 8, 9)
	if !ok || pstart > math.MaxUint32 {
		return fail()
	}
	start, ok := parseHexField(f[3], 8, 8)
	if !ok {
		return fail()
	}
	if !validUPIDText(f[4], false) || !validUPIDText(f[5], true) || !validUPIDText(f[6], false) {
		return fail()
	}
	u.PID, u.PStart, u.StartTime = uint32(pid), uint32(pstart), int64(start)
	u.Type, u.ID, u.User = f[4], f[5], f[6]
	return u, nil
}

// parseHexField parses s as min to max hex digits of either case.
func parseHexField(s string, minLen, maxLen int) (uint64, bool) {
	if len(s) < minLen || len(s) > maxLen {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if !isHexDigit(s[i]) {
			return 0, false
		}
	}
	v, err := strconv.ParseUint(s, 16, 64)
	return v, err == nil
}

// isHexDigit reports whether c is in [0-9A-Fa-f].
func isHexDigit(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// validUPIDText reports whether s matches [^:\s/]+ (or [^:\s/]* when
// allowEmpty). White space is any Unicode space, a superset of Perl's \s on
// byte strings.
func validUPIDText(s string, allowEmpty bool) bool {
	if s == "" {
		return allowEmpty
	}
	for _, r := range s {
		if r == ':' || r == '/' || unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

// Key returns a short identifier of the task that is safe as (part of) a
// Kubernetes object name: lower case, [a-z0-9-], starting with a letter or
// digit, ending with a hex digit, at most 50 characters. It is derived from
// node, pid, pstart and starttime only, which PVE (and the emulator's UPID
// allocator) keep unique per task.
//
// A lower-case node whose key fits is kept readable:
// "<node>-<pid>-<pstart>-<starttime>" in lower-case hex, e.g.
// "pve1-0000002a-00000000-66f1a2b3". Otherwise (upper-case letters in the
// node, a long node, or an invalid zero UPID) the key is a node prefix of at
// most 14 characters plus 32 hex digits of a SHA-256 over the exact fields.
// The two forms cannot collide: the last '-' separated segment has at most 16
// characters in the first and exactly 32 in the second.
func (u UPID) Key() string {
	if ValidNodeName(u.Node) && strings.ToLower(u.Node) == u.Node {
		k := fmt.Sprintf("%s-%08x-%08x-%08x", u.Node, u.PID, u.PStart, uint64(u.StartTime))
		if len(k) <= upidKeyMaxLen {
			return k
		}
	}
	prefix := "upid"
	if ValidNodeName(u.Node) {
		prefix = strings.ToLower(u.Node)
		if len(prefix) > 14 {
			prefix = strings.TrimRight(prefix[:14], "-")
		}
	}
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s:%08X:%08X:%X",
		u.Node, u.PID, u.PStart, uint64(u.StartTime))))
	return prefix + "-" + hex.EncodeToString(sum[:16])
}
