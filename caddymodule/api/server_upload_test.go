package api_test

import (
	"bytes"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/caddymodule/api"
	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
)

// uploadForm is a multipart body as bpg's APIUpload and the PVE GUI send
// it: fields first, then the file as field fileField.
func uploadForm(t *testing.T, fields [][2]string, fileField, name string, data []byte) (string, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, f := range fields {
		if err := mw.WriteField(f[0], f[1]); err != nil {
			t.Fatal(err)
		}
	}
	fw, err := mw.CreateFormFile(fileField, name)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = fw.Write(data)
	_ = mw.Close()
	return mw.FormDataContentType(), &buf
}

func upload(t *testing.T, a *testcaddy.PVE, storage string, fields [][2]string, name string, data []byte) testcaddy.Answer {
	t.Helper()
	ctype, body := uploadForm(t, fields, "filename", name, data)
	ans, err := a.SendBody("POST", "/nodes/"+isoNode+"/storage/"+storage+"/upload", ctype, body)
	if err != nil {
		t.Fatal(err)
	}
	return ans
}

func decode(ans testcaddy.Answer, into any) error { return json.Unmarshal(ans.Data, into) }

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// Uploads stream into CDI's upload path: an imgcopy task, the file listed
// with its size, checksums checked, a file overwritten as PVE does, and
// PVE's refusals.
func TestUpload(t *testing.T) {
	a := shared(t)
	storage := "/nodes/" + isoNode + "/storage/local"
	t.Cleanup(func() {
		for _, f := range []string{"iso/up.iso", "iso/bad-sum.iso", "import/up.qcow2", "import/disk.raw"} {
			a.Do("DELETE", storage+"/content/local:"+f, nil)
		}
	})
	// 1 MiB and a bit: far past the API's 64 KiB body limit.
	data := bytes.Repeat([]byte("pretend this is an ISO\n"), 50000)
	ans := upload(t, a, "local", [][2]string{{"content", "iso"}, {"checksum-algorithm", "sha256"}, {"checksum", strings.ToUpper(sha(data))}}, "up.iso", data)
	var upid string
	if ans.Code != 200 || decode(ans, &upid) != nil || !strings.Contains(upid, ":imgcopy::root@pam!ci:") {
		t.Fatalf("upload: %s %s", ans.Status, ans.Raw)
	}
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("upload task: %s\n%s", exit, taskLog(t, a, isoNode, upid))
	}
	log := taskLog(t, a, isoNode, upid)
	for _, want := range []string{
		"starting file import from: upload of 'up.iso' (",
		"calculating checksum...OK, checksum verified", "target file: /dev/pvc/default/up-iso",
		fmt.Sprintf("file size is: %d", len(data)), "finished file import successfully", "TASK OK",
	} {
		if !strings.Contains(log, want) {
			t.Fatalf("task log lacks %q:\n%s", want, log)
		}
	}
	if row := isoVolumes(a)["local:iso/up.iso"]; row == nil || row["size"] != float64(len(data)) {
		t.Fatalf("listing: %v", isoVolumes(a))
	}

	// Uploaded again, smaller: PVE overwrites the file.
	small := []byte("a smaller ISO")
	ans = upload(t, a, "local", [][2]string{{"content", "iso"}}, "up.iso", small)
	if ans.Code != 200 || decode(ans, &upid) != nil || a.WaitTask(upid) != "OK" {
		t.Fatalf("overwrite: %s %s", ans.Status, ans.Raw)
	}
	if row := isoVolumes(a)["local:iso/up.iso"]; row == nil || row["size"] != float64(len(small)) {
		t.Fatalf("listing after the overwrite: %v", isoVolumes(a))
	}

	// A checksum that differs fails the task; the file is not kept.
	ans = upload(t, a, "local", [][2]string{{"content", "iso"}, {"checksum-algorithm", "md5"}, {"checksum", "00112233445566778899aabbccddeeff"}}, "bad-sum.iso", small)
	if ans.Code != 200 || decode(ans, &upid) != nil {
		t.Fatalf("bad checksum: %s %s", ans.Status, ans.Raw)
	}
	md := md5.Sum(small)
	if exit := a.WaitTask(upid); exit != "checksum mismatch: got '"+hex.EncodeToString(md[:])+"' != expect '00112233445566778899aabbccddeeff'" {
		t.Fatalf("bad checksum task: %s", exit)
	}
	if _, listed := isoVolumes(a)["local:iso/bad-sum.iso"]; listed {
		t.Fatal("a file that failed its checksum is listed")
	}

	// Images to import: checked as PVE checks them, sized from the header.
	if exit := uploadTask(t, a, [][2]string{{"content", "import"}}, "up.qcow2", []byte("asd")); exit != "qemu-img: Could not open '/dev/pvc/default/import-up-qcow2': Image is not in qcow2 format" {
		t.Fatalf("fake qcow2: %s", exit)
	}
	if exit := uploadTask(t, a, [][2]string{{"content", "import"}}, "disk.raw", make([]byte, 70000)); exit != "OK" {
		t.Fatalf("raw image: %s", exit)
	}
	if vols := fileVolumes(a, "local", "import"); vols["local:import/disk.raw"]["size"] != float64(70000) {
		t.Fatalf("import listing: %v", vols)
	}

	// PVE's refusals.
	for _, c := range []struct {
		fields  [][2]string
		field   string
		name    string
		code    int
		msg     string
		errKey  string
		storage string
	}{
		{[][2]string{{"content", "vztmpl"}}, "filename", "ct.tar.zst", 500, "storage 'local' does not support 'vztmpl' content", "", "local"},
		{[][2]string{{"content", "iso"}}, "file", "x.iso", 500, "wrong field name 'file' for file upload, expected 'filename'", "", "local"},
		{[][2]string{{"content", "iso"}}, "filename", "x.qcow2", 400, "", "filename", "local"},
		{[][2]string{{"content", "import"}}, "filename", "x.img", 400, "", "filename", "local"},
		{[][2]string{{"content", "backup"}}, "filename", "x.iso", 400, "", "content", "local"},
		{[][2]string{{"content", "iso"}, {"checksum", "abc"}}, "filename", "x.iso", 400, "", "checksum-algorithm", "local"},
		{[][2]string{{"content", "iso"}, {"pool", "lab"}}, "filename", "x.iso", 400, "", "pool", "local"},
		{[][2]string{{"content", "iso"}, {"storage", "other"}}, "filename", "x.iso", 400, "", "storage", "local"},
		{[][2]string{{"content", "iso"}}, "filename", "x.iso", 500, "can't upload to storage type 'lvmthin', not a file based storage!", "", "local-lvm"},
		{[][2]string{{"content", "iso"}}, "filename", "x.iso", 500, "storage 'nope' does not exist", "", "nope"},
	} {
		ctype, body := uploadForm(t, c.fields, c.field, c.name, []byte("x"))
		ans, err := a.SendBody("POST", "/nodes/"+isoNode+"/storage/"+c.storage+"/upload", ctype, body)
		if err != nil {
			t.Fatal(err)
		}
		if ans.Code != c.code || !strings.Contains(ans.Message, c.msg) || (c.errKey != "" && ans.Errors[c.errKey] == "") {
			t.Errorf("%v %s %s to %s: %s %s", c.fields, c.field, c.name, c.storage, ans.Status, ans.Raw)
		}
	}
	if ans, _ := a.SendBody("POST", storage+"/upload", "application/json", strings.NewReader(`{"content":"iso"}`)); ans.Code != 500 || ans.Message != "upload 'Content-Type 'application/json' not implemented\n" {
		t.Errorf("JSON upload: %s", ans.Status)
	}
}

