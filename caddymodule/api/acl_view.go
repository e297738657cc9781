package api

import (
	"strconv"
	"strings"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// aclPath is an ACL path, the namespace it lives in and the pool whose
// grants reach it (see covers).
type aclPath struct{ path, ns, pool string }

// resolvePath finds the namespace of an ACL path: a VM's namespace (and
// pool) for /vms/<id>, the namespace that is the pool for /pool/<id>,
// none otherwise.
func (h *APIHandler) resolvePath(q *request, p string) aclPath {
	switch {
	case strings.HasPrefix(p, "/vms/"):
		if id, err := strconv.Atoi(strings.TrimPrefix(p, "/vms/")); err == nil {
			if g, err := q.c.Guest(id); err == nil {
				return aclPath{p, g.Namespace(), h.guestPool(q.c, g)}
			}
		}
	case strings.HasPrefix(p, "/pool/"):
		return aclPath{p, h.poolCheck(q.c, strings.TrimPrefix(p, "/pool/"), "").ns, ""}
	}
	return aclPath{p, "", ""}
}

// permissionPaths are the paths /access/permissions reports on: the one
// asked for, else / and every path the caller holds grants on (without
// impersonation) or every served namespace (a RoleBinding there is a
// grant on /pool/<namespace>) and every pool (with it).
func (h *APIHandler) permissionPaths(q *request, only string) []aclPath {
	if only != "" {
		return []aclPath{h.resolvePath(q, only)}
	}
	out := []aclPath{{"/", "", ""}}
	seen := map[string]bool{"/": true}
	if h.perms.impersonate {
		for _, ns := range q.c.Namespaces() {
			seen[ns] = true
			out = append(out, aclPath{"/pool/" + ns, ns, ""})
		}
		for _, r := range q.c.PoolRecords() {
			if !seen[r.ID] {
				out = append(out, aclPath{"/pool/" + r.ID, "", ""})
			}
		}
		return out
	}
	for _, g := range h.perms.grants(q.id) {
		if !seen[g.Path] {
			seen[g.Path] = true
			out = append(out, h.resolvePath(q, g.Path))
		}
	}
	return out
}

// permissionsOf is the caller's privileges per path, as PVE's
// /access/permissions answers them ({path: {priv: 1}}). With
// impersonation it asks Kubernetes (access reviews, cached briefly);
// pools then list only the namespaced rights and the Pool.* ones,
// cluster-wide ones show on /.
func (h *APIHandler) permissionsOf(q *request, only string) map[string]map[string]int {
	out := map[string]map[string]int{}
	virtAPI := h.perms.impersonate && q.c.HasVirtAPI(q.ctx())
	for _, p := range h.permissionPaths(q, only) {
		privs := map[string]int{}
		for _, priv := range translate.AllPrivileges {
			if h.perms.impersonate && p.path != "/" && only == "" {
				if a := kube.PrivilegeAccess(priv, p.ns, virtAPI); a.Namespace == "" && a.Group != translate.GroupPVE {
					continue
				}
			}
			if h.sees(q, p.path, p.ns, p.pool, priv) {
				privs[priv] = 1
			}
		}
		if len(privs) > 0 || p.path == "/" || only != "" {
			out[p.path] = privs
		}
	}
	return out
}

// seesAccess tells whether the caller may see other users' accounts and
// permissions (PVE: Sys.Audit or User.Modify on /access).
func (h *APIHandler) seesAccess(q *request) bool {
	return h.sees(q, "/access", "", "", "Sys.Audit") || h.sees(q, "/access", "", "", "User.Modify")
}
