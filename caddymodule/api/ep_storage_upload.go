package api

import (
	"bufio"
	"context"
	"crypto/md5"  //nolint:gosec // PVE's checksum-algorithm md5, chosen by the client
	"crypto/sha1" //nolint:gosec // PVE's checksum-algorithm sha1, chosen by the client
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// Uploads (POST /nodes/{n}/storage/{s}/upload) stream: pveproxy writes
// the multipart body to a temporary file before the API sees it; here the
// file part goes straight into CDI's upload proxy while it arrives (no
// copy on the plugin's disk), through a checksum when one is asked, so
// the API's 64 KiB body limit and 15 s body deadline do not apply to this
// path (Caddy's read_body_idle still cuts a stalled upload).

const (
	// taskImgCopy is pve-storage's upload worker.
	taskImgCopy = "imgcopy"
	// uploadSetupTimeout bounds the cluster calls before the bytes flow.
	uploadSetupTimeout = 20 * time.Second
	// uploadReadyTimeout is how long CDI may take to start the upload
	// server of a new claim (bind it, start the pod).
	uploadReadyTimeout = 5 * time.Minute
	// uploadFieldBytes bounds each form field before the file.
	uploadFieldBytes = 4 << 10
	// defaultMaxUpload bounds an upload's size unless local_storage's
	// max_upload says otherwise (its claim is sized from it).
	defaultMaxUpload = 64 * translate.GiB
	// downloadStall ends a streamed download whose server sent nothing for
	// that long.
	downloadStall = 5 * time.Minute
)

// isUploadPath tells whether an API path takes a streamed upload:
// pveproxy's test (HTTPServer.pm isUpload), the path
// ^/api2/json/nodes/[^/]+/storage/[^/]+/upload$. It runs on every
// request, so without a regular expression.
func isUploadPath(p string) bool {
	rest, ok := strings.CutPrefix(p, "/api2/json/nodes/")
	if !ok {
		return false
	}
	node, rest, ok := strings.Cut(rest, "/")
	if !ok || node == "" {
		return false
	}
	if rest, ok = strings.CutPrefix(rest, "storage/"); !ok {
		return false
	}
	storage, tail, ok := strings.Cut(rest, "/")
	return ok && storage != "" && tail == "upload"
}

// newChecksum is the hash of a PVE checksum-algorithm, nil for others.
func newChecksum(alg string) hash.Hash {
	switch alg {
	case "md5":
		return md5.New() //nolint:gosec // asked by the client
	case "sha1":
		return sha1.New() //nolint:gosec // asked by the client
	case "sha224":
		return sha256.New224()
	case "sha256":
		return sha256.New()
	case "sha384":
		return sha512.New384()
	case "sha512":
		return sha512.New()
	}
	return nil
}

// checksum is an expected checksum of a transfer.
type checksum struct{ alg, want string }

// record is how a verified checksum is kept on the file's claim.
func (c *checksum) record(got string) string {
	if c == nil {
		return ""
	}
	return c.alg + ":" + got
}

// mismatch is PVE's refusal of a file whose checksum differs.
func (c *checksum) mismatch(got string) error {
	return fmt.Errorf("checksum mismatch: got '%s' != expect '%s'", got, c.want)
}

// checksumParams reads checksum and checksum-algorithm (checked by the
// schema already); nil without.
func checksumParams(p params) *checksum {
	if _, ok := p["checksum"]; !ok {
		return nil
	}
	return &checksum{alg: p["checksum-algorithm"], want: strings.ToLower(strings.TrimSpace(p["checksum"]))}
}

// maxUpload is the largest upload local_storage takes.
func (l LocalStorageConfig) maxUpload() int64 {
	if l.MaxUpload > 0 {
		return l.MaxUpload
	}
	return defaultMaxUpload
}

// postUpload takes a file into the directory storage as pveproxy and
// pve-storage's upload do (content iso or import, multipart fields
// content, checksum-algorithm, checksum, then the file as field
// "filename"): a CDI upload DataVolume receives the bytes as they arrive,
// a checksum is compared once they have, and the imgcopy task answered
// ends when CDI has the file.
func (h *APIHandler) postUpload(q *request) (any, *apiError) {
	node, e := h.node(q)
	if e != nil {
		return nil, e
	}
	part, e := h.uploadForm(q)
	if e != nil {
		return nil, e
	}
	content, file := q.p["content"], translate.NormalizeContentFilename(q.p["filename"])
	s := q.pathValue("storage")
	if content == "vztmpl" && h.isDirStorage(s) {
		return nil, newError(http.StatusInternalServerError, "storage '%s' does not support '%s' content", s, content)
	}
	if e := h.fileTarget(q, s, content, file); e != nil {
		return nil, e
	}
	ns, class, e := h.fileDestination(q, "upload")
	if e != nil {
		return nil, e
	}
	sum := checksumParams(q.p)
	claim := translate.FileClaimName(content, file)
	path := kube.ClaimPath(ns, claim)
	spec := kube.TaskSpec{
		Node: node.Name, Type: taskImgCopy, User: q.id.ID(), Goal: kube.GoalImported, Namespace: ns, Name: claim, Timeout: time.Hour,
		Log: []string{fmt.Sprintf("starting file import from: upload of '%s' (%d bytes)", file, q.r.ContentLength)},
	}
	body := bufio.NewReaderSize(part, translate.ImageHeaderBytes)
	head, _ := body.Peek(translate.ImageHeaderBytes)
	f := translate.FileImport{Content: content, File: file, Upload: true, Namespace: ns, StorageClass: class}
	if content == translate.ContentImport {
		var err error
		if f.VirtualSize, err = translate.InspectImage(path, translate.ImportFormat(file), head); err != nil {
			spec.Err = err // PVE's worker checks the image, failing the task
			return h.beginSpec(q, spec)
		}
	}
	f.ClaimBytes = translate.ImportClaimBytes(q.r.ContentLength, f.VirtualSize)
	if sum != nil {
		f.Pending = "checksum"
	}
	setup, cancel := context.WithTimeout(q.ctx(), uploadSetupTimeout)
	defer cancel()
	dv, e := h.replaceFile(setup, q, f)
	if e != nil {
		return nil, e
	}
	res := h.streamFile(q.ctx(), q.c, dv.Namespace, dv.Name, dv.UID, body, sum)
	switch {
	case res.readErr != nil:
		h.dropFile(q.c, dv.Namespace, dv.Name)
		return nil, newError(http.StatusInternalServerError, "upload failed: %v", res.readErr)
	case res.err != nil:
		h.dropFile(q.c, dv.Namespace, dv.Name)
		if kube.IsDenied(res.err) {
			return nil, kubeDenied(res.err)
		}
		spec.Err = fmt.Errorf("import failed: %v", kubeTaskError(res.err))
		return h.beginSpec(q, spec)
	}
	spec.Log = append(spec.Log, res.log...)
	if res.mismatch != nil {
		h.dropFile(q.c, dv.Namespace, dv.Name)
		spec.Err = res.mismatch
		return h.beginSpec(q, spec)
	}
	spec.Log = append(spec.Log, "target node: "+node.Name, "target file: "+path, fmt.Sprintf("file size is: %d", res.size),
		fmt.Sprintf("command: CDI upload into DataVolume %s/%s (StorageClass %s)", ns, claim, class))
	if err := q.c.FileTransferred(setupContext(q), ns, claim, res.size, sum.record(res.got)); err != nil {
		spec.Err = fmt.Errorf("recording the upload: %v", err)
	}
	spec.UID = dv.UID
	return h.beginSpec(q, spec)
}

// setupContext is a short context for bookkeeping after a long transfer.
func setupContext(q *request) context.Context {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(q.ctx()), uploadSetupTimeout)
	context.AfterFunc(ctx, cancel)
	return ctx
}

