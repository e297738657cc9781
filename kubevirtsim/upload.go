package kubevirtsim

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"mime"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/testing"
	uploadv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/upload/v1beta1"
)

// CDI's upload annotations on a PVC (CDI pkg/controller/common).
const (
	// AnnotationUploadTarget marks a PVC that takes an upload.
	AnnotationUploadTarget = "cdi.kubevirt.io/storage.upload.target"
	// AnnotationPodReady is "true" once the upload server takes data.
	AnnotationPodReady = "cdi.kubevirt.io/storage.pod.ready"
	// AnnotationUploadedSHA256 and AnnotationUploadedBytes record what the
	// simulated upload server received (the simulator keeps no data), so
	// that tests can tell the bytes arrived whole. Not CDI's.
	AnnotationUploadedSHA256 = "kubevirtsim.caddy-proxmox.io/uploaded-sha256"
	AnnotationUploadedBytes  = "kubevirtsim.caddy-proxmox.io/uploaded-bytes"
)

// UploadGroup is the aggregated API cdi-apiserver serves upload tokens on.
const UploadGroup = "upload.cdi.kubevirt.io"

const (
	// uploadTokenTTL and uploadTokenLeeway are cdi-apiserver's token
	// lifetime and the proxy's clock leeway (CDI pkg/apiserver,
	// pkg/uploadproxy).
	uploadTokenTTL    = 5 * time.Minute
	uploadTokenLeeway = 10 * time.Second
	// uploadReadyWait and uploadReadyPoll: how long the proxy waits for the
	// upload server pod (CDI pkg/uploadproxy waitReadyTime, interval).
	uploadReadyWait = 10 * time.Second
	uploadReadyPoll = time.Second
)

// Paths of CDI's upload proxy (CDI pkg/common ProxyPaths).
var (
	uploadSyncPaths  = []string{"/v1beta1/upload", "/v1alpha1/upload"}
	uploadAsyncPaths = []string{"/v1beta1/upload-async", "/v1alpha1/upload-async"}
	uploadFormPaths  = []string{"/v1beta1/upload-form", "/v1alpha1/upload-form"}
	uploadFormAsync  = []string{"/v1beta1/upload-form-async", "/v1alpha1/upload-form-async"}
	bearerRE         = regexp.MustCompile(`(?i)^Bearer\s+([A-Za-z0-9\-\._~\+\/]+)$`)
)

// UploadProxy plays CDI's upload path: cdi-apiserver's UploadTokenRequest
// (a token for one claim of one namespace, valid five minutes) and
// cdi-uploadproxy with the upload server pod of each claim behind it, as
// CDI v1.64 behaves (pkg/apiserver uploadHandler, pkg/uploadproxy,
// pkg/uploadserver):
//
//   - the proxy answers 400 without a Bearer token, 401 for a token it did
//     not issue or that expired, 400 for a token that is not for a claim's
//     upload;
//   - it waits up to 10 s for the claim's upload server
//     (AnnotationPodReady), and answers 503 with CDI's text when the claim
//     does not exist, is no upload target, has finished uploading, or the
//     server does not become ready, or when the claim's content type is
//     neither kubevirt nor archive;
//   - the upload server takes one upload at a time (503 for a concurrent
//     one, 409 once done), POST only (404 otherwise; HEAD on the async
//     paths is 200, which is how virtctl finds them), the raw body or, on
//     the form paths, the multipart part "file";
//   - it reads the image as CDI's data processor would size it (a qcow2
//     header's virtual size, gzip decompressed, raw otherwise) and refuses
//     one larger than the claim with 400 "Saving stream failed: effective
//     image size is larger than the reported available storage";
//   - when done it sets the claim's pod phase to Succeeded (the
//     DataVolume's controller then reports it Succeeded) and records what
//     arrived (AnnotationUploadedSHA256, AnnotationUploadedBytes). The sync
//     paths answer when the data is processed, the async ones when it is
//     received.
type UploadProxy struct {
	k8s kubernetes.Interface
	key []byte
	// now is the clock tokens are judged by (tests move it).
	now func() time.Time
	// cdi, if set, checks cdi-apiserver's own tokens (NewCDIUploadProxy)
	// instead of the proxy's.
	cdi *cdiTokens

	mu   sync.Mutex
	busy map[string]bool // claims being uploaded to
}

// NewUploadProxy returns an upload proxy reading claims with k8s and
// signing its tokens with a key of its own.
func NewUploadProxy(k8s kubernetes.Interface) *UploadProxy {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		panic("kubevirtsim: upload token key: " + err.Error())
	}
	return &UploadProxy{k8s: k8s, key: key, now: time.Now, busy: map[string]bool{}}
}

