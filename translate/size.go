package translate

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// ErrInvalidSize classifies errors returned by ParseDiskSize and ParseResize.
var ErrInvalidSize = errors.New("invalid size")

// Binary unit multipliers of PVE sizes; PVE's K, M, G and T are KiB … TiB.
const (
	KiB int64 = 1 << 10
	MiB int64 = 1 << 20
	GiB int64 = 1 << 30
	TiB int64 = 1 << 40
)

// ParseDiskSize parses a PVE disk size as pve-common's parse_size does for
// the disk-size format (the size= option of drives): digits with an optional
// decimal fraction and an optional unit K, M, G or T (or KiB, MiB, GiB, TiB),
// in binary units, no unit meaning bytes. A fractional byte count is
// truncated, as Perl's int() does; unlike Perl the arithmetic is exact, so
// large sizes do not lose precision. Sizes above math.MaxInt64 bytes are
// rejected. The error text is PVE's
// "value does not look like a valid disk size: <s>".
func ParseDiskSize(s string) (int64, error) {
	num, unit, ok := splitSize(s, true)
	if !ok {
		return 0, newParamError(ErrInvalidSize,
			fmt.Sprintf("value does not look like a valid disk size: %s", s))
	}
	n, ok := scaleDecimal(num, unit)
	if !ok {
		return 0, newParamError(ErrInvalidSize,
			fmt.Sprintf("value does not look like a valid disk size: %s (too large)", s))
	}
	return n, nil
}

// ParseResize parses the size parameter of PUT …/resize, which qemu-server
// restricts to the pattern \+?\d+(\.\d+)?[KMGT]? (no "iB" suffixes). With a
// leading '+' the size is relative (delta is true) and is added to the
// current size, otherwise it is the new absolute size. Fractional bytes are
// truncated; since the current size is a whole number this equals PVE's
// truncation after the addition. The error text is the JSON schema's
// "value does not match the regex pattern".
func ParseResize(s string) (delta bool, bytes int64, err error) {
	body, delta := strings.CutPrefix(s, "+")
	num, unit, ok := splitSize(body, false)
	if !ok {
		return false, 0, newParamError(ErrInvalidSize, "value does not match the regex pattern")
	}
	n, ok := scaleDecimal(num, unit)
	if !ok {
		return false, 0, newParamError(ErrInvalidSize,
			fmt.Sprintf("size %s exceeds %d bytes", s, int64(math.MaxInt64)))
	}
	return delta, n, nil
}

// splitSize splits s into its decimal number (\d+(\.\d+)?) and unit
// multiplier. allowIEC also accepts the KiB, MiB, GiB and TiB spellings.
func splitSize(s string, allowIEC bool) (num string, unit int64, ok bool) {
	unit = 1
	if allowIEC {
		if t, found := strings.CutSuffix(s, "iB"); found {
			s = t
			if s == "" || !strings.ContainsRune("KMGT", rune(s[len(s)-1])) {
				return "", 0, false
			}
		}
	}
	if s != "" {
		switch s[len(s)-1] {
		case 'K':
			unit = KiB
		case 'M':
			unit = MiB
		case 'G':
			unit = GiB
		case 'T':
			unit = TiB
		}
		if unit != 1 {
			s = s[:len(s)-1]
		}
	}
	intPart, frac, hasDot := strings.Cut(s, ".")
	if intPart == "" || !allDigits(intPart) || (hasDot && (frac == "" || !allDigits(frac))) {
		return "", 0, false
	}
	return s, unit, true
}

// scaleDecimal returns trunc(num * unit) for a decimal num of the form
// \d+(\.\d+)?, reporting false when the result exceeds math.MaxInt64.
func scaleDecimal(num string, unit int64) (int64, bool) {
	intPart, frac, _ := strings.Cut(num, ".")
	if len(num) <= 15 && frac == "" {
		// fast path: fits comfortably, check the product for overflow
		n, err := strconv.ParseInt(intPart, 10, 64)
		if err == nil && n <= math.MaxInt64/unit {
			return n * unit, true
		}
	}
	v, ok := new(big.Int).SetString(intPart+frac, 10)
	if !ok {
		return 0, false
	}
	v.Mul(v, big.NewInt(unit))
	if frac != "" {
		v.Quo(v, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(len(frac))), nil))
	}
	if !v.IsInt64() {
		return 0, false
	}
	return v.Int64(), true
}

// FormatSize prints a byte count like pve-common's format_size, which PVE
// uses for size= in drive strings: the largest of K, M, G, T that divides the
// count exactly, or the plain number of bytes. Like PVE, 0 prints as "0T"
// (zero is a multiple of every unit).
func FormatSize(bytes int64) string {
	if bytes%KiB != 0 {
		return strconv.FormatInt(bytes, 10)
	}
	kb := bytes / KiB
	if kb%1024 != 0 {
		return strconv.FormatInt(kb, 10) + "K"
	}
	mb := kb / 1024
	if mb%1024 != 0 {
		return strconv.FormatInt(mb, 10) + "M"
	}
	gb := mb / 1024
	if gb%1024 != 0 {
		return strconv.FormatInt(gb, 10) + "G"
	}
	return strconv.FormatInt(gb/1024, 10) + "T"
}

// claimAlign is the alignment CDI gives a disk image before adding the
// filesystem overhead (pkg/util DefaultAlignBlockSize).
const claimAlign = 1 << 20

// ClaimRequest is the storage request CDI gives the claim of a
// spec.storage DataVolume of diskBytes (the size the guest sees): on a
// Filesystem-mode claim the image is aligned to 1 MiB and inflated by the
// filesystem overhead (a fraction, CDIConfig status.filesystemOverhead),
// rounded up (pkg/util GetRequiredSpace); a Block-mode claim is the
// disk itself.
func ClaimRequest(diskBytes int64, overhead float64, filesystem bool) int64 {
	if !filesystem {
		return diskBytes
	}
	aligned := (diskBytes + claimAlign - 1) / claimAlign * claimAlign
	return int64(math.Ceil(float64(aligned) * (1 + overhead)))
}

// DiskBytes is the disk a claim of claimBytes holds, ClaimRequest's
// inverse: on a Filesystem-mode claim CDI sized for a spec.storage
// DataVolume, the claim less the filesystem overhead, aligned down to
// 1 MiB; otherwise the claim itself.
func DiskBytes(claimBytes int64, overhead float64, filesystem bool) int64 {
	if !filesystem || overhead <= 0 || overhead >= 1 {
		return claimBytes
	}
	disk := int64(math.Floor(float64(claimBytes)/(1+overhead))) / claimAlign * claimAlign
	if disk <= 0 {
		return claimBytes
	}
	return disk
}
