package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// Task types of pve-storage's workers.
const (
	taskDownload = "download" // POST …/storage/{storage}/download-url
	taskImgDel   = "imgdel"   // DELETE …/storage/{storage}/content/{volume}
)

const (
	// downloadProbeTimeout bounds download-url's size probe, which the
	// client waits for before it gets its task.
	downloadProbeTimeout = 5 * time.Second
	// downloadTimeout is how long a download task waits for CDI.
	downloadTimeout = 12 * time.Hour
)

// downloadParams are download-url's parameters once checked.
type downloadParams struct {
	content, file, url string
	verify             bool
	size               int64 // claim size asked for, 0 if none
}

// downloadRequest checks download-url's parameters as PVE's schema does.
func downloadRequest(q *request) (downloadParams, *apiError) {
	var d downloadParams
	if e := q.p.allowOnly("content", "filename", "url", "checksum", "checksum-algorithm", "compression", "verify-certificates", "size"); e != nil {
		return d, e
	}
	errs := map[string]string{}
	for _, k := range []string{"content", "filename", "url"} {
		if _, ok := q.p[k]; !ok {
			errs[k] = "property is missing and it is not optional"
		}
	}
	for k, v := range q.p {
		if strings.Contains(v, "\x00") {
			errs[k] = "duplicate parameter (multiple values not allowed)"
		}
	}
	d.content, d.url = q.p["content"], q.p["url"]
	if _, ok := q.p["content"]; ok && d.content != "iso" && d.content != "vztmpl" && d.content != "import" {
		errs["content"] = fmt.Sprintf("value '%s' does not have a value in the enumeration 'iso, vztmpl, import'", d.content)
	}
	if _, ok := q.p["url"]; ok && !urlPattern.MatchString(d.url) {
		errs["url"] = "value does not match the regex pattern"
	}
	if f, ok := q.p["filename"]; ok && len(f) > 255 {
		errs["filename"] = "value may only be 255 characters long"
	}
	_, sum := q.p["checksum"]
	alg, hasAlg := q.p["checksum-algorithm"]
	switch {
	case sum && !hasAlg:
		errs["checksum-algorithm"] = "missing property required by 'checksum'"
	case hasAlg && !sum:
		errs["checksum"] = "missing property required by 'checksum-algorithm'"
	}
	if hasAlg && !oneOf(alg, "md5", "sha1", "sha224", "sha256", "sha384", "sha512") {
		errs["checksum-algorithm"] = fmt.Sprintf("value '%s' does not have a value in the enumeration 'md5, sha1, sha224, sha256, sha384, sha512'", alg)
	}
	if c, ok := q.p["compression"]; ok && !oneOf(c, "gz", "lzo", "zst", "bz2") {
		errs["compression"] = fmt.Sprintf("value '%s' does not have a value in the enumeration 'gz, lzo, zst, bz2'", c)
	}
	verify, e := q.p.boolean("verify-certificates", true)
	if e != nil {
		errs["verify-certificates"] = e.Errors["verify-certificates"]
	}
	d.verify = verify
	if s, ok := q.p["size"]; ok {
		n, err := translate.ParseDiskSize(s)
		if err != nil || n <= 0 {
			errs["size"] = fmt.Sprintf("value does not look like a valid disk size: %s", s)
		}
		d.size = (n + translate.GiB - 1) / translate.GiB * translate.GiB
	}
	if len(errs) > 0 {
		return d, paramError(errs)
	}
	d.file = translate.NormalizeContentFilename(q.p["filename"])
	return d, nil
}

func oneOf(v string, set ...string) bool {
	for _, s := range set {
		if v == s {
			return true
		}
	}
	return false
}