// uploadForm reads an upload request as pveproxy does: multipart/form-data
// with a Content-Length, the fields content, checksum-algorithm and
// checksum, then the file as field "filename" (its file name is the
// filename parameter). The fields join the query's parameters in q.p,
// checked against the upload schema; the file part is returned unread.
func (h *APIHandler) uploadForm(q *request) (io.Reader, *apiError) {
	ct := q.r.Header.Get("Content-Type")
	mt, mp, err := mime.ParseMediaType(ct)
	if err != nil || mt != "multipart/form-data" || mp["boundary"] == "" {
		return nil, newError(http.StatusInternalServerError, "upload 'Content-Type '%s' not implemented", ct)
	}
	if q.r.ContentLength <= 0 {
		return nil, newError(http.StatusInternalServerError, "upload without content length header not supported")
	}
	if max := h.LocalStorage.maxUpload(); q.r.ContentLength > max {
		return nil, newError(http.StatusRequestEntityTooLarge, "request entity too large (uploads are limited to %s; see local_storage max_upload)", translate.FormatSize(max))
	}
	if _, ok := q.p["tmpfilename"]; ok {
		return nil, newError(http.StatusInternalServerError, "'tmpfilename' query parameter is not allowed for file uploads")
	}
	mr := multipart.NewReader(q.r.Body, mp["boundary"])
	for {
		p, err := mr.NextPart()
		if err != nil {
			return nil, newError(http.StatusInternalServerError, "upload failed: no file part (%v)", err)
		}
		if d, _, _ := mime.ParseMediaType(p.Header.Get("Content-Disposition")); d != "form-data" {
			return nil, newError(http.StatusInternalServerError, "wrong Content-Disposition '%s' in multipart, expected 'form-data'", d)
		}
		name := p.FormName()
		if fn := p.FileName(); fn != "" {
			if name != "filename" {
				return nil, newError(http.StatusInternalServerError, "wrong field name '%s' for file upload, expected 'filename'", name)
			}
			q.p["filename"] = strings.TrimSpace(fn)
			if e := uploadSchema(q.p); e != nil {
				return nil, e
			}
			return p, nil
		}
		v, err := io.ReadAll(io.LimitReader(p, uploadFieldBytes+1))
		if err != nil || len(v) > uploadFieldBytes {
			return nil, newError(http.StatusInternalServerError, "upload failed: form field '%s' unreadable or too long", name)
		}
		val := strings.TrimSpace(string(v))
		if name == "node" || name == "storage" {
			// The path's parameters may be repeated, not contradicted.
			if val != q.pathValue(name) {
				return nil, paramErr(name, "duplicate parameter (already defined in URI) with conflicting values!")
			}
			continue
		}
		if _, dup := q.p[name]; dup {
			return nil, paramErr(name, "duplicate parameter (multiple values not allowed)")
		}
		q.p[name] = val
	}
}

