package api

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// Pools are the served namespaces.

func (h *APIHandler) getPools(q *request) (any, *apiError) {
	if id, ok := q.p["poolid"]; ok {
		// PVE 8.1+: /pools?poolid=x answers a one-element list with members.
		pool, e := h.poolWithMembers(q, id)
		if e != nil {
			return nil, e
		}
		return []any{pool}, nil
	}
	out := []map[string]any{}
	for _, ns := range q.c.Namespaces() {
		if !h.seesPool(q, ns) || h.poolOf(ns) == "" {
			continue // the namespace of VMs in no pool is no pool
		}
		row := map[string]any{"poolid": ns}
		if p, ok := q.c.Pool(ns); ok && p.Comment != "" {
			row["comment"] = p.Comment
		}
		out = append(out, row)
	}
	return out, nil
}

func (h *APIHandler) getPool(q *request) (any, *apiError) {
	pool, e := h.poolWithMembers(q, q.r.PathValue("poolid"))
	if e != nil {
		return nil, e
	}
	delete(pool, "poolid")
	return pool, nil
}

func (h *APIHandler) poolWithMembers(q *request, id string) (map[string]any, *apiError) {
	if !q.c.Serves(id) || h.poolOf(id) == "" {
		return nil, newError(http.StatusInternalServerError, "pool '%s' does not exist", id)
	}
	if !h.seesPool(q, id) {
		return nil, permErr(check{path: "/pool/" + id, privs: []string{"Pool.Audit"}})
	}
	now := time.Now()
	members := []any{}
	for _, g := range h.visibleGuests(q) {
		if g.Namespace() == id {
			members = append(members, vmResource(g, factsOf(q.c, g, now), id))
		}
	}
	out := map[string]any{"poolid": id, "members": members}
	if p, ok := q.c.Pool(id); ok && p.Comment != "" {
		out["comment"] = p.Comment
	}
	return out, nil
}

// Pool writes. A pool is a namespace, so a new pool is a new namespace
// (labelled translate.LabelPool, comment in an annotation); membership
// follows from where a VM lives and cannot change, as KubeVirt VMs cannot
// move between namespaces. Errors carry PVE's prefixes ("create pool
// failed: ..."): PVE raises them inside its user.cfg lock, which adds them.

const (
	createPoolFailed = "create pool failed: "
	updatePoolFailed = "update pools failed: "
	deletePoolFailed = "delete pool failed: "
)

// poolID is the pool a write names: {poolid} in the path (the deprecated
// /pools/{poolid} forms), else the poolid parameter.
func poolID(q *request) string {
	if id := q.r.PathValue("poolid"); id != "" {
		return id
	}
	return q.p["poolid"]
}

// poolParam reads and checks the pool id of a write; namespace asks for an
// id that can also be a new namespace's name.
func poolParam(q *request, namespace bool) (string, *apiError) {
	id := poolID(q)
	if q.r.PathValue("poolid") == "" {
		v, ok, e := q.p.str("poolid")
		if e != nil {
			return "", e
		}
		if !ok || v == "" {
			return "", paramErr("poolid", "property is missing and it is not optional")
		}
		id = v
	}
	check := translate.ParsePoolID
	if namespace {
		check = translate.PoolNamespace
	}
	if err := check(id); err != nil {
		return "", paramErr("poolid", "%v", err)
	}
	return id, nil
}

// poolAllowOnly refuses parameters a pool write does not take (poolid may
// come from the path).
func poolAllowOnly(q *request, allowed ...string) *apiError {
	return q.p.allowOnly(append(allowed, "poolid")...)
}

// poolWriteError answers a failed Kubernetes write on a pool: a refusal of
// Kubernetes is PVE's 403 on the pool when the API acts as the caller;
// when it acts as itself, Kubernetes' words tell the operator which right
// the plugin's account lacks.
func (h *APIHandler) poolWriteError(q *request, id string, err error) *apiError {
	if kube.IsDenied(err) {
		if h.perms.impersonate && !h.auth.noAuth {
			h.logger.Info("kubernetes refused the caller", zap.String("user", q.id.ID()), zap.String("detail", err.Error()))
			return permErr(check{path: "/pool/" + id, privs: []string{"Pool.Allocate"}})
		}
		return newError(http.StatusForbidden, "Permission check failed (%v)", err)
	}
	return kubeError(err)
}

