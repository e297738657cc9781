package api

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// Pools, as PVE keeps them in user.cfg: a pool is a record (comment and
// storage members, see kube.PoolRecords) or a served namespace, as pools
// were before records existed; a VM's membership is its pool annotation,
// else its namespace's pool. Where a VM lives (its namespace) never
// changes with its pool.

// poolInfo is a pool as the API shows it.
type poolInfo struct {
	id, comment string
	// storage are the storage ids recorded as members.
	storage []string
	// record tells that the pool has a record.
	record bool
	// namespace tells that the served namespace of that name is the pool:
	// its VMs without a pool annotation are members.
	namespace bool
	// managed tells that the namespace was made for the pool by POST
	// /pools of earlier versions, so it goes with the pool.
	managed bool
}

// namespaceIsPool tells whether a served namespace is a pool: every one
// but the namespace VMs are created in without pool= when no default_pool
// is configured, which holds the VMs that PVE shows in no pool
// (Terraform's Telmate provider reads a VM's pool from its resource row
// and otherwise tries to take every VM out of pool "default" on each
// apply).
func (h *APIHandler) namespaceIsPool(c *kube.Cluster, ns string) bool {
	if h.DefaultPool == "" && ns == h.defaultNamespace() {
		return false
	}
	return c.Serves(ns)
}

// lookupPool finds a pool by id.
func (h *APIHandler) lookupPool(c *kube.Cluster, id string) (poolInfo, bool) {
	p := poolInfo{id: id}
	if r, ok := c.PoolRecord(id); ok {
		p.record, p.comment, p.storage = true, r.Comment, r.Storage
	}
	if !strings.Contains(id, "/") && h.namespaceIsPool(c, id) {
		np, _ := c.NamespacePool(id)
		p.namespace, p.managed = true, np.Managed
		if !p.record {
			p.comment = np.Comment
		}
	}
	return p, p.record || p.namespace
}

// pools lists every pool, by id.
func (h *APIHandler) pools(c *kube.Cluster) []poolInfo {
	var out []poolInfo
	seen := map[string]bool{}
	add := func(id string) {
		if !seen[id] {
			seen[id] = true
			if p, ok := h.lookupPool(c, id); ok {
				out = append(out, p)
			}
		}
	}
	for _, r := range c.PoolRecords() {
		add(r.ID)
	}
	for _, ns := range c.Namespaces() {
		add(ns)
	}
	slices.SortFunc(out, func(a, b poolInfo) int { return strings.Compare(a.id, b.id) })
	return out
}

// guestPool is the pool of a VM ("" for none): the one its annotation
// names, if that pool exists, else without the annotation its namespace's.
func (h *APIHandler) guestPool(c *kube.Cluster, g kube.Guest) string {
	if p, set := g.PoolAnnotation(); set {
		if p == "" {
			return ""
		}
		if _, ok := c.PoolRecord(p); ok || !strings.Contains(p, "/") && h.namespaceIsPool(c, p) {
			return p
		}
		return ""
	}
	// A VM's namespace is served: the cheap half of namespaceIsPool.
	if h.DefaultPool == "" && g.Namespace() == h.defaultNamespace() {
		return ""
	}
	return g.Namespace()
}

// poolAnnotation is the annotation that puts a VM of namespace ns into
// pool ("" for none): nil (no annotation) when ns alone says so.
func (h *APIHandler) poolAnnotation(c *kube.Cluster, ns, pool string) *string {
	implied := ""
	if h.namespaceIsPool(c, ns) {
		implied = ns
	}
	if pool == implied {
		return nil
	}
	return &pool
}

