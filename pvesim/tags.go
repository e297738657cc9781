package pvesim

import (
	"regexp"
	"sort"
	"strings"
)

// tagRE is PVE's pve-tag format (pve-common PVE/JSONSchema.pm).
var tagRE = regexp.MustCompile(`(?i)^[a-z0-9_][a-z0-9_\-+.]*$`)

// tagsValue is a guest's "tags" as PVE stores and reports it: lower case
// (datacenter.cfg tag-style is case-insensitive by default), sorted,
// without duplicates, joined with ';' (pve-guest-common
// PVE/GuestHelpers.pm get_unique_tags).
func tagsValue(tags []string) string {
	seen := map[string]bool{}
	var out []string
	for _, t := range tags {
		t = strings.ToLower(t)
		if t == "" || seen[t] {
			continue
		}
		seen[t] = true
		out = append(out, t)
	}
	sort.Strings(out)
	return strings.Join(out, ";")
}

// SetTags replaces vmid's tags, as editing them in PVE's GUI does. Tags
// that do not match PVE's pve-tag format panic: PVE refuses them.
func (s *Sim) SetTags(vmid int, tags ...string) {
	for _, t := range tags {
		if !tagRE.MatchString(t) {
			panic("pvesim: invalid characters in tag " + t)
		}
	}
	s.withGuest(vmid, func(g *guest) { g.spec.Tags = append([]string(nil), tags...) })
}
