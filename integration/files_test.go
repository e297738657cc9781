package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"mime/multipart"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"kubevirt.io/client-go/containerizeddataimporter"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/caddy-proxmox/caddy-proxmox/kubevirtsim"
	"github.com/caddy-proxmox/caddy-proxmox/testenv"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// An upload to the directory storage on the real apiserver: the plugin
// asks the aggregated upload.cdi.kubevirt.io API for a token (authorized
// by a SelfSubjectAccessReview, as cdi-apiserver), sends the bytes over
// TLS to the stand-in cdi-uploadproxy (trusted through ca_file), and the
// claim of the default StorageClass carries the file; what the upload
// server received is what the client sent.
func TestUploadToLocalStorage(t *testing.T) {
	a := pve(t)
	node := firstNode(a)
	ctx := context.Background()
	data := bytes.Repeat([]byte("a KubeVirt ISO image\n"), 20000) // past the API's 64 KiB
	sum := sha256.Sum256(data)
	hexSum := hex.EncodeToString(sum[:])

	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	_ = mw.WriteField("content", "iso")
	_ = mw.WriteField("checksum-algorithm", "sha256")
	_ = mw.WriteField("checksum", hexSum)
	fw, _ := mw.CreateFormFile("filename", "it-upload.iso")
	_, _ = fw.Write(data)
	_ = mw.Close()
	ans, err := a.SendBody("POST", "/nodes/"+node+"/storage/local/upload", mw.FormDataContentType(), &body)
	if err != nil {
		t.Fatal(err)
	}
	var upid string
	if ans.Code != 200 || jsonString(ans.Data, &upid) != nil {
		t.Fatalf("upload: %s %s", ans.Status, ans.Raw)
	}
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("upload task: %s", exit)
	}
	t.Cleanup(func() { a.Do("DELETE", "/nodes/"+node+"/storage/local/content/local:iso/it-upload.iso", nil) })

	pvc, err := env.Kube.CoreV1().PersistentVolumeClaims("default").Get(ctx, "it-upload-iso", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ann := pvc.Annotations
	if ann[translate.AnnotationISOFile] != "it-upload.iso" || ann[translate.AnnotationFileSize] != strconv.Itoa(len(data)) ||
		ann[translate.AnnotationChecksum] != "sha256:"+hexSum || ann[translate.AnnotationFilePending] != "" ||
		pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != testenv.DefaultStorageClass {
		t.Fatalf("claim: class %v, annotations %v", pvc.Spec.StorageClassName, ann)
	}
	if ann[kubevirtsim.AnnotationUploadedSHA256] != hexSum || ann[kubevirtsim.AnnotationUploadedBytes] != strconv.Itoa(len(data)) {
		t.Fatalf("the upload server got other bytes: %v", ann)
	}
	cdi, err := containerizeddataimporter.NewForConfig(env.DirectConfig)
	if err != nil {
		t.Fatal(err)
	}
	dv, err := cdi.CdiV1beta1().DataVolumes("default").Get(ctx, "it-upload-iso", metav1.GetOptions{})
	if err != nil || dv.Spec.Source == nil || dv.Spec.Source.Upload == nil || dv.Status.Phase != cdiv1.Succeeded {
		t.Fatalf("DataVolume: %+v %v", dv, err)
	}

	var vols []map[string]any
	a.OK("GET", "/nodes/"+node+"/storage/local/content", form("content", "iso"), &vols)
	found := false
	for _, v := range vols {
		if v["volid"] == "local:iso/it-upload.iso" {
			found = v["size"] == float64(len(data)) && v["format"] == "iso"
		}
	}
	if !found {
		t.Fatalf("content of local: %v", vols)
	}

	// The image is a VM's CD-ROM, showing the file's size.
	id := nextID(a)
	a.OK("POST", "/nodes/"+node+"/qemu", form("vmid", id, "name", "it-installer", "ide2", "local:iso/it-upload.iso,media=cdrom"), &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create: %s", exit)
	}
	var cfg map[string]any
	a.OK("GET", "/nodes/"+node+"/qemu/"+id+"/config", nil, &cfg)
	if cfg["ide2"] != "local:iso/it-upload.iso,media=cdrom,size="+strconv.Itoa(len(data)) {
		t.Fatalf("config %v", cfg)
	}
	vm := vmByID(t, id)
	if v := vm.Spec.Template.Spec.Volumes; len(v) != 1 || v[0].PersistentVolumeClaim == nil || v[0].PersistentVolumeClaim.ClaimName != "it-upload-iso" {
		t.Fatalf("volumes %+v", v)
	}
	a.OK("DELETE", "/nodes/"+node+"/qemu/"+id, nil, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("destroy: %s", exit)
	}
	a.OK("DELETE", "/nodes/"+node+"/storage/local/content/local:iso/it-upload.iso", nil, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("delete: %s", exit)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, err := env.Kube.CoreV1().PersistentVolumeClaims("default").Get(ctx, "it-upload-iso", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the claim stays: %v", err)
		}
	}
	// A checksum that differs: the task fails and nothing is left.
	body.Reset()
	mw = multipart.NewWriter(&body)
	_ = mw.WriteField("content", "iso")
	_ = mw.WriteField("checksum-algorithm", "sha256")
	_ = mw.WriteField("checksum", strings.Repeat("0", 64))
	fw, _ = mw.CreateFormFile("filename", "it-bad.iso")
	_, _ = fw.Write(data)
	_ = mw.Close()
	ans, _ = a.SendBody("POST", "/nodes/"+node+"/storage/local/upload", mw.FormDataContentType(), &body)
	if ans.Code != 200 || jsonString(ans.Data, &upid) != nil {
		t.Fatalf("upload: %s %s", ans.Status, ans.Raw)
	}
	if exit := a.WaitTask(upid); !strings.HasPrefix(exit, "checksum mismatch: got '"+hexSum+"'") {
		t.Fatalf("bad checksum: %s", exit)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, err := cdi.CdiV1beta1().DataVolumes("default").Get(ctx, "it-bad-iso", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the failed upload's DataVolume stays: %v", err)
		}
	}
}
