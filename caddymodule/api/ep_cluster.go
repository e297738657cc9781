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
	out := []any{}
	if typ == "" || typ == "vm" || typ == "qemu" {
		for _, g := range h.visibleGuests(q) {
			out = append(out, vmResource(g, factsOf(q.c, g, now), h.poolOf(g.Namespace())))
		}
	}
	if typ == "" || typ == "node" {
		for _, n := range h.nodes() {
			if !h.seesNode(q, n.Name) {
				continue
			}
			out = append(out, nodeResource(nodeFacts(q.c, n, now)))
		}
	}
	if typ == "" || typ == "storage" {
		storages := h.visibleStorage(q)
		for _, n := range h.nodes() {
			for _, s := range storages {
				out = append(out, map[string]any{
					"id": "storage/" + n.Name + "/" + s.Storage, "type": "storage", "node": n.Name,
					"storage": s.Storage, "status": "available", "plugintype": s.Type, "content": s.Content,
					"shared": s.Shared, "disk": s.Used, "maxdisk": s.Total,
				})
			}
		}
	}
	return out, nil
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
func (h *APIHandler) getNextID(q *request) (any, *apiError) {
	if v, ok, e := q.p.str("vmid"); e != nil {
		return nil, e
	} else if ok {
		id, err := translate.ParseVMID(v)
		if err != nil {
			return nil, paramErr("vmid", "%v", err)
		}
		if q.c.VMIDTaken(id) {
			return nil, paramErr("vmid", "VM %d already exists", id)
		}
		return strconv.Itoa(id), nil
	}
	id, ok := q.c.ReserveNextVMID(translate.MinVMID)
	if !ok {
		return nil, newError(http.StatusInternalServerError, "unable to get any free VMID in range [%d, %d]", translate.MinVMID, translate.MaxVMID)
	}
	return strconv.Itoa(id), nil
}