func (h *APIHandler) getPools(q *request) (any, *apiError) {
	if e := q.p.allowOnly("poolid", "type"); e != nil {
		return nil, e
	}
	typ, e := poolMemberType(q)
	if e != nil {
		return nil, e
	}
	if id, ok := q.p["poolid"]; ok {
		// PVE 8.1+: /pools?poolid=x answers a one-element list with members.
		if err := translate.ParsePoolID(id); err != nil {
			return nil, paramErr("poolid", "%v", err)
		}
		pool, e := h.poolWithMembers(q, id, typ)
		if e != nil {
			return nil, e
		}
		return []any{pool}, nil
	}
	if typ != "" {
		return nil, paramErr("poolid", "missing property required by 'type'")
	}
	out := []map[string]any{}
	for _, p := range h.pools(q.c) {
		if !h.seesPool(q, p) {
			continue
		}
		row := map[string]any{"poolid": p.id}
		if p.comment != "" {
			row["comment"] = p.comment
		}
		out = append(out, row)
	}
	return out, nil
}

// poolMemberType reads the type filter of a pool read.
func poolMemberType(q *request) (string, *apiError) {
	typ := q.p["type"]
	switch typ {
	case "", "qemu", "lxc", "storage":
		return typ, nil
	}
	return "", paramErr("type", "value '%s' does not have a value in the enumeration 'qemu, lxc, storage'", typ)
}

// getPool is the deprecated /pools/{poolid} read (one object, no poolid).
func (h *APIHandler) getPool(q *request) (any, *apiError) {
	if e := poolAllowOnly(q, "type"); e != nil {
		return nil, e
	}
	typ, e := poolMemberType(q)
	if e != nil {
		return nil, e
	}
	id := q.pathValue("poolid")
	if err := translate.ParsePoolID(id); err != nil {
		return nil, paramErr("poolid", "%v", err)
	}
	pool, e := h.poolWithMembers(q, id, typ)
	if e != nil {
		return nil, e
	}
	delete(pool, "poolid")
	return pool, nil
}

// poolWithMembers answers one pool with its members: its VMs the caller
// may audit, then its storages that exist (as PVE skips storages since
// removed).
func (h *APIHandler) poolWithMembers(q *request, id, typ string) (map[string]any, *apiError) {
	p, ok := h.lookupPool(q.c, id)
	if !ok {
		return nil, newError(http.StatusInternalServerError, "pool '%s' does not exist", id)
	}
	if !h.seesPool(q, p) {
		return nil, permErr(check{path: "/pool/" + id, privs: []string{"Pool.Audit"}})
	}
	now := time.Now()
	members := []any{}
	if typ == "" || typ == "qemu" {
		for _, g := range h.visibleGuests(q) {
			if h.guestPool(q.c, g) == id {
				members = append(members, vmResource(g, factsOf(q.c, g, now), ""))
			}
		}
	}
	if nodes := h.nodes(); len(p.storage) > 0 && len(nodes) > 0 && (typ == "" || typ == "storage") {
		for _, s := range h.storageRowsWhere(q, func(s string) bool { return slices.Contains(p.storage, s) }) {
			members = append(members, storageResource(nodes[0].Name, s))
		}
	}
	out := map[string]any{"poolid": id, "members": members}
	if p.comment != "" {
		out["comment"] = p.comment
	}
	return out, nil
}

// Pool writes. Errors carry PVE's prefixes ("create pool failed: ..."):
// PVE raises them inside its user.cfg lock, which adds them.

const (
	createPoolFailed = "create pool failed: "
	updatePoolFailed = "update pools failed: "
	deletePoolFailed = "delete pool failed: "
)

// poolID is the pool a write names: {poolid} in the path (the deprecated
// /pools/{poolid} forms), else the poolid parameter.
func poolID(q *request) string {
	if id := q.pathValue("poolid"); id != "" {
		return id
	}
	return q.p["poolid"]
}

// poolParam reads and checks the pool id of a write.
func poolParam(q *request) (string, *apiError) {
	id := poolID(q)
	if q.pathValue("poolid") == "" {
		v, ok, e := q.p.str("poolid")
		if e != nil {
			return "", e
		}
		if !ok || v == "" {
			return "", paramErr("poolid", "property is missing and it is not optional")
		}
		id = v
	}
	if err := translate.ParsePoolID(id); err != nil {
		return "", paramErr("poolid", "%v", err)
	}
	return id, nil
}

