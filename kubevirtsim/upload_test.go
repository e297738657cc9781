package kubevirtsim

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	uploadv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/upload/v1beta1"
)

// uploadEnv runs the controller with CDI and returns the upload proxy of
// the fake CDI clientset.
func uploadEnv(t *testing.T) (*cdiEnv, *UploadProxy) {
	e := newCDIEnv(t).run(Options{DataVolumeDelay: 50 * time.Millisecond})
	return e, e.cdi.(*FakeCDIClientset).UploadProxy()
}

func (e *cdiEnv) createUploadDV(name, size string) {
	e.t.Helper()
	dv := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS}, Spec: cdiv1.DataVolumeSpec{
		Source:  &cdiv1.DataVolumeSource{Upload: &cdiv1.DataVolumeSourceUpload{}},
		Storage: &cdiv1.StorageSpec{Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}}},
	}}
	if _, err := e.cdi.CdiV1beta1().DataVolumes(testNS).Create(e.ctx, dv, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// token asks the fake CDI API for an upload token, as virtctl does.
func (e *cdiEnv) token(pvc string) string {
	e.t.Helper()
	res, err := e.cdi.UploadV1beta1().UploadTokenRequests(testNS).Create(e.ctx, &uploadv1beta1.UploadTokenRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "token-for-test"}, Spec: uploadv1beta1.UploadTokenRequestSpec{PvcName: pvc},
	}, metav1.CreateOptions{})
	if err != nil || res.Status.Token == "" {
		e.t.Fatalf("token: %+v %v", res, err)
	}
	return res.Status.Token
}

