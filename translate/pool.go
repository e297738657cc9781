package translate

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// A PVE pool is a record (a ConfigMap in the task namespace, labelled
// LabelPoolRecord) holding its id, comment and storage members; a VM's
// membership is its AnnotationPool. Served namespaces are pools too, as
// they were before records existed: a VM without the annotation is in the
// pool of its namespace (when that namespace is one). Namespaces that
// earlier versions created for POST /pools carry LabelPool and keep their
// comment in AnnotationPoolComment, which is still read.
const (
	// LabelPool is "true" on namespaces created by POST /pools of earlier
	// versions; only such a namespace is deleted with its pool.
	LabelPool = "pve.caddy-proxmox.io/pool"

	// AnnotationPoolComment holds the PVE comment of a namespace's pool
	// (read only when the pool has no record).
	AnnotationPoolComment = "pve.caddy-proxmox.io/comment"

	// AnnotationPool on a VirtualMachine names its PVE pool. "" keeps the
	// VM out of every pool, its namespace's too; without the annotation
	// the VM is in the pool of its namespace, if that is one.
	AnnotationPool = "pve.caddy-proxmox.io/pool"

	// LabelPoolRecord is "true" on the ConfigMaps that hold pools.
	LabelPoolRecord = "pve.caddy-proxmox.io/pool-record"
)

// ErrInvalidPoolID classifies errors returned by ParsePoolID.
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

// PoolStartsWithLetter is PVE's rule for new pools, on the last level of
// a nested id (checked after the format, answered as a failed create
// rather than a parameter error).
func PoolStartsWithLetter(id string) bool {
	leaf := id[strings.LastIndexByte(id, '/')+1:]
	return leaf != "" && (leaf[0] >= 'a' && leaf[0] <= 'z' || leaf[0] >= 'A' && leaf[0] <= 'Z')
}

// PoolParent is the pool a nested pool id lives in ("a/b" for "a/b/c");
// ok is false for a top-level pool.
func PoolParent(id string) (parent string, ok bool) {
	i := strings.LastIndexByte(id, '/')
	if i < 0 {
		return "", false
	}
	return id[:i], true
}

// PoolWithin tells whether pool id is ancestor or nested in it, which is
// how PVE's grants on /pool/<ancestor> reach it.
func PoolWithin(id, ancestor string) bool {
	return id == ancestor || strings.HasPrefix(id, ancestor+"/")
}

// PoolRecord is a pool as its record keeps it.
type PoolRecord struct {
	ID      string
	Comment string
	// Storage are the storage ids that are members, sorted.
	Storage []string
}

// Keys of a pool record's data.
const (
	poolDataID      = "poolid"
	poolDataComment = "comment"
	poolDataStorage = "storage"
)

// PoolRecordName is the name of the ConfigMap that holds pool id. Pool
// ids are case-sensitive and may hold '_', '.' and '/', which object names
// cannot: the name is a readable form of the id plus a hash of it, so
// that two ids never share a record.
func PoolRecordName(id string) string {
	slug := strings.Trim(strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return '-'
	}, id), "-")
	if len(slug) > 40 {
		slug = strings.TrimRight(slug[:40], "-")
	}
	sum := sha256.Sum256([]byte(id))
	if slug == "" {
		return "pve-pool-" + hex.EncodeToString(sum[:6])
	}
	return "pve-pool-" + slug + "-" + hex.EncodeToString(sum[:6])
}

// Data is the record's ConfigMap data.
func (r PoolRecord) Data() map[string]string {
	out := map[string]string{poolDataID: r.ID}
	if r.Comment != "" {
		out[poolDataComment] = r.Comment
	}
	if len(r.Storage) > 0 {
		out[poolDataStorage] = strings.Join(r.Storage, ",")
	}
	return out
}

// HasStorage tells whether a storage is a member.
func (r PoolRecord) HasStorage(id string) bool {
	_, found := slices.BinarySearch(r.Storage, id)
	return found
}

// SetStorage adds (member) or removes a storage.
func (r *PoolRecord) SetStorage(id string, member bool) {
	i, found := slices.BinarySearch(r.Storage, id)
	switch {
	case member && !found:
		r.Storage = slices.Insert(slices.Clone(r.Storage), i, id)
	case !member && found:
		r.Storage = slices.Delete(slices.Clone(r.Storage), i, i+1)
	}
}

// ParsePoolRecord reads a record's ConfigMap data; name is the
// ConfigMap's, which must be the id's (a record copied under another name
// would otherwise answer for a pool it is not).
func ParsePoolRecord(name string, data map[string]string) (PoolRecord, error) {
	id := data[poolDataID]
	if err := ParsePoolID(id); err != nil {
		return PoolRecord{}, fmt.Errorf("pool record %s: %w", name, err)
	}
	if want := PoolRecordName(id); name != want {
		return PoolRecord{}, fmt.Errorf("pool record %s: holds pool %q, whose record is %s", name, id, want)
	}
	r := PoolRecord{ID: id, Comment: data[poolDataComment]}
	for _, s := range SplitList(data[poolDataStorage]) {
		if ParseStorageID(s) == nil {
			r.SetStorage(s, true)
		}
	}
	return r, nil
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