// poolAllowOnly refuses parameters a pool call does not take (poolid may
// come from the path).
func poolAllowOnly(q *request, allowed ...string) *apiError {
	return q.p.allowOnly(append(allowed, "poolid")...)
}

// poolWriteError answers a failed Kubernetes write of a pool call: a
// refusal of Kubernetes is PVE's 403 on what was written when the API acts
// as the caller; when it acts as itself, Kubernetes' words tell the
// operator which right the plugin's account lacks.
func (h *APIHandler) poolWriteError(q *request, refused check, err error) *apiError {
	if kube.IsDenied(err) {
		if h.perms.impersonate && !h.auth.noAuth {
			h.logger.Info("kubernetes refused the caller", zap.String("user", q.id.ID()), zap.String("detail", err.Error()))
			return permErr(refused)
		}
		return newError(http.StatusForbidden, "Permission check failed (%v)", err)
	}
	return kubeError(err)
}

// poolAllocate is the check a refused pool write reports.
func poolAllocate(id string) check {
	return check{path: "/pool/" + id, privs: []string{"Pool.Allocate"}}
}

// postPool creates a pool: its record.
func (h *APIHandler) postPool(q *request) (any, *apiError) {
	if e := poolAllowOnly(q, "comment"); e != nil {
		return nil, e
	}
	id, e := poolParam(q)
	if e != nil {
		return nil, e
	}
	comment, _, e := q.p.str("comment")
	if e != nil {
		return nil, e
	}
	if _, ok := h.lookupPool(q.c, id); ok {
		return nil, newError(http.StatusInternalServerError, createPoolFailed+"pool '%s' already exists", id)
	}
	if parent, nested := translate.PoolParent(id); nested {
		if _, ok := h.lookupPool(q.c, parent); !ok {
			return nil, newError(http.StatusInternalServerError, createPoolFailed+"parent '%s' of pool '%s' does not exist", parent, id)
		}
	}
	if !translate.PoolStartsWithLetter(id) {
		return nil, newError(http.StatusInternalServerError, createPoolFailed+"pool name must start with a letter")
	}
	if err := q.c.CreatePoolRecord(q.ctx(), translate.PoolRecord{ID: id, Comment: comment}); err != nil {
		if kube.IsAlreadyExists(err) {
			return nil, newError(http.StatusInternalServerError, createPoolFailed+"pool '%s' already exists", id)
		}
		return nil, h.poolWriteError(q, poolAllocate(id), err)
	}
	h.logger.Info("pool created", zap.String("user", q.id.ID()), zap.String("pool", id))
	return nil, nil
}

// poolVMChange is one VM a pool update moves from its pool to another
// ("" for none).
type poolVMChange struct {
	g        kube.Guest
	from, to string
}

// putPool updates a pool: its comment, VMs joining or (delete=1) leaving
// it, storages joining or leaving it. Everything is checked before
// anything is written, as PVE writes user.cfg only once every change was
// accepted.
func (h *APIHandler) putPool(q *request) (any, *apiError) {
	if e := poolAllowOnly(q, "comment", "vms", "storage", "delete", "allow-move"); e != nil {
		return nil, e
	}
	id, e := poolParam(q)
	if e != nil {
		return nil, e
	}
	comment, setComment, e := q.p.str("comment")
	if e != nil {
		return nil, e
	}
	remove, e := q.p.boolean("delete", false)
	if e != nil {
		return nil, e
	}
	allowMove, e := q.p.boolean("allow-move", false)
	if e != nil {
		return nil, e
	}
	vmids, e := poolVMIDs(q)
	if e != nil {
		return nil, e
	}
	storages, e := poolStorages(q)
	if e != nil {
		return nil, e
	}
	pool, ok := h.lookupPool(q.c, id)
	if !ok {
		return nil, newError(http.StatusInternalServerError, updatePoolFailed+"pool '%s' does not exist", id)
	}
	moves, e := h.poolVMChanges(q, id, vmids, remove, allowMove)
	if e != nil {
		return nil, e
	}
	storage := translate.PoolRecord{Storage: pool.storage}
	for _, s := range storages {
		switch {
		case remove && !storage.HasStorage(s):
			return nil, newError(http.StatusInternalServerError, updatePoolFailed+"Storage '%s' is not a pool member", s)
		case !remove && storage.HasStorage(s):
			return nil, newError(http.StatusInternalServerError, updatePoolFailed+"Storage '%s' is already a pool member", s)
		}
		storage.SetStorage(s, !remove)
	}
	if e := h.movePoolVMs(q, moves); e != nil {
		return nil, e
	}
	if !(setComment && comment != pool.comment) && len(storages) == 0 {
		return nil, nil
	}
	err := q.c.UpdatePoolRecord(q.ctx(), id, func(r *translate.PoolRecord) bool {
		changed := false
		if setComment && r.Comment != comment {
			r.Comment, changed = comment, true
		}
		for _, s := range storages {
			if r.HasStorage(s) == remove {
				r.SetStorage(s, !remove)
				changed = true
			}
		}
		return changed
	})
	if err != nil {
		return nil, h.poolWriteError(q, poolAllocate(id), err)
	}
	return nil, nil
}

