package caddymodule

import (
	"net/http"
	"time"
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
		if !h.seesPool(q, ns) {
			continue
		}
		out = append(out, map[string]any{"poolid": ns})
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
	if !q.c.Serves(id) {
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
	return map[string]any{"poolid": id, "members": members}, nil
}
