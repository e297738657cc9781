package api

import (
	"net/http"
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

func (h *APIHandler) storageRows() []storageRow { return h.storageRowsWhere(nil) }

// storageRowsWhere is storageRows of the storages keep accepts (nil: all);
// rows left out cost no content scan (storageContent).
func (h *APIHandler) storageRowsWhere(keep func(name string) bool) []storageRow {
	out := []storageRow{}
	for _, sc := range h.cluster.StorageClasses() {
		if keep != nil && !keep(sc.Name) {
			continue
		}
		typ, shared := storageType(sc)
		out = append(out, storageRow{Storage: sc.Name, Type: typ, Content: h.storageContent(sc.Name), Active: 1, Enabled: 1, Shared: shared})
	}
	return out
}

// storageContent lists the content types a storage holds: disk images
// always, ISO images when a claim of the class carries one (see
// AnnotationISOFile), so that clients picking "the ISO storage" by
// content find it.
func (h *APIHandler) storageContent(class string) string {
	for _, pvc := range h.cluster.ISOClaimsOf(class) {
		if listable(h.cluster, pvc) {
			return "images,iso,rootdir"
		}
	}
	return "images,rootdir"
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
	name := q.r.PathValue("storage")
	for _, r := range h.storageRowsWhere(func(s string) bool { return s == name }) {
		if r.Storage == name {
			return r, nil
		}
	}
	return nil, newError(http.StatusInternalServerError, "storage '%s' does not exist", name)
}

func (h *APIHandler) getStorageConfig(q *request) (any, *apiError) {
	out := []map[string]any{}
	for _, r := range h.visibleStorage(q) {
		out = append(out, map[string]any{"storage": r.Storage, "type": r.Type, "content": r.Content, "shared": r.Shared})
	}
	return out, nil
}

func (h *APIHandler) getStorageConfigOne(q *request) (any, *apiError) {
	name := q.r.PathValue("storage")
	for _, r := range h.storageRowsWhere(func(s string) bool { return s == name }) {
		if r.Storage == name {
			return map[string]any{"storage": r.Storage, "type": r.Type, "content": r.Content, "shared": r.Shared}, nil
		}
	}
	return nil, newError(http.StatusInternalServerError, "storage '%s' does not exist", name)
}