// poolVMChanges checks what a pool update asks of each VM listed, as PVE
// does, and returns the VMs to move.
func (h *APIHandler) poolVMChanges(q *request, id string, vmids []int, remove, allowMove bool) ([]poolVMChange, *apiError) {
	var out []poolVMChange
	// The pool of each VM as the update goes on: a VM listed twice is
	// already a member the second time, as in PVE.
	planned := map[int]string{}
	for _, vmid := range vmids {
		g, err := q.c.Guest(vmid)
		var amb *kube.AmbiguousError
		switch {
		case errors.As(err, &amb):
			return nil, paramErr("vms", "%v", amb)
		case err != nil && remove:
			return nil, newError(http.StatusInternalServerError, updatePoolFailed+"VM %d is not a pool member", vmid)
		case err != nil:
			return nil, newError(http.StatusInternalServerError, updatePoolFailed+"cannot add VM %d to pool '%s': no such VM", vmid, id)
		}
		cur, seen := planned[vmid]
		if !seen {
			cur = h.guestPool(q.c, g)
		}
		switch {
		case remove && cur != id:
			return nil, newError(http.StatusInternalServerError, updatePoolFailed+"VM %d is not a pool member", vmid)
		case remove:
			planned[vmid] = ""
		case cur == id:
			return nil, newError(http.StatusInternalServerError, updatePoolFailed+"VM %d is already a pool member", vmid)
		case cur != "" && !allowMove:
			return nil, newError(http.StatusInternalServerError, updatePoolFailed+"VM %d belongs already to pool '%s' and 'allow-move' is not set", vmid, cur)
		case cur != "":
			// PVE: moving a VM out of its pool takes Pool.Allocate there.
			if e := h.authorize(q, []check{h.poolCheck(q.c, cur, "Pool.Allocate")}); e != nil {
				return nil, e
			}
			fallthrough
		default:
			planned[vmid] = id
		}
		if !seen {
			out = append(out, poolVMChange{g: g, from: cur})
		}
	}
	for i := range out {
		out[i].to = planned[out[i].g.VMID]
	}
	return out, nil
}

// movePoolVMs writes the VMs' new pools, as the caller. Under
// impersonation the caller must be allowed to patch each VM (Kubernetes
// refuses the write otherwise), so a pool never takes in a VM its
// updater could not change. A failed write takes the VMs already moved
// back.
func (h *APIHandler) movePoolVMs(q *request, moves []poolVMChange) *apiError {
	if h.perms.impersonate {
		for _, m := range moves {
			if e := h.authorize(q, []check{{path: vmPath(m.g), ns: m.g.Namespace(), pool: m.from, privs: []string{translate.PrivConfigOptions}}}); e != nil {
				return e
			}
		}
	}
	for i, m := range moves {
		err := q.c.SetGuestPool(q.ctx(), m.g, h.poolAnnotation(q.c, m.g.Namespace(), m.to))
		if err == nil {
			continue
		}
		for _, done := range moves[:i] {
			var prev *string
			if p, set := done.g.PoolAnnotation(); set {
				prev = &p
			}
			if g, gerr := q.c.Guest(done.g.VMID); gerr == nil {
				if back := q.c.SetGuestPool(q.ctx(), g, prev); back != nil {
					h.logger.Error("cannot take a VM back to its pool", zap.Int("vmid", g.VMID), zap.Error(back))
				}
			}
		}
		if errors.Is(err, kube.ErrModified) {
			return newError(http.StatusInternalServerError, updatePoolFailed+"VM %d changed while its pool was being set; try again", m.g.VMID)
		}
		return h.poolWriteError(q, check{path: vmPath(m.g), privs: []string{translate.PrivConfigOptions}}, err)
	}
	return nil
}