// uploadSchema checks the upload's parameters as pve-storage's schema does.
func uploadSchema(p params) *apiError {
	if e := p.allowOnly("content", "filename", "checksum", "checksum-algorithm"); e != nil {
		return e
	}
	errs := map[string]string{}
	content, ok := p["content"]
	switch {
	case !ok:
		errs["content"] = "property is missing and it is not optional"
	case !oneOf(content, "iso", "vztmpl", "import"):
		errs["content"] = fmt.Sprintf("value '%s' does not have a value in the enumeration 'iso, vztmpl, import'", content)
	}
	if len(p["filename"]) > 255 {
		errs["filename"] = "value may only be 255 characters long"
	}
	_, sum := p["checksum"]
	alg, hasAlg := p["checksum-algorithm"]
	switch {
	case sum && !hasAlg:
		errs["checksum-algorithm"] = "missing property required by 'checksum'"
	case hasAlg && !sum:
		errs["checksum"] = "missing property required by 'checksum-algorithm'"
	case hasAlg && newChecksum(alg) == nil:
		errs["checksum-algorithm"] = fmt.Sprintf("value '%s' does not have a value in the enumeration 'md5, sha1, sha224, sha256, sha384, sha512'", alg)
	}
	if len(errs) > 0 {
		return paramError(errs)
	}
	return nil
}

// replaceFile creates the upload DataVolume of f, as the caller; a file of
// that name that no VM uses is deleted first, as PVE's upload overwrites
// it.
func (h *APIHandler) replaceFile(ctx context.Context, q *request, f translate.FileImport) (*cdiv1.DataVolume, *apiError) {
	for attempt := 0; ; attempt++ {
		dv, err := q.c.CreateFile(ctx, translate.FileDataVolume(f))
		var exists *kube.FileExistsError
		switch {
		case err == nil:
			return dv, nil
		case errors.As(err, &exists):
		case kube.IsDenied(err):
			return nil, kubeDenied(err)
		default:
			return nil, kubeError(err)
		}
		volid := h.LocalStorage.name() + ":" + f.Content + "/" + f.File
		pvc := q.c.CachedPVC(exists.Namespace, exists.Name)
		if c, _, file := fileOf(pvc); !file || c != f.Content || attempt > 0 {
			// Another object has the name (a disk, an admin's claim of
			// another content type), or it did not go away.
			return nil, newError(http.StatusInternalServerError, "cannot overwrite '%s': claim %s/%s exists", volid, exists.Namespace, exists.Name)
		}
		if users := q.c.FileUsers(pvc.Namespace, pvc.Name); len(users) > 0 {
			return nil, newError(http.StatusInternalServerError, "volume '%s' is still in use by VM %d (remove the CD-ROM first)", volid, users[0].VMID)
		}
		if err := q.c.DeleteFile(ctx, pvc); err != nil && !kube.IsNotFound(err) {
			return nil, kubeError(err)
		}
		if err := q.c.WaitFileGone(ctx, pvc.Namespace, pvc.Name); err != nil {
			return nil, newError(http.StatusInternalServerError, "cannot overwrite '%s': %v", volid, err)
		}
	}
}