// uploadToken is the payload of a token (CDI pkg/token Payload).
type uploadToken struct {
	Operation string `json:"operation"`
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Resource  string `json:"resource"`
	Expires   int64  `json:"exp"`
}

// Token issues the token cdi-apiserver gives for an upload to claim pvc of
// namespace ns.
func (u *UploadProxy) Token(ns, pvc string) string {
	payload, _ := json.Marshal(uploadToken{Operation: "Upload", Name: pvc, Namespace: ns, Resource: "persistentvolumeclaims", Expires: u.now().Add(uploadTokenTTL).Unix()})
	body := base64.RawURLEncoding.EncodeToString(payload)
	mac := hmac.New(sha256.New, u.key)
	mac.Write([]byte(body))
	return body + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// validate checks a token's signature and lifetime.
func (u *UploadProxy) validate(tok string) (uploadToken, error) {
	if u.cdi != nil {
		return u.cdi.validate(tok)
	}
	var t uploadToken
	body, sig, ok := strings.Cut(tok, ".")
	if !ok {
		return t, errors.New("malformed token")
	}
	mac := hmac.New(sha256.New, u.key)
	mac.Write([]byte(body))
	want := base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
	if !hmac.Equal([]byte(sig), []byte(want)) {
		return t, errors.New("bad signature")
	}
	raw, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil || json.Unmarshal(raw, &t) != nil {
		return t, errors.New("malformed token")
	}
	if u.now().After(time.Unix(t.Expires, 0).Add(uploadTokenLeeway)) {
		return t, errors.New("token expired")
	}
	return t, nil
}

// tokenReactor answers UploadTokenRequest creates of a fake CDI clientset
// as cdi-apiserver does: the request back with status.token.
func (u *UploadProxy) tokenReactor(action testing.Action) (bool, runtime.Object, error) {
	ca, ok := action.(testing.CreateAction)
	if !ok {
		return false, nil, nil
	}
	req, ok := ca.GetObject().(*uploadv1beta1.UploadTokenRequest)
	if !ok {
		return false, nil, nil
	}
	out := req.DeepCopy()
	out.Status.Token = u.Token(action.GetNamespace(), req.Spec.PvcName)
	return true, out, nil
}

// serveTokenRequest answers POST .../namespaces/{ns}/uploadtokenrequests
// of the aggregated API (the subresource handler routes it here).
func (u *UploadProxy) serveTokenRequest(w http.ResponseWriter, r *http.Request, ns string) {
	var req uploadv1beta1.UploadTokenRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		writeStatus(w, apierrors.NewBadRequest(err.Error()))
		return
	}
	req.Status.Token = u.Token(ns, req.Spec.PvcName)
	req.APIVersion, req.Kind = uploadv1beta1.SchemeGroupVersion.String(), "UploadTokenRequest"
	writeJSON(w, http.StatusOK, &req)
}

// ServeHTTP is cdi-uploadproxy.
func (u *UploadProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/healthz" {
		_, _ = io.WriteString(w, "OK")
		return
	}
	path := r.URL.Path
	sync, form, known := uploadPath(path)
	if !known {
		http.NotFound(w, r)
		return
	}
	m := bearerRE.FindStringSubmatch(r.Header.Get("Authorization"))
	if m == nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	tok, err := u.validate(m[1])
	if err != nil {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if tok.Operation != "Upload" || tok.Name == "" || tok.Namespace == "" || tok.Resource != "persistentvolumeclaims" {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	pvc, err := u.uploadReady(r.Context(), tok.Namespace, tok.Name)
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, html.EscapeString(err.Error()))
		return
	}
	if ct := pvc.Annotations[annContentType]; ct != "" && ct != "kubevirt" && ct != "archive" {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = fmt.Fprint(w, html.EscapeString(fmt.Sprintf("rejecting upload request for PVC %s - upload content-type %s is invalid", tok.Name, ct)))
		return
	}
	u.serveUpload(w, r, pvc, sync, form)
}

// uploadPath classifies a proxy path.
func uploadPath(p string) (sync, form, known bool) {
	has := func(paths []string) bool {
		for _, x := range paths {
			if x == p {
				return true
			}
		}
		return false
	}
	switch {
	case has(uploadSyncPaths):
		return true, false, true
	case has(uploadAsyncPaths):
		return false, false, true
	case has(uploadFormPaths):
		return true, true, true
	case has(uploadFormAsync):
		return false, true, true
	}
	return false, false, false
}