// poolVMIDs reads PUT's vms (pve-vmid-list).
func poolVMIDs(q *request) ([]int, *apiError) {
	var out []int
	for _, s := range translate.SplitList(q.p["vms"]) {
		id, err := translate.ParseVMID(s)
		if err != nil {
			return nil, paramErr("vms", "%v", err)
		}
		out = append(out, id)
	}
	return out, nil
}

// poolStorages reads PUT's storage (pve-storage-id-list).
func poolStorages(q *request) ([]string, *apiError) {
	list := translate.SplitList(q.p["storage"])
	for _, s := range list {
		if err := translate.ParseStorageID(s); err != nil {
			return nil, paramErr("storage", "%v", err)
		}
	}
	return list, nil
}

// deletePool deletes an empty pool: no pool nested in it, no VM, no
// storage that exists, as PVE asks. A namespace's pool goes only when the
// namespace was made for it (by earlier versions), is empty as the
// apiserver sees it, and is then deleted as the caller.
func (h *APIHandler) deletePool(q *request) (any, *apiError) {
	if e := poolAllowOnly(q); e != nil {
		return nil, e
	}
	id, e := poolParam(q)
	if e != nil {
		return nil, e
	}
	pool, ok := h.lookupPool(q.c, id)
	if !ok {
		return nil, newError(http.StatusInternalServerError, deletePoolFailed+"pool '%s' does not exist", id)
	}
	for _, p := range h.pools(q.c) {
		if p.id != id && translate.PoolWithin(p.id, id) {
			return nil, newError(http.StatusInternalServerError, deletePoolFailed+"pool '%s' is not empty (contains pool '%s')", id, p.id)
		}
	}
	for _, g := range q.c.Guests() {
		if h.guestPool(q.c, g) == id {
			return nil, newError(http.StatusInternalServerError, deletePoolFailed+"pool '%s' is not empty (contains VM %d)", id, g.VMID)
		}
	}
	for _, s := range h.storageRowsWhere(q, func(s string) bool { return slices.Contains(pool.storage, s) }) {
		return nil, newError(http.StatusInternalServerError, deletePoolFailed+"pool '%s' is not empty (contains storage '%s')", id, s.Storage)
	}
	if pool.namespace {
		if e := h.deleteNamespacePool(q, pool); e != nil {
			return nil, e
		}
	}
	if pool.record {
		err := q.c.DeletePoolRecord(q.ctx(), id)
		switch {
		case kube.IsConflict(err):
			return nil, newError(http.StatusInternalServerError, deletePoolFailed+"pool '%s' changed while it was being deleted; try again", id)
		case err != nil && !kube.IsNotFound(err):
			return nil, h.poolWriteError(q, poolAllocate(id), err)
		}
	}
	h.logger.Info("pool deleted", zap.String("user", q.id.ID()), zap.String("pool", id))
	return nil, nil
}

