package api

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// nodes lists the PVE nodes; a cluster without Node objects still shows
// one, because every PVE path names a node.
func (h *APIHandler) nodes() []kube.Node {
	ns := h.cluster.Nodes()
	if len(ns) == 0 {
		return []kube.Node{{Name: kube.DefaultNodeName, Ready: true}}
	}
	return ns
}

// node resolves the {node} path segment like pveproxy: an unknown node is
// an error naming it.
func (h *APIHandler) node(q *request) (kube.Node, *apiError) {
	return h.nodeNamed(q.r.PathValue("node"))
}

// nodeNamed finds a node by its PVE name, or fails as pveproxy does.
func (h *APIHandler) nodeNamed(name string) (kube.Node, *apiError) {
	for _, n := range h.nodes() {
		if n.Name == name {
			return n, nil
		}
	}
	return kube.Node{}, newError(http.StatusInternalServerError, "no such cluster node '%s'", name)
}

func nodeIP(n kube.Node) string {
	if n.Obj == nil {
		return "127.0.0.1"
	}
	for _, t := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP} {
		for _, a := range n.Obj.Status.Addresses {
			if a.Type == t {
				return a.Address
			}
		}
	}
	return ""
}

// nodeListRow is a /nodes row: PVE adds the node's certificate
// fingerprint there (and only there), always as a string.
type nodeListRow struct {
	nodeRow
	SSLFingerprint string `json:"ssl_fingerprint"`
}

func (h *APIHandler) getNodes(q *request) (any, *apiError) {
	now := time.Now()
	fp := servedFingerprint(q.r)
	out := []nodeListRow{}
	for _, n := range h.nodes() {
		out = append(out, nodeListRow{nodeFacts(q.c, n, now), fp})
	}
	return out, nil
}

func (h *APIHandler) getNodeIndex(q *request) (any, *apiError) {
	if _, e := h.node(q); e != nil {
		return nil, e
	}
	return subdirs("dns", "hosts", "lxc", "network", "qemu", "query-url-metadata", "rrddata", "status", "storage", "tasks", "time", "version"), nil
}

// getNodeStatus is the node's summary. CPU and memory use come from the
// metrics poller, load, uptime and rootfs from node_exporter through
// Prometheus when configured (zero without a source), as are swap, I/O
// wait and idle; KSM has no source and stays zero.
func (h *APIHandler) getNodeStatus(q *request) (any, *apiError) {
	n, e := h.node(q)
	if e != nil {
		return nil, e
	}
	row := nodeFacts(q.c, n, time.Now())
	kernel, osImage, arch := "6.8.12-1-pve", "Kubernetes node", "x86_64"
	if n.Obj != nil {
		info := n.Obj.Status.NodeInfo
		if info.KernelVersion != "" {
			kernel = info.KernelVersion
		}
		if info.OSImage != "" {
			osImage = info.OSImage
		}
		if info.Architecture != "" {
			arch = info.Architecture
		}
	}
	free := max(row.MaxMem-row.Mem, 0)
	return map[string]any{
		"cpu":  row.CPU,
		"wait": row.wait, "idle": row.idle,
		"uptime":     row.Uptime,
		"loadavg":    loadavg(row),
		"kversion":   fmt.Sprintf("Linux %s #1 SMP (%s)", kernel, osImage),
		"pveversion": "pve-manager/" + pveVersion + "/" + pveRepoID,
		"cpuinfo": map[string]any{
			"cpus": row.MaxCPU, "cores": row.MaxCPU, "sockets": 1, "model": "KubeVirt node (" + arch + ")",
			"mhz": "2400.000", "hvm": "1", "user_hz": 100, "flags": "",
		},
		"memory":         map[string]int64{"total": row.MaxMem, "used": row.Mem, "free": free},
		"swap":           map[string]int64{"total": row.swapTotal, "used": row.swapUsed, "free": max(row.swapTotal-row.swapUsed, 0)},
		"rootfs":         map[string]int64{"total": row.MaxDisk, "used": row.Disk, "avail": row.MaxDisk - row.Disk, "free": row.MaxDisk - row.Disk},
		"ksm":            map[string]int{"shared": 0},
		"boot-info":      map[string]any{"mode": "efi", "secureboot": 0},
		"current-kernel": map[string]string{"sysname": "Linux", "release": kernel, "machine": arch, "version": "#1 SMP"},
	}, nil
}

// loadavg is PVE's three strings.
func loadavg(row nodeRow) []string {
	out := []string{"0.00", "0.00", "0.00"}
	if row.hasLoad {
		for i, l := range row.load {
			out[i] = strconv.FormatFloat(l, 'f', 2, 64)
		}
	}
	return out
}

func (h *APIHandler) getNodeVersion(q *request) (any, *apiError) {
	if _, e := h.node(q); e != nil {
		return nil, e
	}
	return h.getVersion(q)
}

func (h *APIHandler) getNodeTime(q *request) (any, *apiError) {
	if _, e := h.node(q); e != nil {
		return nil, e
	}
	now := time.Now()
	return map[string]any{"time": now.Unix(), "localtime": now.Unix(), "timezone": "UTC"}, nil
}

func (h *APIHandler) getNodeDNS(q *request) (any, *apiError) {
	if _, e := h.node(q); e != nil {
		return nil, e
	}
	return map[string]any{"search": "cluster.local"}, nil
}

func (h *APIHandler) getNodeHosts(q *request) (any, *apiError) {
	n, e := h.node(q)
	if e != nil {
		return nil, e
	}
	data := fmt.Sprintf("127.0.0.1 localhost.localdomain localhost\n%s %s\n", nodeIP(n), n.Name)
	sum := sha1.Sum([]byte(data))
	return map[string]any{"data": data, "digest": hex.EncodeToString(sum[:])}, nil
}

// getNodeNetwork shows the pod network as the default bridge vmbr0, the
// bridge VMs attach to unless they name a Multus network.
func (h *APIHandler) getNodeNetwork(q *request) (any, *apiError) {
	n, e := h.node(q)
	if e != nil {
		return nil, e
	}
	return []map[string]any{{
		"iface": "vmbr0", "type": "bridge", "active": 1, "autostart": 1, "priority": 3,
		"families": []string{"inet"}, "method": "manual", "address": nodeIP(n),
		"comments": "Kubernetes pod network\n", "bridge_ports": "", "bridge_stp": "off", "bridge_fd": "0",
	}}, nil
}

func (h *APIHandler) getNodeLXC(q *request) (any, *apiError) {
	if _, e := h.node(q); e != nil {
		return nil, e
	}
	return []any{}, nil
}

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
	for _, pvc := range h.cluster.ClaimsOf(class) {
		if pvc.Annotations[AnnotationISOFile] != "" && listable(h.cluster, pvc) {
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