// uploadTask uploads and waits for the task's exit status.
func uploadTask(t *testing.T, a *testcaddy.PVE, fields [][2]string, name string, data []byte) string {
	t.Helper()
	ans := upload(t, a, "local", fields, name, data)
	var upid string
	if ans.Code != 200 || decode(ans, &upid) != nil {
		t.Fatalf("upload %s: %s %s", name, ans.Status, ans.Raw)
	}
	return a.WaitTask(upid)
}

// The directory storage's max_upload bounds an upload before it is read.
func TestUploadTooLarge(t *testing.T) {
	shared(t)
	a := &testcaddy.PVE{T: t, Base: fmt.Sprintf("https://localhost:%d", fixedPort), C: testcaddy.Client(), Auth: testcaddy.TokenAuth(testToken, testSecret)}
	ctype, body := uploadForm(t, [][2]string{{"content", "iso"}}, "filename", "big.iso", make([]byte, 2<<20))
	req, _ := http.NewRequest("POST", a.Base+"/api2/json/nodes/"+isoNode+"/storage/files/upload", body)
	req.Header.Set("Content-Type", ctype)
	// The answer comes before the body is sent (a client that sends it
	// anyway sees the connection closed under it, as with any server).
	req.Header.Set("Expect", "100-continue")
	a.Auth(req)
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ExpectContinueTimeout: 10 * time.Second}} //nolint:gosec // test CA
	res, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 413 || !strings.HasPrefix(res.Status, "413 request entity too large (uploads are limited to 1M") {
		t.Fatalf("too large: %s", res.Status)
	}
}

