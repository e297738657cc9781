package translate

import (
	"errors"
	"sort"
	"strings"
)

// ErrInvalidTag classifies errors returned by ParseTags.
var ErrInvalidTag = errors.New("invalid tag")

// ParseTags parses a PVE tag list the way PVE stores it with the default
// datacenter tag-style (case-insensitive, sorted): the list is split on ';',
// ',' and white space (or only on NUL bytes if it contains one, like PVE's
// split_list), each tag must match ^[a-z0-9_][a-z0-9_\-+.]*$ ignoring case,
// and the result is lower-cased, sorted and de-duplicated. Storing this
// canonical form is what real PVE does, so clients that sort tags themselves
// (bpg) converge. An empty list gives nil. The error text is PVE's
// "invalid format - invalid characters in tag".
func ParseTags(s string) ([]string, error) {
	var parts []string
	if strings.IndexByte(s, 0) >= 0 {
		parts = strings.Split(s, "\x00")
		for len(parts) > 0 && parts[len(parts)-1] == "" {
			parts = parts[:len(parts)-1] // Perl's split drops trailing empty fields
		}
	} else {
		parts = strings.FieldsFunc(s, isTagSeparator)
	}
	var tags []string
	for _, p := range parts {
		if !validTag(p) {
			return nil, newParamError(ErrInvalidTag, "invalid format - invalid characters in tag")
		}
		tags = append(tags, p)
	}
	return canonicalTags(tags), nil
}

// FormatTags joins tags into PVE's stored form: lower-cased, sorted,
// de-duplicated and ';'-separated (bpg and go-proxmox split on ';'). Empty
// entries are dropped; the tags are expected to be valid (see ParseTags).
func FormatTags(tags []string) string {
	return strings.Join(canonicalTags(tags), ";")
}

// canonicalTags lower-cases, sorts and de-duplicates tags, dropping empty
// ones; nil for none.
func canonicalTags(tags []string) []string {
	var out []string
	for _, t := range tags {
		if t != "" {
			out = append(out, strings.ToLower(t))
		}
	}
	sort.Strings(out)
	res := out[:0]
	for i, t := range out {
		if i == 0 || t != out[i-1] {
			res = append(res, t)
		}
	}
	if len(res) == 0 {
		return nil
	}
	return res
}

// isTagSeparator reports whether r separates tags: ';', ',' or ASCII white
// space (Perl's \s).
func isTagSeparator(r rune) bool {
	switch r {
	case ';', ',', ' ', '\t', '\n', '\v', '\f', '\r':
		return true
	}
	return false
}

// validTag reports whether t matches PVE's tag pattern
// ^[a-z0-9_][a-z0-9_\-+.]*$ ignoring case.
func validTag(t string) bool {
	if t == "" {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		ok := isASCIIAlnum(rune(c)) || c == '_' || (i > 0 && (c == '-' || c == '+' || c == '.'))
		if !ok {
			return false
		}
	}
	return true
}