// postPool creates a pool: a namespace, made as the caller.
func (h *APIHandler) postPool(q *request) (any, *apiError) {
	if e := poolAllowOnly(q, "comment"); e != nil {
		return nil, e
	}
	id, e := poolParam(q, true)
	if e != nil {
		return nil, e
	}
	comment, _, e := q.p.str("comment")
	if e != nil {
		return nil, e
	}
	if q.c.Serves(id) || q.c.NamespaceExists(id) {
		return nil, newError(http.StatusInternalServerError, createPoolFailed+"pool '%s' already exists", id)
	}
	if !q.c.ServesAll() {
		return nil, newError(http.StatusInternalServerError, createPoolFailed+"cannot create pool '%s': pools are Kubernetes namespaces, and this API serves only the namespaces of its `namespace` option; new pools can be created only when it serves all namespaces", id)
	}
	if !translate.PoolStartsWithLetter(id) {
		return nil, newError(http.StatusInternalServerError, createPoolFailed+"pool name must start with a letter")
	}
	if err := q.c.CreatePool(q.ctx(), id, comment); err != nil {
		if kube.IsAlreadyExists(err) {
			return nil, newError(http.StatusInternalServerError, createPoolFailed+"pool '%s' already exists", id)
		}
		return nil, h.poolWriteError(q, id, err)
	}
	h.logger.Info("pool created", zap.String("user", q.id.ID()), zap.String("namespace", id))
	return nil, nil
}

