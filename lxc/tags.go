package lxc

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
)

// Proxmox tags opt guests in to placeholder references (a handler whose
// guest is "lab/{labels.2}" serves only guests carrying its opt-in tag)
// and carry per-guest settings for them: the tags come with the cluster
// poll, so neither costs an API call.

// DefaultOptInTag is the tag a guest needs to be served through a
// placeholder reference when the handler names none.
const DefaultOptInTag = "caddy-wake"

// TagPrefix starts the tags that override settings of a guest served
// through a placeholder reference: caddy-<option>-<value>.
const TagPrefix = "caddy-"

// Tag overrides, caddy-<option>-<value>. Values cannot hold '/' or ':'
// (PVE's tag format), hence no probe path and no address.
const (
	tagPort        = "port"         // caddy-port-8080
	tagIdle        = "idle"         // caddy-idle-30m, caddy-idle-0 (never)
	tagWakeTimeout = "wake-timeout" // caddy-wake-timeout-5m
	tagProbe       = "probe"        // caddy-probe-tcp|http|none (http: GET /)
	tagStop        = "stop"         // caddy-stop-shutdown|stop|suspend
)

// pveTagRE is PVE's pve-tag format (pve-common PVE/JSONSchema.pm).
var pveTagRE = regexp.MustCompile(`(?i)^[a-z0-9_][a-z0-9_\-+.]*$`)

// ValidateTag checks a tag against PVE's tag format.
func ValidateTag(tag string) error {
	if !pveTagRE.MatchString(tag) {
		return fmt.Errorf("tag %q: PVE tags are letters, digits and _-+. (not starting with -+.)", tag)
	}
	return nil
}

// splitTags reads a "tags" value as PVE's split_list does: PVE joins tags
// with ';' (get_unique_tags) but accepts ',' and spaces too.
func splitTags(s string) []string {
	if s == "" {
		return nil
	}
	if strings.Contains(s, "\x00") {
		return strings.Split(s, "\x00")
	}
	return strings.FieldsFunc(s, func(r rune) bool {
		return r == ';' || r == ',' || r == ' ' || r == '\t' || r == '\n' || r == '\r'
	})
}

// HasTag reports whether the guest carries tag. PVE compares tags without
// regard to case unless datacenter.cfg makes them case-sensitive, and
// then only for display: so does this.
func (r Resource) HasTag(tag string) bool {
	for _, t := range r.Tags {
		if strings.EqualFold(t, tag) {
			return true
		}
	}
	return false
}

// ErrNotOptedIn is a guest that exists but lacks the opt-in tag.
var ErrNotOptedIn = errors.New("guest lacks the opt-in tag")

// errNotPolled: nothing is known before the first poll.
var errNotPolled = errors.New("cluster not polled yet")

// LookupTagged resolves ref as a placeholder reference resolved it (a
// vmid or a name; a name that does not match exactly matches a single
// guest whose name differs only in case, as DNS names do) and requires the
// guest to carry tag. It reads the last poll only: an unknown ref costs
// no request and allocates nothing. Errors wrap errNotFound,
// ErrNotOptedIn or a *templateError.
func (c *Cluster) LookupTagged(ref, tag string) (Resource, error) {
	if err := ValidateRef(ref); err != nil {
		return Resource{}, fmt.Errorf("%w: %v", errNotFound, err)
	}
	res, polled, err := c.lookupPolled(ref)
	if !polled {
		return Resource{}, errNotPolled
	}
	if errors.Is(err, errNotFound) {
		if r, ok := c.lookupFold(ref); ok {
			res, err = r, nil
			if r.Template {
				err = &templateError{res: r}
			}
		}
	}
	if err != nil {
		return res, err
	}
	if !res.HasTag(tag) {
		return res, fmt.Errorf("%s %d: %w %q", kindLabel(res.Kind), res.VMID, ErrNotOptedIn, tag)
	}
	return res, nil
}