// deleteNamespacePool deletes the namespace that is a pool, if it was
// made for the pool and holds nothing.
func (h *APIHandler) deleteNamespacePool(q *request, pool poolInfo) *apiError {
	id := pool.id
	if !q.c.ServesAll() {
		return newError(http.StatusInternalServerError, deletePoolFailed+"cannot delete pool '%s': it is the namespace of that name, served because the `namespace` option lists it", id)
	}
	if !pool.managed {
		return notManagedPool(id)
	}
	err := q.c.DeletePool(q.ctx(), id)
	var left *kube.PoolNotEmptyError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &left):
		what := fmt.Sprintf("%s '%s'", left.Kind, left.Name)
		if left.Kind == "VirtualMachine" {
			for _, g := range q.c.Guests() {
				if g.Namespace() == id && g.Name() == left.Name {
					what = fmt.Sprintf("VM %d", g.VMID)
				}
			}
		}
		if left.Going {
			what += ", still being removed: try again shortly"
		}
		return newError(http.StatusInternalServerError, deletePoolFailed+"pool '%s' is not empty (contains %s)", id, what)
	case errors.Is(err, kube.ErrPoolNotManaged):
		return notManagedPool(id)
	case errors.Is(err, kube.ErrPoolHoldsTasks):
		return newError(http.StatusInternalServerError, deletePoolFailed+"cannot delete pool '%s': its namespace holds this API's task records (task_namespace)", id)
	case kube.IsNotFound(err):
		return newError(http.StatusInternalServerError, deletePoolFailed+"pool '%s' does not exist", id)
	case kube.IsConflict(err):
		return newError(http.StatusInternalServerError, deletePoolFailed+"pool '%s' changed while it was being deleted; try again", id)
	}
	return h.poolWriteError(q, poolAllocate(id), err)
}

// notManagedPool refuses to delete a namespace this API did not create.
func notManagedPool(id string) *apiError {
	return newError(http.StatusInternalServerError, deletePoolFailed+"cannot delete pool '%s': it is the namespace of that name, which was not created through this API (no label %s=true); delete it with Kubernetes tools if that is intended", id, translate.LabelPool)
}

// poolTarget is where a VM created or cloned into pool= goes: the
// namespace of that name when it is a pool, else (a pool that is only a
// record) the namespace it would go to without a pool, fallback. ok is
// false when there is no such pool. For compatibility the namespace VMs
// are created in without pool= is taken as pool= too, although it is no
// pool (see namespaceIsPool): such a VM is in no pool, as before.
func (h *APIHandler) poolTarget(c *kube.Cluster, pool, fallback string) (ns string, ok bool) {
	switch {
	case !strings.Contains(pool, "/") && h.namespaceIsPool(c, pool):
		return pool, true
	case translate.ParsePoolID(pool) == nil && hasRecord(c, pool):
		return fallback, true
	case pool == h.defaultNamespace() && c.Serves(pool):
		return pool, true
	}
	return fallback, false
}

func hasRecord(c *kube.Cluster, id string) bool {
	_, ok := c.PoolRecord(id)
	return ok
}

// joinPool puts a new VM into pool ("" for none), by annotation where its
// namespace does not say so.
func (h *APIHandler) joinPool(c *kube.Cluster, vm *kubevirtv1.VirtualMachine, pool string) {
	if pool != "" && !strings.Contains(pool, "/") && !h.namespaceIsPool(c, pool) && !hasRecord(c, pool) {
		pool = "" // the namespace of VMs in no pool (see poolTarget)
	}
	if a := h.poolAnnotation(c, vm.Namespace, pool); a != nil {
		if vm.Annotations == nil {
			vm.Annotations = map[string]string{}
		}
		vm.Annotations[translate.AnnotationPool] = *a
	}
}

// createNamespace is the namespace a new VM goes to: pool='s (see
// poolTarget), else the default pool's.
func (h *APIHandler) createNamespace(q *request) (string, bool) {
	if pool := q.p["pool"]; pool != "" {
		return h.poolTarget(q.c, pool, h.defaultNamespace())
	}
	return h.defaultNamespace(), true
}

// defaultNamespace is where VMs created without pool= go.
func (h *APIHandler) defaultNamespace() string {
	if h.DefaultPool != "" {
		return h.DefaultPool
	}
	if len(h.Namespaces) > 0 {
		return h.Namespaces[0]
	}
	return "default"
}
