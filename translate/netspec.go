package translate

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrInvalidNetSpec classifies errors returned by ParseNetSpec.
var ErrInvalidNetSpec = errors.New("invalid network device")

// nicModels are the NIC models qemu-server 8.x accepts, in its order.
var nicModels = []string{
	"e1000", "e1000-82540em", "e1000-82544gc", "e1000-82545em", "e1000e",
	"i82551", "i82557b", "i82559er", "ne2k_isa", "ne2k_pci", "pcnet",
	"rtl8139", "virtio", "vmxnet3",
}

// netOptionKeys are the keys of a netN value besides the model aliases.
var netOptionKeys = map[string]bool{
	"model": true, "macaddr": true, "bridge": true, "firewall": true, "link_down": true,
	"mtu": true, "queues": true, "rate": true, "tag": true, "trunks": true,
}

// NetSpec is a parsed netN config value. Optional settings are pointers (or
// empty strings) because PVE prints an explicitly set "firewall=0" or
// "queues=0" back, and clients diff what they sent against it.
type NetSpec struct {
	Model    string // NIC model, e.g. "virtio"; required
	MAC      string // macaddr as given; empty when unset (the caller generates one)
	Bridge   string // bridge; empty when unset
	Firewall *bool  // firewall
	LinkDown *bool  // link_down
	MTU      *int   // mtu, 1 … 65520
	Queues   *int   // queues, 0 … 64
	Rate     string // rate limit in MB/s, kept verbatim as PVE keeps it; empty when unset
	Tag      *int   // VLAN tag, 1 … 4094
	Trunks   string // VLAN trunks "id[-id][;id[-id]…]"; empty when unset
}

// ParseNetSpec parses a netN value with qemu-server's property-string rules:
// comma-separated parts, blank parts ignored; a part without '=' is the model;
// "<model>=<mac>" sets both; otherwise "key=value" with the keys model,
// macaddr, bridge, firewall, link_down, mtu, queues, rate, tag and trunks.
// Booleans accept 1/on/yes/true and 0/off/no/false. Values are validated
// against PVE's schema (model enum, unicast MAC, bridge id, ranges). Integers
// are stored as numbers, so "+5" and "05" print back as "5"; everything else
// is kept as given. Errors carry PVE's wording after "invalid format - ".
func ParseNetSpec(s string) (NetSpec, error) {
	fail := func(format string, args ...any) (NetSpec, error) {
		return NetSpec{}, newParamError(ErrInvalidNetSpec,
			"invalid format - "+fmt.Sprintf(format, args...))
	}
	raw := map[string]string{}
	defaultSeen := false
	for _, part := range strings.Split(s, ",") {
		if strings.TrimLeft(part, " \t\n\v\f\r") == "" {
			continue
		}
		k, v, hasEq := strings.Cut(part, "=")
		switch {
		case hasEq && k != "" && v != "":
			if _, dup := raw[k]; dup {
				return fail("duplicate key in comma-separated list property: %s", k)
			}
			if isNICModel(k) {
				if _, dup := raw["model"]; dup {
					return fail("key alias 'model' is already defined")
				}
				raw["model"] = k
				if _, dup := raw["macaddr"]; dup {
					return fail("key 'macaddr' is already defined (via alias)")
				}
				raw["macaddr"] = v
				continue
			}
			if !netOptionKeys[k] {
				return fail("invalid key in comma-separated list property: %s", k)
			}
			raw[k] = v
		case !hasEq:
			if _, dup := raw["model"]; dup || defaultSeen {
				return fail("duplicate key in comma-separated list property: model")
			}
			defaultSeen = true
			raw["model"] = part
		default:
			return fail("missing key in comma-separated list property")
		}
	}

	var n NetSpec
	var err error
	model, ok := raw["model"]
	switch {
	case !ok:
		return fail("model: property is missing and it is not optional")
	case !isNICModel(model):
		return fail("model: value '%s' does not have a value in the enumeration '%s'",
			model, strings.Join(nicModels, ", "))
	}
	n.Model = model
	if v, ok := raw["macaddr"]; ok {
		if !validUnicastMAC(v) {
			return fail("macaddr: value does not look like a valid unicast MAC address")
		}
		n.MAC = v
	}
	if v, ok := raw["bridge"]; ok {
		if !validBridgeID(v) {
			return fail("bridge: invalid bridge ID '%s'", v)
		}
		n.Bridge = v
	}
	if n.Firewall, err = parseBoolOption("firewall", raw); err != nil {
		return fail("%v", err)
	}
	if n.LinkDown, err = parseBoolOption("link_down", raw); err != nil {
		return fail("%v", err)
	}
	if n.MTU, err = parseNetInt("mtu", raw, 1, 65520); err != nil {
		return fail("%v", err)
	}
	if n.Queues, err = parseNetInt("queues", raw, 0, 64); err != nil {
		return fail("%v", err)
	}
	if n.Tag, err = parseNetInt("tag", raw, 1, 4094); err != nil {
		return fail("%v", err)
	}
	if v, ok := raw["rate"]; ok {
		if !isPerlNumber(v) {
			return fail("rate: type check ('number') failed - got '%s'", v)
		}
		if isNegativeNumber(v) {
			return fail("rate: value must have a minimum value of 0")
		}
		n.Rate = v
	}
	if v, ok := raw["trunks"]; ok {
		if !validTrunks(v) {
			return fail("trunks: value does not match the regex pattern")
		}
		n.Trunks = v
	}
	return n, nil
}