// Downloads with a checksum (or without certificate checks) are fetched by
// the plugin and uploaded through CDI, in a worker task, as PVE's worker
// downloads them.
func TestDownloadChecksum(t *testing.T) {
	a := shared(t)
	srv := mirror(t)
	defer api.AllowLoopbackURLs()()
	storage := "/nodes/" + isoNode + "/storage/local"
	t.Cleanup(func() {
		for _, f := range []string{"iso/sum.img", "iso/other.img", "import/sum.qcow2"} {
			a.Do("DELETE", storage+"/content/local:"+f, nil)
		}
	})
	raw := make([]byte, 1<<20) // the mirror's disk.img.raw
	download := func(file, path, alg, sum string) (string, string) {
		form := url.Values{"content": {"iso"}, "filename": {file}, "url": {srv.URL + path}, "checksum-algorithm": {alg}, "checksum": {sum}}
		if strings.HasSuffix(file, ".qcow2") {
			form.Set("content", "import")
		}
		var upid string
		a.OK("POST", storage+"/download-url", form, &upid)
		return a.WaitTask(upid), taskLog(t, a, isoNode, upid)
	}
	exit, log := download("sum.img", "/images/disk.img.raw", "sha256", sha(raw))
	if exit != "OK" || !strings.Contains(log, "fetched by the plugin and uploaded through CDI: DataVolume default/sum-img") ||
		!strings.Contains(log, "calculating checksum...OK, checksum verified\ndownload of '"+srv.URL+"/images/disk.img.raw' to '/dev/pvc/default/sum-img' finished") {
		t.Fatalf("download: %s\n%s", exit, log)
	}
	if row := isoVolumes(a)["local:iso/sum.img"]; row == nil || row["size"] != float64(len(raw)) {
		t.Fatalf("listing: %v", isoVolumes(a))
	}
	// Again with the same checksum: PVE's "got correct file already".
	if exit, log := download("sum.img", "/images/disk.img.raw", "sha256", sha(raw)); exit != "OK" || !strings.Contains(log, "OK, got correct file already, no need to download") {
		t.Fatalf("same file: %s\n%s", exit, log)
	}
	if exit, _ := download("sum.img", "/images/disk.img.raw", "sha256", sha([]byte("other"))); exit != "checksum mismatch: got '"+sha(raw)+"' != expect '"+sha([]byte("other"))+"', aborting" {
		t.Fatalf("other checksum of an existing file: %s", exit)
	}
	// A checksum that differs: the task fails, nothing is kept.
	s1 := sha1.Sum(raw)
	if exit, _ := download("other.img", "/images/disk.img.raw", "sha1", "0000"); exit != "checksum mismatch: got '"+hex.EncodeToString(s1[:])+"' != expect '0000'" {
		t.Fatalf("bad checksum: %s", exit)
	}
	if _, listed := isoVolumes(a)["local:iso/other.img"]; listed {
		t.Fatal("a download that failed its checksum is listed")
	}
	// bpg's "download qcow2 file to import storage": the checksum is
	// right, but the file is no qcow2 image.
	if exit, _ := download("sum.qcow2", "/images/fake.qcow2", "sha256", sha([]byte("asd"))); exit != "failed to verify file: qemu-img: Could not open '/dev/pvc/default/import-sum-qcow2': Image is not in qcow2 format" {
		t.Fatalf("fake qcow2: %s", exit)
	}
}