// fileOf is translate.FileOf of a claim that may be nil.
func fileOf(pvc interface{ GetAnnotations() map[string]string }) (content, file string, ok bool) {
	if pvc == nil {
		return "", "", false
	}
	return translate.FileOf(pvc.GetAnnotations())
}

// dropFile deletes a file whose transfer failed, as PVE removes its
// temporary file; as the plugin's cleanup of its own transfer, bounded.
func (h *APIHandler) dropFile(c *kube.Cluster, ns, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), uploadSetupTimeout)
	defer cancel()
	if err := c.DropFile(ctx, ns, name); err != nil {
		h.logger.Warn("removing a failed transfer", zap.String("claim", ns+"/"+name), zap.Error(err))
	}
}

// transfer is what streamFile did.
type transfer struct {
	size     int64
	got      string   // the checksum, hex, when one was asked
	log      []string // task log lines
	readErr  error    // the source failed (the client, the download)
	err      error    // CDI refused or failed
	mismatch error    // the checksum differs
}

// streamFile sends src into the upload DataVolume ns/name through CDI,
// hashing it when sum is set.
func (h *APIHandler) streamFile(ctx context.Context, c *kube.Cluster, ns, name string, uid types.UID, src io.Reader, sum *checksum) transfer {
	var hsh hash.Hash
	if sum != nil {
		hsh = newChecksum(sum.alg)
		src = io.TeeReader(src, hsh)
	}
	rd := &sourceReader{r: src}
	var t transfer
	t.err = c.Upload(ctx, ns, name, uid, rd, -1, uploadReadyTimeout)
	t.size, t.readErr = rd.n, rd.err
	if t.readErr != nil || t.err != nil || hsh == nil {
		return t
	}
	t.got = hex.EncodeToString(hsh.Sum(nil))
	if t.got != sum.want {
		t.log = append(t.log, "calculating checksum...")
		t.mismatch = sum.mismatch(t.got)
		return t
	}
	t.log = append(t.log, "calculating checksum...OK, checksum verified")
	return t
}

// sourceReader counts what a transfer read and keeps the source's error
// (EOF aside), so that a client that went away is told from CDI's refusal.
type sourceReader struct {
	r   io.Reader
	n   int64
	err error
}

func (s *sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	s.n += int64(n)
	if err != nil && err != io.EOF && s.err == nil {
		s.err = err
	}
	return n, err
}

// downloadStreamed is a download the plugin makes itself, because CDI's
// http import cannot do what was asked (check a checksum, skip the
// certificate check): the worker task fetches the URL and streams it into
// an upload DataVolume as an upload does, as PVE's download worker would.
// A file that exists answers as PVE's: with a checksum recorded by an
// earlier verified transfer, the same checksum is done already and another
// is a mismatch; otherwise the task fails refusing to override it.
func (h *APIHandler) downloadStreamed(q *request, d downloadParams, spec kube.TaskSpec, f translate.FileImport, sum *checksum) (any, *apiError) {
	f.Upload = true
	if sum != nil {
		f.Pending = "checksum"
	}
	path := kube.ClaimPath(f.Namespace, spec.Name)
	dv, err := q.c.CreateFile(q.ctx(), translate.FileDataVolume(f))
	var exists *kube.FileExistsError
	switch {
	case errors.As(err, &exists):
		spec.Err = existingFile(q.c.CachedPVC(exists.Namespace, exists.Name), path, sum, &spec)
		if spec.Err == nil {
			spec.Goal = kube.GoalNone
		}
		return h.beginSpec(q, spec)
	case kube.IsDenied(err):
		return nil, kubeDenied(err)
	case err != nil:
		if ke := kubeError(err); ke.Code == http.StatusServiceUnavailable {
			return nil, ke
		}
		spec.Err = kubeTaskError(err)
		return h.beginSpec(q, spec)
	}
	spec.Log = append(spec.Log, fmt.Sprintf("fetched by the plugin and uploaded through CDI: DataVolume %s/%s, StorageClass %s", dv.Namespace, dv.Name, f.StorageClass))
	w, t, err := q.c.Tasks.BeginWorker(q.ctx(), spec)
	if err != nil {
		h.dropFile(q.c, dv.Namespace, dv.Name)
		return nil, kubeError(err)
	}
	// The worker outlives the request, as the caller (the upload token
	// is asked as the caller).
	go h.runDownload(context.WithoutCancel(q.ctx()), w, q.c, d, dv, path, sum, q.p["compression"] == "")
	h.logger.Info("task started", zap.String("upid", t.UPID.String()), zap.String("user", spec.User), zap.String("file", path))
	return t.UPID.String(), nil
}

