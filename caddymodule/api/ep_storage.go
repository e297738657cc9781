package api

import (
	"sort"
	"strings"

	storagev1 "k8s.io/api/storage/v1"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// storageRow is a StorageClass as a PVE storage.
type storageRow struct {
	Storage      string  `json:"storage"`
	Type         string  `json:"type"`
	Content      string  `json:"content"`
	Active       int     `json:"active"`
	Enabled      int     `json:"enabled"`
	Shared       int     `json:"shared"`
	Avail        int64   `json:"avail"`
	Total        int64   `json:"total"`
	Used         int64   `json:"used"`
	UsedFraction float64 `json:"used_fraction"`
}

// storageType guesses the PVE storage type a provisioner resembles; only
// dashboards show it.
func storageType(sc *storagev1.StorageClass) (typ string, shared int) {
	if sc == nil {
		return "dir", 0
	}
	p := strings.ToLower(sc.Provisioner)
	switch {
	case strings.Contains(p, "rbd") || strings.Contains(p, "ceph"):
		return "rbd", 1
	case strings.Contains(p, "nfs"):
		return "nfs", 1
	case strings.Contains(p, "longhorn"):
		return "lvmthin", 1
	case strings.Contains(p, "lvm") || strings.Contains(p, "local") || strings.Contains(p, "hostpath"):
		return "lvmthin", 0
	}
	return "dir", 0
}

// fill derives the fraction of the space used. Capacity is not known to
// Kubernetes for most storage (CSIStorageCapacity is optional), so Total
// and Avail stay 0 and Used is what the storage's claims take.
func (r *storageRow) fill() {
	if r.Total > 0 {
		r.UsedFraction = float64(r.Used) / float64(r.Total)
	}
}

// storageRowsWhere lists the storages keep accepts (nil: all), by id: the
// directory storage and the StorageClasses; rows left out cost no scan of
// their claims.
func (h *APIHandler) storageRowsWhere(q *request, keep func(name string) bool) []storageRow {
	out := []storageRow{}
	dir := h.LocalStorage.name()
	if keep == nil || keep(dir) {
		out = append(out, h.dirRow(q))
	}
	for _, sc := range q.c.StorageClasses() {
		if sc.Name == dir || (keep != nil && !keep(sc.Name)) {
			continue
		}
		typ, shared := storageType(sc)
		row := storageRow{Storage: sc.Name, Type: typ, Content: "images,rootdir", Active: 1, Enabled: 1, Shared: shared}
		row.Used = q.c.DiskClaimsBytes(sc.Name)
		row.fill()
		out = append(out, row)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Storage < out[j].Storage })
	return out
}

// getNodeStorage lists the storages a node can use, filtered like PVE's
// storage index: storage (one id), content (any of a list), enabled, and
// target (another node: shared storages only).
func (h *APIHandler) getNodeStorage(q *request) (any, *apiError) {
	n, e := h.node(q)
	if e != nil {
		return nil, e
	}
	var want []string
	if c, ok := q.p["content"]; ok && c != "" {
		for _, t := range strings.Split(c, ",") {
			if !storageContentTypes[t] {
				return nil, paramErr("content", "invalid format - invalid content type '%s'", t)
			}
			want = append(want, t)
		}
	}
	if _, e := q.p.boolean("enabled", false); e != nil {
		return nil, e
	}
	if _, e := q.p.boolean("format", false); e != nil {
		return nil, e
	}
	target := q.p["target"]
	if target != "" && !translate.ValidNodeName(target) {
		return nil, paramErr("target", "invalid format - value does not look like a valid node name")
	}
	out := []storageRow{}
	for _, r := range h.visibleStorage(q) {
		if s, ok := q.p["storage"]; ok && r.Storage != s {
			continue
		}
		if len(want) > 0 && !hasAnyContent(r.Content, want) {
			continue
		}
		if target != "" && target != n.Name && r.Shared == 0 {
			continue
		}
		out = append(out, r)
	}
	return out, nil
}

// storageContentTypes are PVE's content types (pve-storage-content).
var storageContentTypes = map[string]bool{"images": true, "rootdir": true, "vztmpl": true, "iso": true, "backup": true, "snippets": true, "import": true, "none": true}

func hasAnyContent(content string, want []string) bool {
	for _, have := range strings.Split(content, ",") {
		for _, w := range want {
			if have == w {
				return true
			}
		}
	}
	return false
}

func (h *APIHandler) getNodeStorageStatus(q *request) (any, *apiError) {
	if _, e := h.node(q); e != nil {
		return nil, e
	}
	name := q.pathValue("storage")
	for _, r := range h.storageRowsWhere(q, func(s string) bool { return s == name }) {
		if r.Storage == name {
			return r, nil
		}
	}
	return nil, noStorage(name)
}

func (h *APIHandler) getStorageConfig(q *request) (any, *apiError) {
	out := []map[string]any{}
	for _, r := range h.visibleStorage(q) {
		out = append(out, map[string]any{"storage": r.Storage, "type": r.Type, "content": r.Content, "shared": r.Shared})
	}
	return out, nil
}

func (h *APIHandler) getStorageConfigOne(q *request) (any, *apiError) {
	name := q.pathValue("storage")
	for _, r := range h.storageRowsWhere(q, func(s string) bool { return s == name }) {
		if r.Storage == name {
			return map[string]any{"storage": r.Storage, "type": r.Type, "content": r.Content, "shared": r.Shared}, nil
		}
	}
	return nil, noStorage(name)
}