// postDownloadURL downloads an ISO image: a CDI DataVolume importing the
// URL into a claim of the StorageClass, in the namespace VMs are created
// in by default. The download task ends when CDI is done, or fails with
// CDI's reason.
func (h *APIHandler) postDownloadURL(q *request) (any, *apiError) {
	node, e := h.node(q)
	if e != nil {
		return nil, e
	}
	d, e := downloadRequest(q)
	if e != nil {
		return nil, e
	}
	s := q.r.PathValue("storage")
	if !q.c.StorageClassExists(s) {
		return nil, newError(http.StatusInternalServerError, "storage '%s' does not exist", s)
	}
	if d.content != "iso" {
		what := "there are no containers here"
		if d.content == "import" {
			what = "VM disks are made by creating VMs"
		}
		return nil, newError(http.StatusInternalServerError, "storage '%s' is not configured for content-type '%s' (only ISO images can be downloaded: %s)", s, d.content, what)
	}
	if !translate.ValidISOFilename(d.file) {
		return nil, paramErr("filename", "wrong file extension")
	}
	if _, ok := q.p["checksum"]; ok {
		return nil, newError(http.StatusInternalServerError, "checksum verification is not supported: CDI's http import cannot check a checksum (download without checksum and checksum-algorithm)")
	}
	if c := q.p["compression"]; c != "" && c != "gz" {
		return nil, newError(http.StatusInternalServerError, "decompression method '%s' is not supported: CDI decompresses gz (and xz) images only", c)
	}
	if !d.verify && strings.HasPrefix(d.url, "https:") {
		return nil, newError(http.StatusInternalServerError, "verify-certificates=0 is not supported: CDI always verifies https certificates")
	}
	if !q.c.HasCDI() {
		return nil, newError(http.StatusInternalServerError, "%v", kube.ErrNoCDI)
	}
	ns := h.defaultNamespace()
	if !q.c.Serves(ns) {
		return nil, newError(http.StatusInternalServerError, "cannot download: namespace '%s' (where VMs are created without pool) is not served", ns)
	}
	if _, err := checkProbeURL(d.url); err != nil {
		return nil, probeError(d.url, err)
	}

	claim := translate.ISOClaimName(d.file)
	path := kube.ClaimPath(ns, claim)
	log := []string{fmt.Sprintf("downloading %s to %s", d.url, path)}
	bytes := d.size
	if bytes == 0 {
		meta, err := probeURL(q.ctx(), d.url, d.verify, downloadProbeTimeout)
		var refused *refusedAddrError
		switch {
		case errors.As(err, &refused):
			return nil, probeError(d.url, err)
		case err != nil:
			log = append(log, fmt.Sprintf("size unknown (%s); claim of %s", probeError(d.url, err).Message, translate.FormatSize(translate.DefaultISOClaimBytes)))
		case meta.Size == 0:
			log = append(log, fmt.Sprintf("size not announced by the server; claim of %s", translate.FormatSize(translate.DefaultISOClaimBytes)))
		default:
			log = append(log, fmt.Sprintf("size %d bytes; claim of %s", meta.Size, translate.FormatSize(translate.ISOClaimBytes(meta.Size))))
		}
		bytes = translate.ISOClaimBytes(meta.Size)
	}
	log = append(log, fmt.Sprintf("importing with CDI: DataVolume %s/%s, StorageClass %s", ns, claim, s))

	spec := kube.TaskSpec{
		Node: node.Name, Type: taskDownload, ID: d.file, User: q.id.ID(), Goal: kube.GoalImported,
		Namespace: ns, Name: claim, Timeout: downloadTimeout, Log: log,
	}
	dv, err := q.c.CreateISO(q.ctx(), translate.ISODataVolume(translate.ISODownload{
		File: d.file, URL: d.url, Namespace: ns, StorageClass: s, Bytes: bytes,
	}))
	var exists *kube.ISOExistsError
	switch {
	case errors.As(err, &exists):
		// PVE's worker checks the file and fails the task.
		spec.Err = fmt.Errorf("refusing to override existing file '%s'", path)
	case kube.IsDenied(err):
		return nil, kubeDenied(err)
	case err != nil:
		if ke := kubeError(err); ke.Code == http.StatusServiceUnavailable {
			return nil, ke
		}
		spec.Err = kubeTaskError(err)
	default:
		spec.UID = dv.UID
	}
	return h.beginSpec(q, spec)
}