// putPool updates a pool's comment. Its members are the VMs of its
// namespace: listing them again is answered as done, anything that would
// move a VM in or out is refused, and storages (cluster-wide
// StorageClasses) never are members.
func (h *APIHandler) putPool(q *request) (any, *apiError) {
	if e := poolAllowOnly(q, "comment", "vms", "storage", "delete", "allow-move"); e != nil {
		return nil, e
	}
	id, e := poolParam(q, false)
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
	if _, e := q.p.boolean("allow-move", false); e != nil {
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
	pool, ok := q.c.Pool(id)
	if !ok {
		return nil, newError(http.StatusInternalServerError, updatePoolFailed+"pool '%s' does not exist", id)
	}
	// Everything is checked before anything is written, as PVE writes
	// user.cfg only once every change was accepted.
	for _, vmid := range vmids {
		if e := h.poolMemberChange(q, id, vmid, remove); e != nil {
			return nil, e
		}
	}
	if len(storages) > 0 {
		if remove {
			return nil, newError(http.StatusInternalServerError, updatePoolFailed+"Storage '%s' is not a pool member", storages[0])
		}
		return nil, newError(http.StatusInternalServerError, updatePoolFailed+"cannot add storage '%s' to pool '%s': storages are cluster-wide StorageClasses and never pool members here; a pool (namespace) holds only VMs", storages[0], id)
	}
	if !setComment || comment == pool.Comment {
		return nil, nil
	}
	if !q.c.ServesAll() {
		return nil, newError(http.StatusInternalServerError, updatePoolFailed+"cannot set the comment of pool '%s': comments are kept on the namespace, which this API watches only when it serves all namespaces (no `namespace` option)", id)
	}
	if err := q.c.SetPoolComment(q.ctx(), id, comment); err != nil {
		if kube.IsNotFound(err) {
			return nil, newError(http.StatusInternalServerError, updatePoolFailed+"pool '%s' does not exist", id)
		}
		return nil, h.poolWriteError(q, id, err)
	}
	return nil, nil
}

// poolMemberChange answers one VM of a PUT's vms: nil when the pool
// already is what the request asks for (the VM is in it and stays).
func (h *APIHandler) poolMemberChange(q *request, pool string, vmid int, remove bool) *apiError {
	g, err := q.c.Guest(vmid)
	var amb *kube.AmbiguousError
	if errors.As(err, &amb) {
		return paramErr("vms", "%v", amb)
	}
	member := err == nil && g.Namespace() == pool
	switch {
	case remove && !member:
		return newError(http.StatusInternalServerError, updatePoolFailed+"VM %d is not a pool member", vmid)
	case remove:
		return newError(http.StatusInternalServerError, updatePoolFailed+"VM %d cannot leave pool '%s': removing VMs from pools is not supported (KubeVirt VMs cannot change namespace)", vmid, pool)
	case member:
		return nil
	case err != nil:
		return newError(http.StatusInternalServerError, updatePoolFailed+"cannot add VM %d to pool '%s': no such VM (a VM joins a pool by being created or cloned into it)", vmid, pool)
	}
	return newError(http.StatusInternalServerError, updatePoolFailed+"VM %d is in pool '%s': moving VMs between pools is not supported (KubeVirt VMs cannot change namespace)", vmid, g.Namespace())
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

// deletePool deletes an empty pool made through this API, and only such:
// its namespace is deleted as the caller, after the apiserver confirmed
// that no VM, instance, claim or DataVolume is in it.
func (h *APIHandler) deletePool(q *request) (any, *apiError) {
	if e := poolAllowOnly(q); e != nil {
		return nil, e
	}
	id, e := poolParam(q, false)
	if e != nil {
		return nil, e
	}
	pool, ok := q.c.Pool(id)
	if !ok {
		return nil, newError(http.StatusInternalServerError, deletePoolFailed+"pool '%s' does not exist", id)
	}
	if !q.c.ServesAll() {
		return nil, newError(http.StatusInternalServerError, deletePoolFailed+"cannot delete pool '%s': pools are Kubernetes namespaces, and this API serves only the namespaces of its `namespace` option; pools can be deleted only when it serves all namespaces", id)
	}
	for _, g := range q.c.Guests() {
		if g.Namespace() == id {
			return nil, newError(http.StatusInternalServerError, deletePoolFailed+"pool '%s' is not empty (contains VM %d)", id, g.VMID)
		}
	}
	if !pool.Managed {
		return nil, notManagedPool(id)
	}
	err := q.c.DeletePool(q.ctx(), id)
	var left *kube.PoolNotEmptyError
	switch {
	case err == nil:
		h.logger.Info("pool deleted", zap.String("user", q.id.ID()), zap.String("namespace", id))
		return nil, nil
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
		return nil, newError(http.StatusInternalServerError, deletePoolFailed+"pool '%s' is not empty (contains %s)", id, what)
	case errors.Is(err, kube.ErrPoolNotManaged):
		return nil, notManagedPool(id)
	case errors.Is(err, kube.ErrPoolHoldsTasks):
		return nil, newError(http.StatusInternalServerError, deletePoolFailed+"cannot delete pool '%s': its namespace holds this API's task records (task_namespace)", id)
	case kube.IsNotFound(err):
		return nil, newError(http.StatusInternalServerError, deletePoolFailed+"pool '%s' does not exist", id)
	case kube.IsConflict(err):
		return nil, newError(http.StatusInternalServerError, deletePoolFailed+"pool '%s' changed while it was being deleted; try again", id)
	}
	return nil, h.poolWriteError(q, id, err)
}

// notManagedPool refuses to delete a namespace this API did not create.
func notManagedPool(id string) *apiError {
	return newError(http.StatusInternalServerError, deletePoolFailed+"cannot delete pool '%s': its namespace was not created through this API (no label %s=true); delete it with Kubernetes tools if that is intended", id, translate.LabelPool)
}

// poolOf is the PVE pool of a VM in namespace ns. The namespace a create
// without pool= falls back to (when no default_pool is configured) holds
// the VMs that PVE shows in no pool: Terraform's Telmate provider reads a
// VM's pool from its resource row and otherwise tries to take every VM out
// of pool "default" on each apply.
func (h *APIHandler) poolOf(ns string) string {
	if h.DefaultPool == "" && ns == h.defaultNamespace() {
		return ""
	}
	return ns
}

// createNamespace is the namespace a new VM goes to: pool=, else the
// default pool.
func (h *APIHandler) createNamespace(q *request) string {
	if pool := q.p["pool"]; pool != "" {
		return pool
	}
	return h.defaultNamespace()
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
