package api

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	corev1 "k8s.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// LocalStorageConfig is the directory storage (PVE's "local", type dir):
// the files PVE keeps in a directory (ISO images, disk images to import,
// snippets) are claims here, one per file, annotated with the content type
// and the file name (see translate/files.go). Storages that are
// StorageClasses keep VM disks only, as PVE's lvmthin and rbd storages do.
type LocalStorageConfig struct {
	// Name is the storage's id (default "local", which bpg's and most
	// tools' defaults name).
	Name string `json:"name,omitempty"`
	// StorageClass holds the claims of new files. Default: a StorageClass
	// named like the storage, else KubeVirt's default virt class
	// (storageclass.kubevirt.io/is-default-virt-class), else the
	// cluster's default class.
	StorageClass string `json:"storage_class,omitempty"`
	// MaxUpload bounds an upload's size in bytes (default 64 GiB): its
	// claim is sized from the request's length.
	MaxUpload int64 `json:"max_upload,omitempty"`
}

// defaultLocalStorage is the directory storage's id unless configured.
const defaultLocalStorage = "local"

// storageIDRE is pve-storage's storage id format (pve-storage-id).
var storageIDRE = regexp.MustCompile(`^(?i:[a-z][a-z0-9\-_.]*[a-z0-9])$`)

func (l LocalStorageConfig) name() string {
	if l.Name == "" {
		return defaultLocalStorage
	}
	return l.Name
}

func (l LocalStorageConfig) validate() error {
	if !storageIDRE.MatchString(l.name()) {
		return fmt.Errorf("proxmox_api: local_storage %q is not a PVE storage id", l.name())
	}
	return nil
}

// unmarshal reads `local_storage [<name>] { storage_class <name>; max_upload <size> }`.
func (l *LocalStorageConfig) unmarshal(d *caddyfile.Dispenser) error {
	if d.NextArg() {
		l.Name = d.Val()
	}
	if d.NextArg() {
		return d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch d.Val() {
		case "storage_class":
			if !d.NextArg() {
				return d.ArgErr()
			}
			l.StorageClass = d.Val()
			if d.NextArg() {
				return d.ArgErr()
			}
		case "max_upload":
			if !d.NextArg() {
				return d.ArgErr()
			}
			n, err := translate.ParseDiskSize(d.Val())
			if err != nil || n <= 0 {
				return d.Errf("local_storage max_upload: %q is not a size such as 64G", d.Val())
			}
			l.MaxUpload = n
			if d.NextArg() {
				return d.ArgErr()
			}
		default:
			return d.Errf("local_storage: unknown option '%s'", d.Val())
		}
	}
	return nil
}

// dirContent is what the directory storage holds, sorted as PVE prints
// content lists; with a StorageClass of its name it holds that class's
// disks too.
const (
	dirContent       = "import,iso,snippets"
	dirContentImages = "images,import,iso,rootdir,snippets"
)

// isDirStorage tells whether s is the directory storage.
func (h *APIHandler) isDirStorage(s string) bool { return s == h.LocalStorage.name() }

// storageExists tells whether s is a storage: the directory storage or a
// StorageClass.
func (h *APIHandler) storageExists(q *request, s string) bool {
	return h.isDirStorage(s) || q.c.StorageClassExists(s)
}

// noStorage is PVE's answer for a storage id that is not configured.
func noStorage(s string) *apiError {
	return newError(http.StatusInternalServerError, "storage '%s' does not exist", s)
}

// fileClass is the StorageClass new files' claims go to (see
// LocalStorageConfig.StorageClass).
func (h *APIHandler) fileClass(q *request) (string, *apiError) {
	sc := h.LocalStorage.StorageClass
	switch {
	case sc != "":
	case q.c.StorageClassExists(h.LocalStorage.name()):
		sc = h.LocalStorage.name()
	default:
		sc = q.c.DefaultStorageClass()
	}
	if sc == "" {
		return "", newError(http.StatusInternalServerError, "storage '%s' has nowhere to keep files: the cluster has no default StorageClass (set local_storage's storage_class)", h.LocalStorage.name())
	}
	if !q.c.StorageClassExists(sc) {
		return "", newError(http.StatusInternalServerError, "storage '%s' keeps files on StorageClass '%s', which does not exist", h.LocalStorage.name(), sc)
	}
	return sc, nil
}

// fileDestination is where a new file's claim goes: the namespace VMs are
// created in without pool, and fileClass; verb words the refusals.
func (h *APIHandler) fileDestination(q *request, verb string) (ns, class string, e *apiError) {
	if !q.c.HasCDI() {
		return "", "", newError(http.StatusInternalServerError, "%v", kube.ErrNoCDI)
	}
	ns = h.defaultNamespace()
	if !q.c.Serves(ns) {
		return "", "", newError(http.StatusInternalServerError, "cannot %s: namespace '%s' (where VMs are created without pool) is not served", verb, ns)
	}
	class, e = h.fileClass(q)
	return ns, class, e
}

// dirRow is the directory storage's row; a StorageClass of the same name
// adds its disks (and its type and sharing are those of a directory).
func (h *APIHandler) dirRow(q *request) storageRow {
	name := h.LocalStorage.name()
	row := storageRow{Storage: name, Type: "dir", Content: dirContent, Active: 1, Enabled: 1}
	var claims []*corev1.PersistentVolumeClaim
	for _, pvc := range q.c.FileClaims("") {
		if listable(q.c, pvc) {
			claims = append(claims, pvc)
		}
	}
	if q.c.StorageClassExists(name) {
		row.Content = dirContentImages
		claims = append(claims, q.c.DiskClaims(name)...)
	}
	row.Used = claimsUsed(claims)
	row.fill()
	return row
}

// claimsUsed is the space claims take: their bound capacity (the request
// while unbound).
func claimsUsed(claims []*corev1.PersistentVolumeClaim) int64 {
	var n int64
	for _, pvc := range claims {
		n += translate.ClaimInfoOf(pvc).Bytes
	}
	return n
}

// fileVolume reads a file volume id of the directory storage s,
// "<s>:<content>/<file>" or "<content>/<file>", into its content type and
// file; ok is false for anything else.
func fileVolume(s, volume string) (content, file string, ok bool) {
	name := volume
	if sid, rest, found := strings.Cut(volume, ":"); found {
		if sid != s {
			return "", "", false
		}
		name = rest
	}
	content, file, found := strings.Cut(name, "/")
	if !found || file == "" || strings.Contains(file, "/") || translate.FileAnnotation(content) == "" {
		return "", "", false
	}
	return content, file, true
}
