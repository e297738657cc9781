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

// postDownloadURL downloads a file into the directory storage: a CDI
// DataVolume importing the URL into a claim (translate.FileDataVolume), in
// the namespace VMs are created in by default. The download task ends when
// CDI is done, or fails with CDI's reason.
func (h *APIHandler) postDownloadURL(q *request) (any, *apiError) {
	node, e := h.node(q)
	if e != nil {
		return nil, e
	}
	d, e := downloadRequest(q)
	if e != nil {
		return nil, e
	}
	s := q.pathValue("storage")
	if e := h.fileTarget(q, s, d.content, d.file); e != nil {
		return nil, e
	}
	if c := q.p["compression"]; c != "" && c != "gz" && d.content == translate.ContentISO {
		return nil, newError(http.StatusInternalServerError, "decompression method '%s' is not supported: CDI decompresses gz (and xz) images only", c)
	}
	// What CDI's importer cannot do (check a checksum, skip the
	// certificate check), the plugin does, fetching the file itself.
	sum := checksumParams(q.p)
	streamed := sum != nil || (!d.verify && strings.HasPrefix(d.url, "https:"))
	ns, class, e := h.fileDestination(q, "download")
	if e != nil {
		return nil, e
	}
	if _, err := checkProbeURL(d.url); err != nil {
		return nil, probeError(d.url, err)
	}

	claim := translate.FileClaimName(d.content, d.file)
	path := kube.ClaimPath(ns, claim)
	spec := kube.TaskSpec{
		Node: node.Name, Type: taskDownload, ID: d.file, User: q.id.ID(), Goal: kube.GoalImported,
		Namespace: ns, Name: claim, Timeout: downloadTimeout,
		Log: []string{fmt.Sprintf("downloading %s to %s", d.url, path)},
	}
	if c := q.p["compression"]; c != "" && d.content != translate.ContentISO {
		// PVE's worker refuses it, failing the task.
		spec.Err = fmt.Errorf("decompression not supported for %s", d.content)
		return h.beginSpec(q, spec)
	}
	f := translate.FileImport{Content: d.content, File: d.file, URL: d.url, Namespace: ns, StorageClass: class}
	lines, err := h.sizeDownload(q, d, path, &f)
	spec.Log = append(spec.Log, lines...)
	var refused *refusedAddrError
	switch {
	case errors.As(err, &refused):
		return nil, probeError(d.url, err)
	case err != nil:
		// PVE's worker checks the file after the download, failing the task.
		spec.Err = fmt.Errorf("failed to verify file: %v", err)
		return h.beginSpec(q, spec)
	}
	if streamed {
		return h.downloadStreamed(q, d, spec, f, sum)
	}
	spec.Log = append(spec.Log, fmt.Sprintf("importing with CDI: DataVolume %s/%s, StorageClass %s", ns, claim, class))

	dv, err := q.c.CreateFile(q.ctx(), translate.FileDataVolume(f))
	var exists *kube.FileExistsError
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

// fileTarget checks that storage s may receive a file of content type
// content and name file, as pve-storage's download and upload do.
func (h *APIHandler) fileTarget(q *request, s, content, file string) *apiError {
	if !h.storageExists(q, s) {
		return noStorage(s)
	}
	if !h.isDirStorage(s) {
		typ, _ := storageType(q.c.StorageClass(s))
		return newError(http.StatusInternalServerError, "can't upload to storage type '%s', not a file based storage!", typ)
	}
	switch content {
	case translate.ContentISO:
		if !translate.ValidISOFilename(file) {
			return paramErr("filename", "wrong file extension")
		}
	case translate.ContentImport:
		switch translate.ImportFormat(file) {
		case "":
			return paramErr("filename", "invalid filename or wrong extension")
		case "ova":
			return newError(http.StatusInternalServerError, "importing OVA archives is not supported: a KubeVirt disk is one image (import the disk image inside the OVA)")
		}
	default:
		return newError(http.StatusInternalServerError, "storage '%s' is not configured for content-type '%s'", s, content)
	}
	return nil
}

// sizeDownload sizes the claim of a download into f: the server's
// announced size (or the size= extension), and for an image to import the
// format and disk size its first bytes tell (an image that is not what its
// name says is an error, as PVE's check after the download). It returns
// task log lines; a refused address is a *refusedAddrError.
func (h *APIHandler) sizeDownload(q *request, d downloadParams, path string, f *translate.FileImport) ([]string, error) {
	var log []string
	if d.size > 0 {
		f.ClaimBytes = d.size
	} else {
		meta, err := probeURL(q.ctx(), d.url, d.verify, downloadProbeTimeout)
		var refused *refusedAddrError
		switch {
		case errors.As(err, &refused):
			return nil, err
		case err != nil:
			log = append(log, fmt.Sprintf("size unknown (%s)", probeError(d.url, err).Message))
		case meta.Size == 0:
			log = append(log, "size not announced by the server")
		default:
			log = append(log, fmt.Sprintf("size %d bytes", meta.Size))
		}
		if q.p["compression"] == "" {
			f.FileSize = meta.Size // PVE lists the decompressed file
		}
	}
	if d.content == translate.ContentImport {
		head, err := probeHead(q.ctx(), d.url, d.verify, downloadProbeTimeout, translate.ImageHeaderBytes)
		if err != nil {
			return log, fmt.Errorf("could not read the image's header: %v", probeError(d.url, err).Message)
		}
		if f.VirtualSize, err = translate.InspectImage(path, translate.ImportFormat(d.file), head); err != nil {
			return log, err
		}
		if f.VirtualSize > 0 {
			log = append(log, fmt.Sprintf("%s image of %s", translate.ImportFormat(d.file), translate.FormatSize(f.VirtualSize)))
		}
	}
	if f.ClaimBytes == 0 {
		f.ClaimBytes = translate.ImportClaimBytes(f.FileSize, f.VirtualSize)
		log = append(log, fmt.Sprintf("claim of %s", translate.FormatSize(f.ClaimBytes)))
	}
	return log, nil
}
