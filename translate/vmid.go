package translate

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
)

// VM ID bounds of PVE's pve-vmid standard option; ids outside them are
// rejected by every PVE endpoint.
const (
	MinVMID = 100
	MaxVMID = 999999999
)

// ErrInvalidVMID classifies errors returned by ParseVMID.
var ErrInvalidVMID = errors.New("invalid VM ID")

// ParseVMID parses a vmid the way PVE validates its pve-vmid parameter: the
// JSON schema first checks the integer type (an optional sign and ASCII
// digits), then the pve-vmid format (a decimal number of 3 to 9 digits without
// sign or leading zero). The error texts are PVE's own:
//
//   - "type check ('integer') failed - got '<s>'" for non-integers,
//   - "invalid format - value does not look like a valid VM ID" for integers
//     with a sign, a leading zero or fewer than 3 or more than 9 digits.
//
// Because the format check runs before the range check in PVE, its
// "minimum value" and "maximum value" errors are never produced for a vmid:
// the format alone restricts the value to [MinVMID, MaxVMID].
func ParseVMID(s string) (int, error) {
	if !isPerlInteger(s) {
		return 0, newParamError(ErrInvalidVMID,
			fmt.Sprintf("type check ('integer') failed - got '%s'", s))
	}
	if !isVMIDFormat(s) {
		return 0, newParamError(ErrInvalidVMID,
			"invalid format - value does not look like a valid VM ID")
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		// unreachable: at most 9 digits always fit an int
		return 0, fmt.Errorf("parsing vmid %q: %w", s, err)
	}
	return n, nil
}

// isPerlInteger reports whether s matches PVE's is_integer, ^[+-]?\d+$ with
// ASCII digits (a trailing newline, which Perl's $ would allow, is rejected).
func isPerlInteger(s string) bool {
	if s != "" && (s[0] == '+' || s[0] == '-') {
		s = s[1:]
	}
	return s != "" && allDigits(s)
}

// isVMIDFormat reports whether s matches pve-vmid's ^[1-9][0-9]{2,8}$.
func isVMIDFormat(s string) bool {
	return len(s) >= 3 && len(s) <= 9 && s[0] >= '1' && s[0] <= '9' && allDigits(s)
}

// allDigits reports whether s consists of ASCII digits only.
func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// VMIDFromLabels returns the vmid stored under LabelVMID. Only a value that
// ParseVMID accepts counts, so a hand-edited or corrupt label is treated as
// absent rather than producing an id PVE clients would reject.
func VMIDFromLabels(labels map[string]string) (int, bool) {
	v, ok := labels[LabelVMID]
	if !ok {
		return 0, false
	}
	n, err := ParseVMID(v)
	if err != nil {
		return 0, false
	}
	return n, true
}

// FallbackVMID derives a deterministic vmid in [MinVMID, MaxVMID] for a VM
// that was created outside the emulator and carries no LabelVMID, so that it
// keeps the same id across emulator restarts. The id is the 64-bit FNV-1a
// hash of "namespace/name" reduced into the range. When that id is already
// taken the caller retries with probe 1, 2, …, which hashes
// "namespace/name#probe" instead; probe <= 0 means no suffix.
func FallbackVMID(namespace, name string, probe int) int {
	h := fnv.New64a()
	text := namespace + "/" + name
	if probe > 0 {
		text += "#" + strconv.Itoa(probe)
	}
	_, _ = h.Write([]byte(text)) // hash.Hash never returns an error
	span := uint64(MaxVMID - MinVMID + 1)
	return MinVMID + int(h.Sum64()%span)
}
