package api

import (
	"net/http"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
)

// What a caller sees in lists: PVE leaves out what the caller may not
// audit instead of refusing the whole list.

// visibleStorage lists the storages the caller may audit or allocate on.
func (h *APIHandler) visibleStorage(q *request) []storageRow {
	return h.storageRowsWhere(q, func(s string) bool {
		return h.sees(q, "/storage/"+s, "", "", "Datastore.Audit") || h.sees(q, "/storage/"+s, "", "", "Datastore.AllocateSpace")
	})
}

// visibleGuests lists the VMs the caller may audit.
func (h *APIHandler) visibleGuests(q *request) []kube.Guest {
	all := q.c.Guests()
	if h.auth.noAuth || h.perms.allAdmin {
		return all
	}
	out := all[:0:0]
	// Under impersonation the answer depends on the namespace only: one
	// review per namespace and request, not one per VM. (With PVE roles it
	// depends on the VM's pool too: each VM is checked.)
	byNS := map[string]bool{}
	for _, g := range all {
		ok, known := byNS[g.Namespace()]
		if !h.perms.impersonate || !known {
			ok = h.seesVM(q, g)
			byNS[g.Namespace()] = ok
		}
		if ok {
			out = append(out, g)
		}
	}
	return out
}

// seesNode tells whether the caller may audit a node.
func (h *APIHandler) seesNode(q *request, name string) bool {
	return h.sees(q, "/nodes/"+name, "", "", "Sys.Audit")
}

// seesPool tells whether the caller may audit a pool.
func (h *APIHandler) seesPool(q *request, p poolInfo) bool {
	ns := ""
	if p.namespace {
		ns = p.id
	}
	return h.sees(q, "/pool/"+p.id, ns, "", "Pool.Audit")
}

// visibleTasks keeps the tasks the caller may read.
func (h *APIHandler) visibleTasks(q *request, ts []*kube.Task) []*kube.Task {
	out := ts[:0:0]
	for _, t := range ts {
		if h.mayTask(q, t) {
			out = append(out, t)
		}
	}
	return out
}

// taskForbidden is PVE's answer for someone else's task.
func taskForbidden(t *kube.Task) *apiError {
	return newError(http.StatusForbidden, "Permission check failed (/nodes/%s, Sys.Audit)", t.UPID.Node)
}
