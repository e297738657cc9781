package behaviour

import (
	"encoding/json"
	"regexp"
	"sort"
)

// What differs between two runs of the same calls on any two clusters is
// not behaviour: generated identifiers, times and addresses. normalize*
// replace them with placeholders before observations are compared.
var (
	uuidRE  = regexp.MustCompile(`[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`)
	macRE   = regexp.MustCompile(`\b[0-9A-Fa-f]{2}(?::[0-9A-Fa-f]{2}){5}\b`)
	upidRE  = regexp.MustCompile(`UPID:[^\s"]+`)
	ipv4RE  = regexp.MustCompile(`\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b`)
	ctimeRE = regexp.MustCompile(`ctime=\d+`)
	// Kubernetes' generated name suffixes (virt-launcher-x-abcde) and
	// resource versions in conflict messages.
	podRE = regexp.MustCompile(`virt-launcher-([a-z0-9-]+)-[a-z0-9]{5}\b`)
	rvRE  = regexp.MustCompile(`resourceVersion[^,;)]*`)
)

// normalizeText replaces identifiers, addresses and times in s.
func normalizeText(s string) string {
	s = upidRE.ReplaceAllString(s, "<upid>")
	s = uuidRE.ReplaceAllString(s, "<uuid>")
	s = macRE.ReplaceAllString(s, "<mac>")
	s = ipv4RE.ReplaceAllString(s, "<ip>")
	s = ctimeRE.ReplaceAllString(s, "ctime=<time>")
	s = podRE.ReplaceAllString(s, "virt-launcher-$1-<id>")
	s = rvRE.ReplaceAllString(s, "resourceVersion <rv>")
	return s
}

// volatileKeys are keys whose values are times, counters or sizes of
// what runs: they differ from look to look on one cluster.
var volatileKeys = map[string]bool{
	"digest": true, "uptime": true, "cpu": true, "mem": true, "maxmem-used": true, "netin": true, "netout": true,
	"diskread": true, "diskwrite": true, "pid": true, "starttime": true, "snaptime": true, "ctime": true,
	"balloon": true, "freemem": true, "ballooninfo": true, "blockstat": true, "nics": true, "proxmox-support": true,
	"ha": true, "pressurecpusome": true, "pressurecpufull": true, "pressureiosome": true, "pressureiofull": true,
	"pressurememorysome": true, "pressurememoryfull": true, "disk": true, "maxdisk": true,
}

// normalizeValue normalizes decoded JSON: strings as normalizeText, and
// volatile keys of objects dropped.
func normalizeValue(v any) any {
	switch x := v.(type) {
	case string:
		return normalizeText(x)
	case map[string]any:
		out := map[string]any{}
		for k, val := range x {
			if volatileKeys[k] {
				continue
			}
			out[k] = normalizeValue(val)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = normalizeValue(x[i])
		}
		return out
	}
	return v
}

func normalizeJSON(raw json.RawMessage) any {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return string(raw)
	}
	return normalizeValue(v)
}

// pick keeps only keys of an object (all when keys is empty); a list of
// objects is picked element by element and sorted by its JSON form.
func pick(v any, keys []string) any {
	if len(keys) == 0 {
		return v
	}
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for _, k := range keys {
			if val, ok := x[k]; ok {
				out[k] = val
			}
		}
		return out
	case []any:
		out := make([]any, 0, len(x))
		for _, e := range x {
			out = append(out, pick(e, keys))
		}
		sort.Slice(out, func(i, j int) bool {
			a, _ := json.Marshal(out[i])
			b, _ := json.Marshal(out[j])
			return string(a) < string(b)
		})
		return out
	}
	return v
}
