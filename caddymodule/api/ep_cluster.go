package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

func (h *APIHandler) getClusterIndex(q *request) (any, *apiError) {
	return subdirs("ha", "nextid", "resources", "status", "tasks"), nil
}

func (h *APIHandler) getHAIndex(q *request) (any, *apiError) {
	return subdirs("groups", "resources", "status"), nil
}

// getClusterResources lists VMs, nodes and storage. type is PVE's enum
// (vm|storage|node|sdn); "qemu" is accepted as older tools send it.
func (h *APIHandler) getClusterResources(q *request) (any, *apiError) {
	typ, _, e := q.p.str("type")
	if e != nil {
		return nil, e
	}
	switch typ {
	case "", "vm", "node", "storage", "sdn", "qemu":
	default:
		return nil, paramErr("type", "value '%s' does not have a value in the enumeration 'vm, storage, node, sdn'", typ)
	}
	now := time.Now()
	// A pool shows (as a row, and on its VMs' rows) to who may audit it.
	seesPool := map[string]bool{}
	var poolRows []map[string]any
	if typ == "" {
		for _, p := range h.pools(q.c) {
			if seesPool[p.id] = h.seesPool(q, p); seesPool[p.id] {
				poolRows = append(poolRows, map[string]any{"id": "/pool/" + p.id, "type": "pool", "pool": p.id})
			}
		}
	}
	var rows []*guestRow
	if typ == "" || typ == "vm" || typ == "qemu" {
		rows = h.visibleRows(q, h.vmRows(q.c).rows(q.c))
	}
	// VM rows are copied from the row cache; the few pool, node and storage
	// rows are encoded here.
	body := newBody(len(rows)*rowSizeHint + 4096)
	body.b = append(body.b, '[')
	first := true
	next := func() {
		if !first {
			body.b = append(body.b, ',')
		}
		first = false
	}
	for _, p := range poolRows {
		next()
		body.appendJSON(p)
	}
	for _, row := range rows {
		next()
		body.b = row.appendResource(body.b, now, h.seesGuestPool(q, row.in.pool, seesPool))
	}
	if typ == "" || typ == "node" {
		for _, n := range h.nodes() {
			if !h.seesNode(q, n.Name) {
				continue
			}
			next()
			body.appendJSON(nodeResource(nodeFacts(q.c, n, now)))
		}
	}
	if typ == "" || typ == "storage" {
		storages := h.visibleStorage(q)
		for _, n := range h.nodes() {
			for _, s := range storages {
				next()
				body.appendJSON(storageResource(n.Name, s))
			}
		}
	}
	body.b = append(body.b, ']')
	return body, nil
}

// seesGuestPool tells whether q's caller may see pool on a VM's row;
// seen memoises the answer per pool for one listing.
func (h *APIHandler) seesGuestPool(q *request, pool string, seen map[string]bool) bool {
	if pool == "" {
		return true
	}
	ok, known := seen[pool]
	if !known {
		p, _ := h.lookupPool(q.c, pool)
		ok = h.seesPool(q, p)
		seen[pool] = ok
	}
	return ok
}

// storageResource is a storage's row on a node, as /cluster/resources and
// pool members show it.
func storageResource(node string, s storageRow) map[string]any {
	return map[string]any{
		"id": "storage/" + node + "/" + s.Storage, "type": "storage", "node": node,
		"storage": s.Storage, "status": "available", "plugintype": s.Type, "content": s.Content,
		"shared": s.Shared, "disk": s.Used, "maxdisk": s.Total,
	}
}

// getClusterStatus answers go-proxmox's Cluster() and Ansible's inventory:
// a cluster row, then one row per node.
func (h *APIHandler) getClusterStatus(q *request) (any, *apiError) {
	nodes := h.nodes()
	out := []map[string]any{{
		"type": "cluster", "id": "cluster", "name": h.ClusterName, "nodes": len(nodes), "quorate": 1, "version": 1,
	}}
	for i, n := range nodes {
		online := 0
		if n.Ready {
			online = 1
		}
		local := 0
		if i == 0 {
			local = 1
		}
		out = append(out, map[string]any{
			"type": "node", "id": "node/" + n.Name, "name": n.Name, "nodeid": i + 1,
			"ip": nodeIP(n), "local": local, "online": online, "level": "",
		})
	}
	return out, nil
}

// getNextID returns the lowest free vmid as a JSON string (Telmate and
// go-proxmox need a string), or checks vmid= and answers 400 when taken.
// Neither offers an id whose create is under way (a live claim), and an
// id offered either way is not offered again for a while: clients that
// check an id with vmid= (bpg's sequential ids) and clients that ask for
// any free one must not meet at one id before its VM exists.
func (h *APIHandler) getNextID(q *request) (any, *apiError) {
	if v, ok, e := q.p.str("vmid"); e != nil {
		return nil, e
	} else if ok {
		id, err := translate.ParseVMID(v)
		if err != nil {
			return nil, paramErr("vmid", "%v", err)
		}
		if used, _ := q.c.VMIDInUse(id); used {
			return nil, paramErr("vmid", "VM %d already exists", id)
		}
		q.c.HoldVMID(id)
		return strconv.Itoa(id), nil
	}
	id, ok := q.c.ReserveNextVMID(translate.MinVMID)
	if !ok {
		return nil, newError(http.StatusInternalServerError, "unable to get any free VMID in range [%d, %d]", translate.MinVMID, translate.MaxVMID)
	}
	return strconv.Itoa(id), nil
}
