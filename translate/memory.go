package translate

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Memory bounds of PVE's memory property, in MiB.
const (
	// MinMemoryMiB is the minimum of qemu-server's "current" memory option.
	MinMemoryMiB = 16
	// MaxMemoryMiB is the largest size whose byte count fits an int64. PVE
	// itself sets no maximum; the bound only keeps conversions exact.
	MaxMemoryMiB = int64(1<<63-1) >> 20
)

// ErrInvalidMemory classifies errors returned by ParseMemoryMiB.
var ErrInvalidMemory = errors.New("invalid memory")

// ParseMemoryMiB parses the memory config value, a property string whose
// only key is "current" (the default key): "2048", "current=2048", with blank
// comma-separated parts ignored as PVE ignores them ("current=2048,").
// Anything else, including other keys, is rejected as qemu-server rejects it,
// with PVE's per-field wording prefixed by "invalid format - ".
func ParseMemoryMiB(v string) (int64, error) {
	fail := func(msg string) (int64, error) {
		return 0, newParamError(ErrInvalidMemory, "invalid format - "+msg)
	}
	var current string
	var seen bool
	for _, part := range strings.Split(v, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		key, val, hasEq := strings.Cut(part, "=")
		switch {
		case !hasEq:
			if seen {
				return fail("duplicate key in comma-separated list property: current")
			}
			current, seen = part, true
		case key == "" || val == "":
			return fail("missing key in comma-separated list property")
		case key != "current":
			return fail("invalid key in comma-separated list property: " + key)
		case seen:
			return fail("duplicate key in comma-separated list property: current")
		default:
			current, seen = val, true
		}
	}
	if !seen {
		return fail("current: property is missing and it is not optional")
	}
	if !isPerlInteger(current) {
		return fail(fmt.Sprintf("current: type check ('integer') failed - got '%s'", current))
	}
	n, err := strconv.ParseInt(current, 10, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) && current[0] != '-' {
			return fail(fmt.Sprintf("current: value must have a maximum value of %d", MaxMemoryMiB))
		}
		return fail(fmt.Sprintf("current: value must have a minimum value of %d", MinMemoryMiB))
	}
	if n < MinMemoryMiB {
		return fail(fmt.Sprintf("current: value must have a minimum value of %d", MinMemoryMiB))
	}
	if n > MaxMemoryMiB {
		return fail(fmt.Sprintf("current: value must have a maximum value of %d", MaxMemoryMiB))
	}
	return n, nil
}