// String prints the spec like qemu-server's print_net: the model (joined
// with the MAC as "<model>=<mac>" when one is set) first, then the remaining
// keys in sorted order: bridge, firewall, link_down, mtu, queues, rate, tag,
// trunks. Booleans print as 1 or 0. For example
// "virtio=BC:24:11:AA:BB:CC,bridge=vmbr0,firewall=1".
func (n NetSpec) String() string {
	var parts []string
	switch {
	case n.Model != "" && n.MAC != "":
		parts = append(parts, n.Model+"="+n.MAC)
	case n.Model != "":
		parts = append(parts, n.Model)
	case n.MAC != "":
		parts = append(parts, "macaddr="+n.MAC)
	}
	if n.Bridge != "" {
		parts = append(parts, "bridge="+n.Bridge)
	}
	if n.Firewall != nil {
		parts = append(parts, "firewall="+boolDigit(*n.Firewall))
	}
	if n.LinkDown != nil {
		parts = append(parts, "link_down="+boolDigit(*n.LinkDown))
	}
	if n.MTU != nil {
		parts = append(parts, "mtu="+strconv.Itoa(*n.MTU))
	}
	if n.Queues != nil {
		parts = append(parts, "queues="+strconv.Itoa(*n.Queues))
	}
	if n.Rate != "" {
		parts = append(parts, "rate="+n.Rate)
	}
	if n.Tag != nil {
		parts = append(parts, "tag="+strconv.Itoa(*n.Tag))
	}
	if n.Trunks != "" {
		parts = append(parts, "trunks="+n.Trunks)
	}
	return strings.Join(parts, ",")
}

// isNICModel reports whether m is one of nicModels.
func isNICModel(m string) bool {
	for _, x := range nicModels {
		if x == m {
			return true
		}
	}
	return false
}

// parseBoolOption reads an optional boolean option of a property string
// like PVE: parse_boolean, then a '1'/'0' type check.
func parseBoolOption(key string, raw map[string]string) (*bool, error) {
	v, ok := raw[key]
	if !ok {
		return nil, nil
	}
	switch strings.ToLower(v) {
	case "1", "on", "yes", "true":
		b := true
		return &b, nil
	case "0", "off", "no", "false":
		b := false
		return &b, nil
	}
	return nil, fmt.Errorf("%s: type check ('boolean') failed - got '%s'", key, v)
}

// parseNetInt reads an optional integer option like PVE's schema check: an
// is_integer type check, then the minimum and maximum.
func parseNetInt(key string, raw map[string]string, lo, hi int) (*int, error) {
	v, ok := raw[key]
	if !ok {
		return nil, nil
	}
	if !isPerlInteger(v) {
		return nil, fmt.Errorf("%s: type check ('integer') failed - got '%s'", key, v)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	switch {
	case err != nil && v[0] == '-', err == nil && n < int64(lo):
		return nil, fmt.Errorf("%s: value must have a minimum value of %d", key, lo)
	case err != nil, n > int64(hi):
		return nil, fmt.Errorf("%s: value must have a maximum value of %d", key, hi)
	}
	i := int(n)
	return &i, nil
}

// boolDigit prints a boolean as PVE does.
func boolDigit(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// isPerlNumber reports whether s matches PVE's is_number,
// ^[+-]?(\d+\.\d+|\d+\.|\.\d+|\d+)([eE][+-]?\d+)?$.
func isPerlNumber(s string) bool {
	if s != "" && (s[0] == '+' || s[0] == '-') {
		s = s[1:]
	}
	mant, exp := s, ""
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant, exp = s[:i], s[i+1:]
		if exp != "" && (exp[0] == '+' || exp[0] == '-') {
			exp = exp[1:]
		}
		if exp == "" || !allDigits(exp) {
			return false
		}
	}
	ip, fp, dot := strings.Cut(mant, ".")
	if !dot {
		return ip != "" && allDigits(ip)
	}
	return (ip != "" || fp != "") && allDigits(ip) && allDigits(fp)
}

// isNegativeNumber reports whether a number accepted by isPerlNumber is
// below zero: a '-' sign and a non-zero digit in the mantissa ("-0" is not).
func isNegativeNumber(s string) bool {
	if !strings.HasPrefix(s, "-") {
		return false
	}
	mant, _, _ := strings.Cut(strings.ToLower(s), "e")
	return strings.ContainsAny(mant, "123456789")
}

// validUnicastMAC reports whether s matches PVE's mac-addr format,
// ^[a-f0-9][02468ace](?::[a-f0-9]{2}){5}$ ignoring case (the I/G bit clear).
func validUnicastMAC(s string) bool {
	if len(s) != 17 {
		return false
	}
	for i := 0; i < 17; i++ {
		if i%3 == 2 {
			if s[i] != ':' {
				return false
			}
			continue
		}
		if !isHexDigit(s[i]) {
			return false
		}
	}
	return strings.ContainsRune("02468aceACE", rune(s[1]))
}

// validBridgeID reports whether s matches pve-bridge-id, ^[-_.\w\d]+$ with
// ASCII word characters.
func validBridgeID(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !isASCIIAlnum(r) && r != '-' && r != '_' && r != '.' {
			return false
		}
	}
	return true
}

// validTrunks reports whether s matches \d+(?:-\d+)?(?:;\d+(?:-\d+)?)*.
func validTrunks(s string) bool {
	for _, item := range strings.Split(s, ";") {
		lo, hi, isRange := strings.Cut(item, "-")
		if lo == "" || !allDigits(lo) || (isRange && (hi == "" || !allDigits(hi))) {
			return false
		}
	}
	return true
}