// lookupFold finds the one guest whose name equals ref but for case.
func (c *Cluster) lookupFold(ref string) (Resource, bool) {
	if _, err := strconv.Atoi(ref); err == nil {
		return Resource{}, false
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	var found []Resource
	for name, rs := range c.byName {
		if strings.EqualFold(name, ref) {
			found = append(found, rs...)
		}
	}
	if len(found) != 1 {
		return Resource{}, false
	}
	return found[0], true
}

// IsNotServed reports a LookupTagged error that means "no such guest
// here" (unknown, not opted in, a template), as opposed to a cluster not
// polled yet.
func IsNotServed(err error) bool {
	var te *templateError
	return errors.Is(err, errNotFound) || errors.Is(err, ErrNotOptedIn) || errors.As(err, &te)
}

// IsNotPolled reports a LookupTagged before the cluster's first poll.
func IsNotPolled(err error) bool { return errors.Is(err, errNotPolled) }

// WithTags returns cfg with the guest's caddy-<option>-<value> tags
// applied (optIn itself is no override): caddy-port-<port>,
// caddy-idle-<duration>, caddy-wake-timeout-<duration>,
// caddy-probe-<tcp|http|none> and caddy-stop-<shutdown|stop|suspend>.
// ignored lists the caddy- tags it does not know (a typo, or a tag meant
// for something else); an option given twice with different values, or a
// bad value, is an error.
func (cfg GuestConfig) WithTags(tags []string, optIn string) (out GuestConfig, ignored []string, err error) {
	sorted := append([]string(nil), tags...)
	sort.Strings(sorted)
	seen := map[string]string{}
	for _, tag := range sorted {
		t := strings.ToLower(tag)
		rest, ok := strings.CutPrefix(t, TagPrefix)
		if !ok || strings.EqualFold(t, optIn) {
			continue
		}
		i := strings.LastIndexByte(rest, '-')
		if i <= 0 {
			ignored = append(ignored, tag)
			continue
		}
		opt, val := rest[:i], rest[i+1:]
		if prev, dup := seen[opt]; dup && prev != val {
			return cfg, ignored, fmt.Errorf("tags %s%s-%s and %s disagree", TagPrefix, opt, prev, tag)
		}
		seen[opt] = val
		if err := cfg.applyTag(opt, val); err != nil {
			if errors.Is(err, errUnknownTag) {
				ignored = append(ignored, tag)
				continue
			}
			return cfg, ignored, fmt.Errorf("tag %s: %w", tag, err)
		}
	}
	return cfg, ignored, nil
}

var errUnknownTag = errors.New("unknown override")

func (cfg *GuestConfig) applyTag(opt, val string) error {
	switch opt {
	case tagPort:
		p, err := strconv.Atoi(val)
		if err != nil || p < 1 || p > 65535 {
			return fmt.Errorf("port %q must be 1-65535", val)
		}
		cfg.Port = p
	case tagIdle, tagWakeTimeout:
		d, err := caddy.ParseDuration(val)
		if err != nil || d < 0 {
			return fmt.Errorf("bad duration %q", val)
		}
		if opt == tagIdle {
			cfg.IdleTimeout = d
		} else if d == 0 {
			return errors.New("wake timeout must be positive")
		} else {
			cfg.WakeTimeout = d
		}
	case tagProbe:
		switch val {
		case ProbeTCP, ProbeNone:
		case ProbeHTTP:
			if cfg.ProbePath == "" {
				cfg.ProbePath = "/"
			}
		default:
			return fmt.Errorf("probe %q must be tcp, http or none", val)
		}
		cfg.Probe = val
	case tagStop:
		switch val {
		case StopShutdown, StopStop, StopSuspend:
		default:
			return fmt.Errorf("stop method %q must be shutdown, stop or suspend", val)
		}
		cfg.StopMethod = val
	default:
		return errUnknownTag
	}
	return nil
}