// existingFile answers a download onto an existing file as PVE's
// download_file_from_url does: nil (and a log line) when its recorded
// checksum is the one asked, a mismatch when it is another, else a
// refusal to override.
func existingFile(pvc interface{ GetAnnotations() map[string]string }, path string, sum *checksum, spec *kube.TaskSpec) error {
	var recorded string
	if pvc != nil {
		recorded = pvc.GetAnnotations()[translate.AnnotationChecksum]
	}
	alg, got, ok := strings.Cut(recorded, ":")
	switch {
	case sum != nil && ok && alg == sum.alg && got == sum.want:
		spec.Log = append(spec.Log, "calculating checksum of existing file...OK, got correct file already, no need to download")
		return nil
	case sum != nil && ok && alg == sum.alg:
		spec.Log = append(spec.Log, "calculating checksum of existing file...")
		return fmt.Errorf("checksum mismatch: got '%s' != expect '%s', aborting", got, sum.want)
	}
	return fmt.Errorf("refusing to override existing file '%s'", path)
}

// runDownload is the worker of downloadStreamed.
func (h *APIHandler) runDownload(ctx context.Context, w *kube.Session, c *kube.Cluster, d downloadParams, dv *cdiv1.DataVolume, path string, sum *checksum, knownSize bool) {
	ctx, cancel := context.WithTimeout(ctx, downloadTimeout)
	defer cancel()
	ns, name := dv.Namespace, dv.Name
	fail := func(err error, lines ...string) {
		h.dropFile(c, ns, name)
		w.EndWith(context.Background(), err.Error(), lines)
	}
	body, err := fetchStream(ctx, cancel, d.url, d.verify)
	if err != nil {
		fail(fmt.Errorf("download failed: %v", err))
		return
	}
	defer body.Close()
	br := bufio.NewReaderSize(body, translate.ImageHeaderBytes)
	if d.content == translate.ContentImport {
		head, _ := br.Peek(translate.ImageHeaderBytes)
		if _, err := translate.InspectImage(path, translate.ImportFormat(d.file), head); err != nil {
			fail(fmt.Errorf("failed to verify file: %v", err))
			return
		}
	}
	t := h.streamFile(ctx, c, ns, name, dv.UID, br, sum)
	switch {
	case t.readErr != nil:
		fail(fmt.Errorf("download failed: %v", t.readErr))
		return
	case t.err != nil:
		fail(fmt.Errorf("download failed: %v", kubeTaskError(t.err)))
		return
	case t.mismatch != nil:
		fail(t.mismatch, t.log...)
		return
	}
	size := t.size
	if !knownSize {
		size = 0 // decompressed by CDI: the file's size is not the stream's
	}
	if err := c.FileTransferred(ctx, ns, name, size, sum.record(t.got)); err != nil {
		w.EndWith(context.Background(), fmt.Sprintf("recording the download: %v", err), t.log)
		return
	}
	if err := waitImported(ctx, c, ns, name, dv.UID); err != nil {
		w.EndWith(context.Background(), "download failed: "+err.Error(), t.log)
		return
	}
	w.EndWith(context.Background(), translate.ExitOK, append(t.log, fmt.Sprintf("download of '%s' to '%s' finished", d.url, path)))
}

// waitImported waits, on the cache, for an upload DataVolume to succeed.
func waitImported(ctx context.Context, c *kube.Cluster, ns, name string, uid types.UID) error {
	for {
		dv := c.DataVolume(ns, name)
		switch {
		case dv == nil || dv.UID != uid:
			return fmt.Errorf("DataVolume %s/%s was deleted", ns, name)
		case dv.Status.Phase == cdiv1.Succeeded:
			return nil
		case dv.Status.Phase == cdiv1.Failed:
			return fmt.Errorf("DataVolume %s/%s failed", ns, name)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("timeout waiting for DataVolume %s/%s (%s)", ns, name, dv.Status.Phase)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