// uploadReady waits for the claim's upload server as the proxy does.
func (u *UploadProxy) uploadReady(ctx context.Context, ns, name string) (*corev1.PersistentVolumeClaim, error) {
	deadline := time.Now().Add(uploadReadyWait)
	for {
		pvc, err := u.k8s.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil, fmt.Errorf("rejecting Upload Request for PVC %s that doesn't exist", name)
		case err != nil:
			return nil, err
		}
		if pvc, err = u.uploadClaim(ctx, pvc); err != nil {
			return nil, err
		}
		switch {
		case pvc == nil:
			// The populator has not named its claim yet.
		case !hasKey(pvc.Annotations, AnnotationUploadTarget):
			return nil, fmt.Errorf("PVC %s is not an upload target", name)
		case pvc.Annotations[annPodPhase] == string(corev1.PodSucceeded):
			return nil, fmt.Errorf("rejecting Upload Request for PVC %s that already finished uploading", name)
		default:
			if ready, _ := strconv.ParseBool(pvc.Annotations[AnnotationPodReady]); ready {
				return pvc, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, context.DeadlineExceeded
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(uploadReadyPoll):
		}
	}
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

// serveUpload is the claim's upload server.
func (u *UploadProxy) serveUpload(w http.ResponseWriter, r *http.Request, pvc *corev1.PersistentVolumeClaim, sync, form bool) {
	if r.Method == http.MethodHead && !sync {
		w.WriteHeader(http.StatusOK)
		return
	}
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	key := pvc.Namespace + "/" + pvc.Name
	u.mu.Lock()
	if u.busy[key] {
		u.mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	u.busy[key] = true
	u.mu.Unlock()
	defer func() {
		u.mu.Lock()
		delete(u.busy, key)
		u.mu.Unlock()
	}()

	body := io.Reader(r.Body)
	if form {
		part, err := formFile(r)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		body = part
	}
	capacity := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	if q, ok := pvc.Status.Capacity[corev1.ResourceStorage]; ok {
		capacity = q
	}
	got, err := readImage(body, capacity.Value())
	if err != nil {
		var big *imageTooBigError
		if errors.As(err, &big) {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = fmt.Fprintf(w, "Saving stream failed: effective image size is larger than the reported available storage: %v", err)
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = fmt.Fprintf(w, "Saving stream failed: %v", err)
		return
	}
	if !sync {
		w.WriteHeader(http.StatusOK) // processing goes on in the background
	}
	ann := map[string]any{
		AnnotationUploadedSHA256: got.sha256,
		AnnotationUploadedBytes:  strconv.FormatInt(got.bytes, 10),
	}
	if u.cdi == nil {
		// This proxy plays CDI's controller too; with CDI's own, the
		// upload server pod ends (Nodes' kubelet) and CDI says so.
		ann[annPodPhase], ann[AnnotationPodReady] = string(corev1.PodSucceeded), "false"
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := u.k8s.CoreV1().PersistentVolumeClaims(pvc.Namespace).Patch(ctx, pvc.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && sync {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = fmt.Fprintf(w, "Saving stream failed: %v", err)
	}
}

// formFile returns the multipart part "file", skipping the others, as the
// upload server's formReadCloser does.
func formFile(r *http.Request) (io.Reader, error) {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); !strings.HasPrefix(mt, "multipart/") {
		return nil, errors.New("not multipart")
	}
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, err
	}
	for {
		p, err := mr.NextPart()
		if err != nil {
			return nil, err
		}
		if p.FormName() == "file" {
			return p, nil
		}
	}
}

// uploaded is what an upload carried.
type uploaded struct {
	sha256 string
	bytes  int64
}

type imageTooBigError struct{ size, available int64 }

func (e *imageTooBigError) Error() string {
	return fmt.Sprintf("image size %d exceeds the available %d", e.size, e.available)
}

// readImage reads an uploaded image to its end: its digest and length as
// sent, and its disk size as CDI's processor finds it (a qcow2 header's
// virtual size, gzip decompressed, else the bytes), which must fit
// available.
func readImage(body io.Reader, available int64) (uploaded, error) {
	h := sha256.New()
	counted := &countingReader{r: io.TeeReader(body, h)}
	br := bufio.NewReaderSize(counted, 64<<10)
	head, _ := br.Peek(32)
	var disk int64
	switch {
	case len(head) >= 32 && string(head[:4]) == "QFI\xfb":
		disk = int64(binary.BigEndian.Uint64(head[24:32]))
		if _, err := io.Copy(io.Discard, br); err != nil {
			return uploaded{}, err
		}
	case len(head) >= 2 && head[0] == 0x1f && head[1] == 0x8b:
		zr, err := gzip.NewReader(br)
		if err != nil {
			return uploaded{}, err
		}
		n, err := io.Copy(io.Discard, zr)
		if err != nil {
			return uploaded{}, fmt.Errorf("gzip: %w", err)
		}
		disk = n
		if _, err := io.Copy(io.Discard, br); err != nil {
			return uploaded{}, err
		}
	default:
		if _, err := io.Copy(io.Discard, br); err != nil {
			return uploaded{}, err
		}
		disk = counted.n
	}
	if available > 0 && disk > available {
		return uploaded{}, &imageTooBigError{size: disk, available: available}
	}
	return uploaded{sha256: hex.EncodeToString(h.Sum(nil)), bytes: counted.n}, nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// Transport serves requests to the upload proxy in process, whatever their
// host: the simulated cluster's cdi-uploadproxy service.
func (u *UploadProxy) Transport() http.RoundTripper { return handlerTransport{u} }

type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	pr, pw := io.Pipe()
	rw := &pipeResponse{header: http.Header{}, body: pw, ready: make(chan struct{})}
	go func() {
		defer func() {
			rw.writeHeader(http.StatusOK)
			pw.Close()
			if r.Body != nil {
				r.Body.Close() // as a server would: the client stops sending
			}
		}()
		t.h.ServeHTTP(rw, r)
	}()
	select {
	case <-rw.ready:
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	return &http.Response{
		StatusCode: rw.code, Status: fmt.Sprintf("%d %s", rw.code, http.StatusText(rw.code)),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: rw.header, Body: pr, Request: r, ContentLength: -1,
	}, nil
}

// pipeResponse is a ResponseWriter whose body streams to the client.
type pipeResponse struct {
	header http.Header
	body   *io.PipeWriter
	code   int
	once   sync.Once
	ready  chan struct{}
}

func (p *pipeResponse) Header() http.Header { return p.header }

func (p *pipeResponse) writeHeader(code int) {
	p.once.Do(func() {
		p.code = code
		close(p.ready)
	})
}

func (p *pipeResponse) WriteHeader(code int) { p.writeHeader(code) }

func (p *pipeResponse) Write(b []byte) (int, error) {
	p.writeHeader(http.StatusOK)
	return p.body.Write(b)
}

// uploadGroupPath is where the aggregator routes cdi-apiserver's upload API.
const uploadGroupPath = "/apis/" + UploadGroup

// IsUploadTokenPath reports whether an API path belongs to cdi-apiserver's
// upload.cdi.kubevirt.io group (TokenAPI serves it).
func IsUploadTokenPath(p string) bool {
	return p == uploadGroupPath || strings.HasPrefix(p, uploadGroupPath+"/")
}

// TokenAPI serves cdi-apiserver's upload.cdi.kubevirt.io API on the paths
// kube-apiserver proxies to it: discovery, and POST
// /apis/upload.cdi.kubevirt.io/v1beta1/namespaces/{ns}/uploadtokenrequests,
// authorized with authorize (verb create; use
// SelfSubjectAccessAuthorizerFor(cfg, UploadGroup)). As cdi-apiserver, a
// caller who may not is answered 401 with the reason as plain text.
func (u *UploadProxy) TokenAPI(authorize Authorizer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rest := strings.Trim(strings.TrimPrefix(r.URL.Path, uploadGroupPath), "/")
		parts := strings.Split(rest, "/")
		switch {
		case rest == "":
			g := &metav1.APIGroup{TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}, Name: UploadGroup}
			g.Versions = []metav1.GroupVersionForDiscovery{{GroupVersion: UploadGroup + "/v1beta1", Version: "v1beta1"}}
			g.PreferredVersion = g.Versions[0]
			writeJSON(w, http.StatusOK, g)
		case rest == "v1beta1":
			writeJSON(w, http.StatusOK, &metav1.APIResourceList{
				TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: UploadGroup + "/v1beta1",
				APIResources: []metav1.APIResource{{Name: "uploadtokenrequests", SingularName: "uploadtokenrequest", Namespaced: true, Kind: "UploadTokenRequest", Verbs: []string{"create"}}},
			})
		case len(parts) == 4 && parts[0] == "v1beta1" && parts[1] == "namespaces" && parts[2] != "" && parts[3] == "uploadtokenrequests":
			if r.Method != http.MethodPost {
				writeStatus(w, methodNotAllowed(r.Method))
				return
			}
			if authorize != nil {
				if err := authorize(r, "create", "uploadtokenrequests", "", parts[2], ""); err != nil {
					if apierrors.IsForbidden(err) {
						w.Header().Set("Content-Type", "text/plain")
						w.WriteHeader(http.StatusUnauthorized)
						_, _ = io.WriteString(w, err.Error())
						return
					}
					writeStatus(w, err)
					return
				}
			}
			u.serveTokenRequest(w, r, parts[2])
		default:
			writeStatus(w, notFound())
		}
	})
}
