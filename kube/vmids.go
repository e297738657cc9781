package kube

import (
	"cmp"
	"errors"
	"fmt"
	"iter"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// ErrNotFound means no served VM has the vmid.
var ErrNotFound = errors.New("no such VM")

// AmbiguousError means more than one VM claims a vmid; a mutation on it
// would have to guess, so it is refused.
type AmbiguousError struct {
	VMID      int
	Claimants []string // namespace/name
}

func (e *AmbiguousError) Error() string {
	return fmt.Sprintf("VM %d is ambiguous: claimed by %s; address them by their own ids or fix the %s labels",
		e.VMID, strings.Join(e.Claimants, ", "), translate.LabelVMID)
}

// vmidTable assigns every VM exactly one vmid, never shared: the label when
// one VM alone claims it, otherwise a deterministic fallback id probed past
// every id already taken. Older VMs are assigned first so that a new VM
// never takes an id an existing one already shows.
//
// It is kept in sorted slices rather than maps, and its keys are the VM
// cache's own key strings (store.listKeyed): two maps and a key of its
// own cost 107 bytes per VM, these 24 (bench CacheMemory at 10,000 VMs).
// Lookups either way are binary searches. An update of a VM gives the
// informer a new key string; the table keeps the one it was built with
// (a key's copy, as before) until a VM is added, removed or relabelled.
type vmidTable struct {
	gen uint64 // the Cluster's vmidGen it was built at
	// ids are the vmids shown, ascending; keys[i] is the namespace/name
	// of the VM shown as ids[i].
	ids  []int32
	keys []string
	// byKey are the indexes of keys in key order (idOf, namespaceKeys).
	byKey     []int32
	ambiguous map[int][]string
	maxID     int
}

// vmidEntry is what the vmid table knows of a VM.
type vmidEntry struct {
	Namespace, Name   string
	CreationTimestamp metav1.Time
	// key is namespace/name: the cache's key string, which the table
	// keeps.
	key string
	// vmid is the VM's vmid label, labelled whether it has one.
	vmid     string
	labelled bool
}

func buildVMIDTable(vms []*kubevirtv1.VirtualMachine) *vmidTable {
	entries := make([]*vmidEntry, 0, len(vms))
	for _, vm := range vms {
		e := &vmidEntry{Name: vm.Name, Namespace: vm.Namespace, CreationTimestamp: vm.CreationTimestamp, key: vm.Namespace + "/" + vm.Name}
		e.vmid, e.labelled = vm.Labels[translate.LabelVMID]
		entries = append(entries, e)
	}
	return buildVMIDTableOf(entries)
}

func buildVMIDTableOf(vms []*vmidEntry) *vmidTable {
	// The assignment goes through maps; only the sorted slices made of
	// them at the end stay.
	shown := make(map[int]*vmidEntry, len(vms))
	ambiguous := map[int][]string{}
	taken := func(id int) bool {
		_, s := shown[id]
		_, a := ambiguous[id]
		return s || a
	}
	claims := map[int][]*vmidEntry{}
	var rest []*vmidEntry
	for _, vm := range vms {
		if id, ok := vmidOfLabel(vm.vmid, vm.labelled); ok {
			claims[id] = append(claims[id], vm)
			continue
		}
		rest = append(rest, vm)
	}
	for id, list := range claims {
		if len(list) == 1 {
			shown[id] = list[0]
			continue
		}
		for _, vm := range list {
			ambiguous[id] = append(ambiguous[id], vm.key)
			rest = append(rest, vm)
		}
		sort.Strings(ambiguous[id])
	}
	sort.Slice(rest, func(i, j int) bool {
		a, b := rest[i], rest[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.key < b.key
	})
	for _, vm := range rest {
		for probe := 0; ; probe++ {
			id := translate.FallbackVMID(vm.Namespace, vm.Name, probe)
			if !taken(id) {
				shown[id] = vm
				break
			}
		}
	}
	return newVMIDTable(shown, ambiguous)
}

// newVMIDTable is the table of the ids shown and the ambiguous ones.
func newVMIDTable(shown map[int]*vmidEntry, ambiguous map[int][]string) *vmidTable {
	t := &vmidTable{ids: make([]int32, 0, len(shown)), keys: make([]string, len(shown)), byKey: make([]int32, len(shown)), ambiguous: ambiguous}
	for id := range shown {
		t.ids = append(t.ids, int32(id)) // ids are at most translate.MaxVMID
	}
	slices.Sort(t.ids)
	for i, id := range t.ids {
		t.keys[i] = shown[int(id)].key
		t.byKey[i] = int32(i)
	}
	slices.SortFunc(t.byKey, func(a, b int32) int { return strings.Compare(t.keys[a], t.keys[b]) })
	if n := len(t.ids); n > 0 {
		t.maxID = int(t.ids[n-1])
	}
	return t
}

// vmidOfLabel is translate.VMIDFromLabels of a vmid label v (had: the VM
// has one).
func vmidOfLabel(v string, had bool) (int, bool) {
	if !had {
		return 0, false
	}
	n, err := translate.ParseVMID(v)
	return n, err == nil
}

// index is where id is, or would be, in t.ids, and whether it is there.
func (t *vmidTable) index(id int) (int, bool) {
	switch {
	case id < 0:
		return 0, false
	case id > math.MaxInt32:
		return len(t.ids), false
	}
	return slices.BinarySearch(t.ids, int32(id))
}

func (t *vmidTable) taken(id int) bool {
	if _, ok := t.index(id); ok {
		return true
	}
	_, ok := t.ambiguous[id]
	return ok
}

// nextFree is the lowest id at or above from that no VM shows or claims,
// or false above translate.MaxVMID. It walks the ids once rather than
// searching for each (/cluster/nextid over densely numbered VMs).
func (t *vmidTable) nextFree(from int) (int, bool) {
	i, _ := t.index(from)
	for id := from; id <= translate.MaxVMID; id++ {
		for i < len(t.ids) && int(t.ids[i]) < id {
			i++
		}
		if i < len(t.ids) && int(t.ids[i]) == id {
			continue
		}
		if _, ok := t.ambiguous[id]; !ok {
			return id, true
		}
	}
	return 0, false
}

// resolve returns the namespace/name key of vmid.
func (t *vmidTable) resolve(id int) (string, error) {
	if c, ok := t.ambiguous[id]; ok {
		return "", &AmbiguousError{VMID: id, Claimants: c}
	}
	i, ok := t.index(id)
	if !ok {
		return "", ErrNotFound
	}
	return t.keys[i], nil
}

// idOf is the vmid the VM ns/name shows, if the table has the VM.
func (t *vmidTable) idOf(ns, name string) (int, bool) {
	i, ok := slices.BinarySearchFunc(t.byKey, 0, func(k int32, _ int) int { return compareKey(t.keys[k], ns, name) })
	if !ok {
		return 0, false
	}
	return int(t.ids[t.byKey[i]]), true
}

// namespaceKeys are the namespace/name keys of the VMs of ns, in name
// order: a key prefix is a range of the sorted keys.
func (t *vmidTable) namespaceKeys(ns string) iter.Seq[string] {
	return func(yield func(string) bool) {
		prefix := ns + "/"
		i, _ := slices.BinarySearchFunc(t.byKey, prefix, func(k int32, p string) int { return strings.Compare(t.keys[k], p) })
		for ; i < len(t.byKey); i++ {
			key := t.keys[t.byKey[i]]
			if !strings.HasPrefix(key, prefix) || !yield(key) {
				return
			}
		}
	}
}

// compareKey compares key with ns+"/"+name without making the latter
// (Guests looks up every VM).
func compareKey(key, ns, name string) int {
	if len(key) <= len(ns) {
		if c := strings.Compare(key, ns[:len(key)]); c != 0 {
			return c
		}
		return -1 // key is a prefix of ns, so of ns+"/"+name
	}
	if c := strings.Compare(key[:len(ns)], ns); c != 0 {
		return c
	}
	rest := key[len(ns):]
	if rest[0] != '/' {
		return cmp.Compare(rest[0], '/')
	}
	return strings.Compare(rest[1:], name)
}

// table returns the current vmid table, rebuilding it only when a VM was
// added, removed or relabelled since the last call.
func (c *Cluster) table() *vmidTable {
	gen := c.vmidGen.Load()
	if t := c.vmidTab.Load(); t != nil && t.gen == gen {
		return t
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.vmidTab.Load(); t != nil && t.gen == gen {
		return t
	}
	keys, objs := c.vms.listKeyed()
	entries := make([]vmidEntry, len(objs))
	vms := make([]*vmidEntry, len(objs))
	for i, o := range objs {
		p := o.(*packedVM)
		e := &entries[i]
		*e = vmidEntry{Name: p.Name, Namespace: p.Namespace, CreationTimestamp: p.GetCreationTimestamp(), key: keys[i]}
		e.vmid, e.labelled = p.Labels.get(translate.LabelVMID)
		vms[i] = e
	}
	t := buildVMIDTableOf(vms)
	t.gen = gen
	c.vmidTab.Store(t)
	return t
}

// VMIDTaken tells whether id is shown by, or claimed by, any VM.
func (c *Cluster) VMIDTaken(id int) bool { return c.table().taken(id) }

// VMIDInUse tells whether id is taken by a VM the cache shows or by a
// live claim (a create in flight on any replica, or one that finished a
// moment ago whose VM is not cached yet), and on which node ("" when that
// is not known), so that /cluster/nextid never offers an id that was just
// taken.
func (c *Cluster) VMIDInUse(id int) (bool, string) {
	if g, err := c.Guest(id); err == nil {
		return true, g.Node
	}
	if c.VMIDTaken(id) || c.diskClaimsLeft(id) {
		return true, ""
	}
	return c.vmidClaimed(strconv.Itoa(id))
}

// diskClaimsLeft tells whether claims named as disks of vmid
// (vm-<vmid>-disk-<n>, base-<vmid>-disk-<n>) are still cached. PVE's
// destroy removes a VM's disks before its config, so its id is free only
// once they are gone; here the garbage collector deletes them seconds
// after the VM, and a VM given the id meanwhile would name its first disk
// vm-<vmid>-disk-1. /cluster/nextid does not offer such an id. The ids
// are gathered with the disk usage (claimTotals), not in an index of the
// informer: an index entry per vmid cost some 300 bytes per claim.
func (c *Cluster) diskClaimsLeft(vmid int) bool {
	if c.pvcs == nil {
		return false
	}
	_, ok := c.claimTotals().vmids[strconv.Itoa(vmid)]
	return ok
}

// nextIDHold is how long an id /cluster/nextid offered stays out of its
// answers.
const nextIDHold = 30 * time.Second

// idHolds are the ids /cluster/nextid offered lately, by time.
type idHolds struct {
	mu   sync.Mutex
	held map[int]time.Time
}

func (h *idHolds) expire(now time.Time) {
	for id, t := range h.held {
		if now.Sub(t) >= nextIDHold {
			delete(h.held, id)
		}
	}
}

func (h *idHolds) hold(id int, now time.Time) {
	if h.held == nil {
		h.held = map[int]time.Time{}
	}
	h.held[id] = now
}

// HoldVMID keeps id out of ReserveNextVMID's answers for a while: a client
// was told it is free (/cluster/nextid?vmid=id) or is creating it, and
// another client asking for a free id must not be given it meanwhile.
func (c *Cluster) HoldVMID(id int) {
	h := &c.nextIDs
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	// Clients that only ever ask nextid?vmid= must not grow the holds.
	h.expire(now)
	h.hold(id, now)
}

// ReserveNextVMID is NextVMID for /cluster/nextid: it skips the ids it
// offered (or HoldVMID held) in the last 30 s, and those a live claim
// holds, and holds the one it returns as long, so that two
// clients asking at once are not given the same id, nor one whose create
// is under way. The holds belong to this cluster connection; replicas
// meet at the claims.
func (c *Cluster) ReserveNextVMID(from int) (int, bool) {
	return c.reserveNextVMID(from, time.Now())
}

func (c *Cluster) reserveNextVMID(from int, now time.Time) (int, bool) {
	h := &c.nextIDs
	h.mu.Lock()
	defer h.mu.Unlock()
	h.expire(now)
	held := func(id int) bool { _, ok := h.held[id]; return ok }
	id, ok := c.NextVMID(from, func(id int) bool {
		if held(id) || c.diskClaimsLeft(id) {
			return true
		}
		claimed, _ := c.vmidClaimed(strconv.Itoa(id))
		return claimed
	})
	if ok {
		h.hold(id, now)
	}
	return id, ok
}

// NextVMID returns the lowest free vmid at or above from, like PVE's
// /cluster/nextid. reserved holds ids promised but not yet visible.
func (c *Cluster) NextVMID(from int, reserved func(int) bool) (int, bool) {
	t := c.table()
	for id := max(from, translate.MinVMID); ; id++ {
		free, ok := t.nextFree(id)
		if !ok || reserved == nil || !reserved(free) {
			return free, ok
		}
		id = free
	}
}
