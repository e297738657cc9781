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

// volume describes a claim as a PVE volume of storage s: a file of the
// directory storage (its size the file's, as PVE lists it, when known),
// else a disk.
func volume(s string, pvc *corev1.PersistentVolumeClaim) contentRow {
	size := translate.ClaimInfoOf(pvc).Bytes
	row := contentRow{VolID: s + ":" + pvc.Name, Content: "images", Format: "raw", Size: size, Used: size, CTime: pvc.CreationTimestamp.Unix()}
	if content, file, ok := translate.FileOf(pvc.Annotations); ok {
		row.VolID, row.Content, row.Format = s+":"+content+"/"+file, content, translate.FileFormat(content, file)
		if n := translate.FileSizeOf(pvc.Annotations); n > 0 {
			row.Size, row.Used = n, n
		}
	} else if m := diskClaimRE.FindStringSubmatch(pvc.Name); m != nil {
		row.VMID, _ = strconv.Atoi(m[1])
	}
	row.Path = kube.ClaimPath(pvc.Namespace, pvc.Name)
	return row
}

// listedVMs is what a storage listing needs of the VMs, by namespace: the
// templates by vmid (their disks show PVE's base- names,
// translate.BaseVolume), and the VMs by name, for a state claim to show
// as its VM's efidisk0 and tpmstate0 volumes (stateOf).
type listedVMs struct {
	templates map[string]bool
	byName    map[string]kube.Guest
}

// stateOwner is a VM keeping EFI/TPM state: its vmid and the volumes its
// config names for it (translate.StateVolumes).
type stateOwner struct {
	vmid    int
	volumes []string
}

func listingVMs(q *request) listedVMs {
	gs := q.c.Guests()
	out := listedVMs{templates: map[string]bool{}, byName: make(map[string]kube.Guest, len(gs))}
	for _, g := range gs {
		if g.Template() {
			out.templates[g.Namespace()+"/"+strconv.Itoa(g.VMID)] = true
		}
		out.byName[g.Namespace()+"/"+g.Name()] = g
	}
	return out
}

// stateOf is the VM ns/name as the owner of its EFI/TPM state claim. Only
// such an owner's spec is decoded: a listing reads every VM.
func (l listedVMs) stateOf(ns, name string) (stateOwner, bool) {
	g, ok := l.byName[ns+"/"+name]
	if !ok {
		return stateOwner{}, false
	}
	vm := g.VM()
	if vm == nil || vm.Spec.Template == nil {
		return stateOwner{}, false
	}
	vols := translate.StateVolumes(g.VMID, &vm.Spec.Template.Spec)
	return stateOwner{vmid: g.VMID, volumes: vols}, len(vols) > 0
}

// stateVolumeSize is what efidisk0 and tpmstate0 show (size=4M), whatever
// KubeVirt's claim holding both takes.
const stateVolumeSize = 4 << 20

// storageVolumes lists the volumes of storage s a claim holds: a file, a
// disk (a template's under its base- name), or the EFI/TPM state of a VM,
// as that VM's efidisk0 and tpmstate0 volumes (as PVE lists them, owned
// by the vmid).
func storageVolumes(s string, pvc *corev1.PersistentVolumeClaim, vms listedVMs) []contentRow {
	row := volume(s, pvc)
	if o, ok := vms.stateOf(pvc.Namespace, translate.StateClaimOwner(pvc.Name, pvc.Labels)); ok && row.VMID == 0 && row.Content == "images" {
		rows := make([]contentRow, 0, len(o.volumes))
		for _, v := range o.volumes {
			r := row
			r.VolID, r.VMID, r.Size, r.Used = s+":"+v, o.vmid, stateVolumeSize, stateVolumeSize
			rows = append(rows, r)
		}
		return rows
	}
	if row.VMID != 0 && vms.templates[pvc.Namespace+"/"+strconv.Itoa(row.VMID)] {
		row.VolID = s + ":" + translate.BaseVolume(pvc.Name)
	}
	return []contentRow{row}
}

// storageClaims lists the claims whose volumes storage s holds: for the
// directory storage its files (and the disks of a StorageClass of its
// name), for a StorageClass its claims but the files.
func (h *APIHandler) storageClaims(q *request, s string) []*corev1.PersistentVolumeClaim {
	disks := q.c.DiskClaims(s)
	if !h.isDirStorage(s) {
		return disks
	}
	return append(q.c.FileClaims(""), disks...)
}

// getStorageContent lists the volumes of a storage.
func (h *APIHandler) getStorageContent(q *request) (any, *apiError) {
	if _, e := h.node(q); e != nil {
		return nil, e
	}
	s := q.pathValue("storage")
	if !h.storageExists(q, s) {
		return nil, noStorage(s)
	}
	content := q.p["content"]
	vmid := q.p["vmid"]
	out := []contentRow{}
	vms := listingVMs(q)
	for _, pvc := range h.storageClaims(q, s) {
		if !listable(q.c, pvc) {
			continue
		}
		for _, row := range storageVolumes(s, pvc, vms) {
			if (content != "" && row.Content != content) || (vmid != "" && strconv.Itoa(row.VMID) != vmid) {
				continue
			}
			out = append(out, row)
		}
	}
	return out, nil
}

// getStorageVolume describes one volume; bpg asks for it when a disk
// lacks format=, and for a downloaded file's size.
func (h *APIHandler) getStorageVolume(q *request) (any, *apiError) {
	if _, e := h.node(q); e != nil {
		return nil, e
	}
	s := q.pathValue("storage")
	volid := q.pathValue("volume")
	if !h.storageExists(q, s) {
		return nil, noStorage(s)
	}
	want := volid
	if !strings.HasPrefix(want, s+":") {
		want = s + ":" + want
	}
	vms := listingVMs(q)
	for _, pvc := range h.storageClaims(q, s) {
		if !listable(q.c, pvc) {
			continue
		}
		for _, row := range storageVolumes(s, pvc, vms) {
			if row.VolID == want {
				return map[string]any{"path": row.Path, "format": row.Format, "size": row.Size, "used": row.Used}, nil
			}
		}
	}
	return nil, newError(http.StatusInternalServerError, "volume '%s' does not exist", volid)
}

// listable tells whether a claim shows as a volume: a file only once it is
// complete and checked, as PVE shows a download only when it is renamed
// into place (a download running or failed, or a claim being deleted, is
// not listed; DELETE still finds it).
func listable(c *kube.Cluster, pvc *corev1.PersistentVolumeClaim) bool {
	if _, _, file := translate.FileOf(pvc.Annotations); !file {
		return true
	}
	return pvc.DeletionTimestamp == nil && pvc.Annotations[translate.AnnotationFilePending] == "" && c.ClaimPopulated(pvc)
}
