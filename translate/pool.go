package translate

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// A PVE pool is a Kubernetes namespace. Namespaces made through the pools
// API carry LabelPool, which is what allows the API to delete them again,
// and keep the pool's comment in AnnotationPoolComment.
const (
	// LabelPool is "true" on namespaces created by POST /pools.
	LabelPool = "pve.caddy-proxmox.io/pool"

	// AnnotationPoolComment holds the PVE comment of a pool (of any served
	// namespace, whoever made it).
	AnnotationPoolComment = "pve.caddy-proxmox.io/comment"
)

// ErrInvalidPoolID classifies errors returned by ParsePoolID and
// PoolNamespace.
var ErrInvalidPoolID = errors.New("invalid pool id")

// poolIDPattern is PVE's pve-poolid format: up to three levels of
// [A-Za-z0-9.-_] names separated by slashes.
var poolIDPattern = regexp.MustCompile(`^[A-Za-z0-9.\-_]+(?:/[A-Za-z0-9.\-_]+){0,2}$`)

// ParsePoolID checks a poolid the way PVE's pve-poolid format does, with
// PVE's words ("invalid format - pool name '<id>' contains invalid
// characters", "... nested too deeply (max levels = 3)").
func ParsePoolID(id string) error {
	// Perl's split drops trailing empty fields before it counts.
	if len(strings.Split(strings.TrimRight(id, "/"), "/")) > 3 {
		return newParamError(ErrInvalidPoolID, fmt.Sprintf("invalid format - pool name '%s' nested too deeply (max levels = 3)", id))
	}
	if !poolIDPattern.MatchString(id) {
		return newParamError(ErrInvalidPoolID, fmt.Sprintf("invalid format - pool name '%s' contains invalid characters", id))
	}
	return nil
}

// PoolNamespace checks that a valid PVE poolid can also be the name of the
// namespace that is the pool: one level (no nested pools) and a DNS-1123
// label (lower-case letters, digits and '-', at most 63 characters). PVE's
// own rule that a new pool starts with a letter is left to the caller,
// which reports it as PVE does (not as a format error).
func PoolNamespace(id string) error {
	if err := ParsePoolID(id); err != nil {
		return err
	}
	if strings.Contains(id, "/") {
		return newParamError(ErrInvalidPoolID, fmt.Sprintf("invalid format - pool name '%s' is nested: pools are Kubernetes namespaces here, which do not nest", id))
	}
	if msgs := validation.IsDNS1123Label(id); len(msgs) > 0 {
		return newParamError(ErrInvalidPoolID, fmt.Sprintf("invalid format - pool name '%s' is not a Kubernetes namespace name: pools are namespaces here, so the name must be lower-case letters, digits and '-', start and end with a letter or digit, and be at most 63 characters", id))
	}
	return nil
}

// PoolStartsWithLetter is PVE's rule for new pools (checked after the
// format, answered as a failed create rather than a parameter error).
func PoolStartsWithLetter(id string) bool {
	return id != "" && (id[0] >= 'a' && id[0] <= 'z' || id[0] >= 'A' && id[0] <= 'Z')
}

// ParseStorageID checks a storage id the way PVE's pve-storage-id format
// does, with PVE's words.
func ParseStorageID(id string) error {
	if len(id) < 2 {
		return fmt.Errorf("invalid format - storage ID '%s' cannot be shorter than 2 characters", id)
	}
	if !storageIDRE.MatchString(id) {
		return fmt.Errorf("invalid format - storage ID '%s' contains illegal characters", id)
	}
	return nil
}

// SplitList splits a PVE list parameter (pve-vmid-list,
// pve-storage-id-list) as PVE's split_list does: on NUL bytes if there are
// any, else on commas, semicolons and white space.
func SplitList(s string) []string {
	if strings.Contains(s, "\x00") {
		return strings.Split(s, "\x00")
	}
	return strings.FieldsFunc(s, func(r rune) bool {
		return r == ',' || r == ';' || r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\f' || r == '\v'
	})
}
