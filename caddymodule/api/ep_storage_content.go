package api

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// contentRow is a row of GET /nodes/{n}/storage/{s}/content.
type contentRow struct {
	VolID   string `json:"volid"`
	Content string `json:"content"`
	Format  string `json:"format"`
	Size    int64  `json:"size"`
	Used    int64  `json:"used"`
	VMID    int    `json:"vmid,omitempty"`
	CTime   int64  `json:"ctime"`
	Path    string `json:"path,omitempty"`
}

var diskClaimRE = regexp.MustCompile(`^vm-(\d+)-(disk-\d+|cloudinit)$`)

// AnnotationISOFile marks a claim holding an ISO image and names the file
// PVE clients see (local:iso/<file>).
const AnnotationISOFile = translate.AnnotationISOFile

// volume describes a claim as a PVE volume of storage s.
func volume(s string, pvc *corev1.PersistentVolumeClaim) contentRow {
	size := translate.ClaimInfoOf(pvc).Bytes
	row := contentRow{VolID: s + ":" + pvc.Name, Content: "images", Format: "raw", Size: size, Used: size, CTime: pvc.CreationTimestamp.Unix()}
	if f := pvc.Annotations[AnnotationISOFile]; f != "" {
		row.VolID, row.Content, row.Format = s+":iso/"+f, "iso", "iso"
	} else if m := diskClaimRE.FindStringSubmatch(pvc.Name); m != nil {
		row.VMID, _ = strconv.Atoi(m[1])
	}
	row.Path = "/dev/pvc/" + pvc.Namespace + "/" + pvc.Name
	return row
}

// getStorageContent lists the claims of the StorageClass as PVE volumes.
func (h *APIHandler) getStorageContent(q *request) (any, *apiError) {
	if _, e := h.node(q); e != nil {
		return nil, e
	}
	s := q.r.PathValue("storage")
	if !q.c.StorageClassExists(s) {
		return nil, newError(http.StatusInternalServerError, "storage '%s' does not exist", s)
	}
	content := q.p["content"]
	vmid := q.p["vmid"]
	out := []contentRow{}
	for _, pvc := range q.c.ClaimsOf(s) {
		if !listable(q.c, pvc) {
			continue
		}
		row := volume(s, pvc)
		if (content != "" && row.Content != content) || (vmid != "" && strconv.Itoa(row.VMID) != vmid) {
			continue
		}
		out = append(out, row)
	}
	return out, nil
}

// getStorageVolume describes one volume; bpg asks for it when a disk
// lacks format=.
func (h *APIHandler) getStorageVolume(q *request) (any, *apiError) {
	if _, e := h.node(q); e != nil {
		return nil, e
	}
	s := q.r.PathValue("storage")
	volid := q.r.PathValue("volume")
	name := strings.TrimPrefix(volid, s+":")
	for _, pvc := range q.c.ClaimsOf(s) {
		if !listable(q.c, pvc) {
			continue
		}
		row := volume(s, pvc)
		if row.VolID == s+":"+name || pvc.Name == name || strings.TrimPrefix(row.VolID, s+":iso/") == strings.TrimPrefix(name, "iso/") {
			return map[string]any{"path": row.Path, "format": row.Format, "size": row.Size, "used": row.Used}, nil
		}
	}
	return nil, newError(http.StatusInternalServerError, "volume '%s' does not exist", volid)
}

// listable tells whether a claim shows as a volume: an ISO image only once
// it is complete, as PVE shows a download only when it is renamed into
// place (a download running or failed, or a claim being deleted, is not
// listed; DELETE still finds it).
func listable(c *kube.Cluster, pvc *corev1.PersistentVolumeClaim) bool {
	if pvc.Annotations[AnnotationISOFile] == "" {
		return true
	}
	return pvc.DeletionTimestamp == nil && c.ClaimPopulated(pvc)
}