// post sends body to the proxy path as the client's upload.
func post(t *testing.T, up *UploadProxy, method, path, token, ctype string, body io.Reader) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), method, "https://cdi-uploadproxy.cdi.svc"+path, body)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	res, err := (&http.Client{Transport: up.Transport()}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func qcow2(virtual int64) []byte {
	h := make([]byte, 4096)
	copy(h, "QFI\xfb")
	binary.BigEndian.PutUint32(h[4:], 3)
	binary.BigEndian.PutUint64(h[24:], uint64(virtual))
	return h
}

func TestUploadProxy(t *testing.T) {
	e, up := uploadEnv(t)
	e.createUploadDV("disk", "1Gi")
	e.waitDVPhase("disk", cdiv1.UploadReady)
	if pvc := e.waitPVC("disk"); pvc.Annotations[AnnotationPodReady] != "true" || pvc.Annotations[annPodPhase] != "Running" {
		t.Fatalf("claim of an upload ready for data: %v", pvc.Annotations)
	}
	tok := e.token("disk")

	// Refusals before any data is taken.
	if code, _ := post(t, up, "POST", "/v1beta1/upload", "", "", strings.NewReader("x")); code != 400 {
		t.Errorf("no token: %d", code)
	}
	if code, _ := post(t, up, "POST", "/v1beta1/upload", tok+"x", "", strings.NewReader("x")); code != 401 {
		t.Errorf("forged token: %d", code)
	}
	if code, _ := post(t, up, "POST", "/v1beta1/nowhere", tok, "", strings.NewReader("x")); code != 404 {
		t.Errorf("unknown path: %d", code)
	}
	if code, body := post(t, up, "POST", "/v1beta1/upload", e.token("nope"), "", strings.NewReader("x")); code != 503 || body != "rejecting Upload Request for PVC nope that doesn&#39;t exist" {
		t.Errorf("missing claim: %d %q", code, body)
	}
	plain := testPVC("plain", "local-lvm", "1Gi")
	if _, err := e.k8s.CoreV1().PersistentVolumeClaims(testNS).Create(e.ctx, plain, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if code, body := post(t, up, "POST", "/v1beta1/upload", e.token("plain"), "", strings.NewReader("x")); code != 503 || body != "PVC plain is not an upload target" {
		t.Errorf("not an upload target: %d %q", code, body)
	}
	if code, _ := post(t, up, "HEAD", "/v1beta1/upload-async", tok, "", nil); code != 200 {
		t.Errorf("HEAD on the async path (virtctl's probe): %d", code)
	}
	if code, _ := post(t, up, "GET", "/v1beta1/upload", tok, "", nil); code != 404 {
		t.Errorf("GET: %d", code)
	}
	// An image larger than its claim.
	if code, body := post(t, up, "POST", "/v1beta1/upload", tok, "", bytes.NewReader(qcow2(2<<30))); code != 400 || !strings.HasPrefix(body, "Saving stream failed: effective image size is larger than the reported available storage") {
		t.Errorf("too big: %d %q", code, body)
	}

	// The upload: the claim records it, the DataVolume succeeds.
	data := bytes.Repeat([]byte("caddy-proxmox "), 1000)
	if code, body := post(t, up, "POST", "/v1beta1/upload", tok, "application/octet-stream", bytes.NewReader(data)); code != 200 {
		t.Fatalf("upload: %d %q", code, body)
	}
	e.waitDVPhase("disk", cdiv1.Succeeded)
	sum := sha256.Sum256(data)
	if pvc := e.getPVC("disk"); pvc.Annotations[AnnotationUploadedSHA256] != hex.EncodeToString(sum[:]) || pvc.Annotations[AnnotationUploadedBytes] != strconv.Itoa(len(data)) || pvc.Annotations[annPodPhase] != "Succeeded" {
		t.Fatalf("claim after the upload: %v", pvc.Annotations)
	}
	if code, body := post(t, up, "POST", "/v1beta1/upload", tok, "", strings.NewReader("again")); code != 503 || !strings.Contains(body, "that already finished uploading") {
		t.Errorf("second upload: %d %q", code, body)
	}
}

// The form paths take the part "file"; gzip is sized decompressed; tokens
// expire after five minutes (plus ten seconds of leeway).
func TestUploadProxyFormAndTokens(t *testing.T) {
	e, up := uploadEnv(t)
	e.createUploadDV("form", "1Gi")
	e.createUploadDV("zipped", "1Mi")
	e.waitDVPhase("form", cdiv1.UploadReady)
	e.waitDVPhase("zipped", cdiv1.UploadReady)

	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.WriteField("note", "ignored")
	fw, _ := mw.CreateFormFile("file", "disk.raw")
	_, _ = fw.Write([]byte("raw disk"))
	_ = mw.Close()
	if code, body := post(t, up, "POST", "/v1beta1/upload-form", e.token("form"), mw.FormDataContentType(), &buf); code != 200 {
		t.Fatalf("form upload: %d %q", code, body)
	}
	e.waitDVPhase("form", cdiv1.Succeeded)
	if pvc := e.getPVC("form"); pvc.Annotations[AnnotationUploadedBytes] != "8" {
		t.Fatalf("form upload recorded %v", pvc.Annotations)
	}

	// 2 MiB of zeros, gzipped: small on the wire, too big for 1 MiB.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(make([]byte, 2<<20))
	_ = zw.Close()
	tok := e.token("zipped")
	if code, body := post(t, up, "POST", "/v1beta1/upload-async", tok, "", bytes.NewReader(gz.Bytes())); code != 400 || !strings.Contains(body, "effective image size is larger") {
		t.Fatalf("gzip too big: %d %q", code, body)
	}
	up.now = func() time.Time { return time.Now().Add(uploadTokenTTL + uploadTokenLeeway + time.Second) }
	if code, _ := post(t, up, "POST", "/v1beta1/upload", tok, "", strings.NewReader("x")); code != 401 {
		t.Fatalf("expired token: %d", code)
	}
}

// cdi-apiserver's upload API as the aggregator routes it: discovery, a
// token for an allowed caller, 401 with the reason for one who may not.
func TestUploadTokenAPI(t *testing.T) {
	_, up := uploadEnv(t)
	deny := func(r *http.Request, verb, resource, sub, ns, name string) error {
		if verb != "create" || resource != "uploadtokenrequests" || sub != "" || name != "" {
			t.Errorf("authorized %s %s/%s %s/%s", verb, resource, sub, ns, name)
		}
		if ns == "locked" {
			return forbidden(UploadGroup, "bob", verb, resource, sub, ns, name, "")
		}
		return nil
	}
	h := up.TokenAPI(deny)
	do := func(method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, path, strings.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	if !IsUploadTokenPath("/apis/upload.cdi.kubevirt.io/v1beta1") || IsUploadTokenPath("/apis/upload.cdi.kubevirt.io.evil") || IsUploadTokenPath("/apis/cdi.kubevirt.io/v1beta1") {
		t.Error("IsUploadTokenPath")
	}
	if code, body := do("GET", "/apis/upload.cdi.kubevirt.io/v1beta1", ""); code != 200 || !strings.Contains(body, `"uploadtokenrequests"`) {
		t.Errorf("discovery: %d %s", code, body)
	}
	code, body := do("POST", "/apis/upload.cdi.kubevirt.io/v1beta1/namespaces/"+testNS+"/uploadtokenrequests", `{"spec":{"pvcName":"disk"}}`)
	if code != 200 || !strings.Contains(body, `"token":"`) {
		t.Fatalf("token: %d %s", code, body)
	}
	if code, body := do("POST", "/apis/upload.cdi.kubevirt.io/v1beta1/namespaces/locked/uploadtokenrequests", `{"spec":{"pvcName":"disk"}}`); code != 401 || !strings.Contains(body, `cannot create resource "uploadtokenrequests" in API group "upload.cdi.kubevirt.io"`) {
		t.Errorf("denied: %d %s", code, body)
	}
	if code, _ := do("GET", "/apis/upload.cdi.kubevirt.io/v1beta1/namespaces/"+testNS+"/uploadtokenrequests", ""); code != 405 {
		t.Errorf("GET: %d", code)
	}
}
