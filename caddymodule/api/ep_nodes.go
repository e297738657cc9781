package api

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
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
	return h.nodeNamed(q.pathValue("node"))
}

// nodeNamed finds a node by its PVE name, or fails as pveproxy does.
func (h *APIHandler) nodeNamed(name string) (kube.Node, *apiError) {
	if n, ok := h.cluster.Node(name); ok {
		return n, nil
	}
	if name == kube.DefaultNodeName && len(h.cluster.Nodes()) == 0 {
		return h.nodes()[0], nil
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
