package translate

import (
	"fmt"
	"strings"
)

// drive is a parsed disk property string: the volume and its options in
// the order given.
type drive struct {
	file string
	keys []string
	opts map[string]string
}

func parseDrive(s string) (*drive, error) {
	d := &drive{opts: map[string]string{}}
	for i, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, hasEq := strings.Cut(part, "=")
		if i == 0 && (!hasEq || strings.Contains(k, ":")) {
			d.file = part
			continue
		}
		if !hasEq {
			return nil, fmt.Errorf("invalid format - format error: '%s' is not a key=value pair", part)
		}
		if k == "file" || k == "volume" {
			d.file = v
			continue
		}
		if _, dup := d.opts[k]; dup {
			return nil, fmt.Errorf("invalid format - duplicate key in comma-separated list property: %s", k)
		}
		d.keys = append(d.keys, k)
		d.opts[k] = v
	}
	if d.file == "" {
		return nil, fmt.Errorf("invalid format - missing key in comma-separated list property: file")
	}
	return d, nil
}

func (d *drive) String() string {
	parts := []string{d.file}
	for _, k := range d.keys {
		if v, ok := d.opts[k]; ok && k != "size" {
			parts = append(parts, k+"="+v)
		}
	}
	if s, ok := d.opts["size"]; ok {
		parts = append(parts, "size="+s)
	}
	return strings.Join(parts, ",")
}

// set replaces or appends an option.
func (d *drive) set(k, v string) {
	if _, ok := d.opts[k]; !ok {
		d.keys = append(d.keys, k)
	}
	d.opts[k] = v
}
