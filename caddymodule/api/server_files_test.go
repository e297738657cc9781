package api_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/caddy-proxmox/caddy-proxmox/caddymodule/api"
	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
)

// fileVolumes lists the volumes of content type content of a storage.
func fileVolumes(a *testcaddy.PVE, storage, content string) map[string]map[string]any {
	var rows []map[string]any
	a.OK("GET", "/nodes/"+isoNode+"/storage/"+storage+"/content", url.Values{"content": {content}}, &rows)
	out := map[string]map[string]any{}
	for _, r := range rows {
		out[r["volid"].(string)] = r
	}
	return out
}

// isoVolumes lists the ISO images of the directory storage.
func isoVolumes(a *testcaddy.PVE) map[string]map[string]any { return fileVolumes(a, "local", "iso") }

func TestDownloadISO(t *testing.T) {
	a := shared(t)
	srv := mirror(t)
	defer api.AllowLoopbackURLs()()
	storage := "/nodes/" + isoNode + "/storage/local"
	download := func(form url.Values) testcaddy.Answer { return a.Do("POST", storage+"/download-url", form) }
	t.Cleanup(func() {
		for _, f := range []string{"tiny.iso", "broken.iso"} {
			a.Do("DELETE", storage+"/content/local:iso/"+f, nil)
		}
	})

	// What cannot be downloaded is refused before anything is made.
	for _, c := range []struct {
		form        url.Values
		code        int
		msg, errKey string
	}{
		{url.Values{"content": {"vztmpl"}, "filename": {"debian.tar.zst"}, "url": {srv.URL + "/x"}}, 500, "storage 'local' is not configured for content-type 'vztmpl'", ""},
		{url.Values{"content": {"import"}, "filename": {"disk.img"}, "url": {srv.URL + "/x"}}, 400, "", "filename"},
		{url.Values{"content": {"import"}, "filename": {"appliance.ova"}, "url": {srv.URL + "/x"}}, 500, "importing OVA archives is not supported", ""},
		{url.Values{"content": {"iso"}, "filename": {"debian.qcow2"}, "url": {srv.URL + "/x"}}, 400, "", "filename"},
		{url.Values{"content": {"iso"}, "filename": {"a.iso"}, "url": {"ftp://x/a.iso"}}, 400, "", "url"},
		{url.Values{"content": {"movies"}, "filename": {"a.iso"}, "url": {srv.URL + "/a.iso"}}, 400, "", "content"},
		{url.Values{"filename": {"a.iso"}, "url": {srv.URL + "/a.iso"}}, 400, "", "content"},
		{url.Values{"content": {"iso"}, "filename": {"a.iso"}, "url": {srv.URL + "/a.iso"}, "checksum": {"abc"}}, 400, "", "checksum-algorithm"},
		{url.Values{"content": {"iso"}, "filename": {"a.iso"}, "url": {srv.URL + "/a.iso"}, "compression": {"zst"}}, 500, "decompression method 'zst' is not supported", ""},
		{url.Values{"content": {"iso"}, "filename": {"a.iso"}, "url": {"http://169.254.169.254/a.iso"}}, 500, "(link-local address)", ""},
		{url.Values{"content": {"iso"}, "filename": {"a.iso"}, "url": {srv.URL + "/a.iso"}, "pool": {"lab"}}, 400, "", "pool"},
	} {
		ans := download(c.form)
		if ans.Code != c.code || !strings.Contains(ans.Message, c.msg) || (c.errKey != "" && ans.Errors[c.errKey] == "") {
			t.Errorf("%v: %s %s", c.form, ans.Status, ans.Raw)
		}
	}
	if ans := a.Do("POST", "/nodes/"+isoNode+"/storage/nope/download-url", url.Values{"content": {"iso"}, "filename": {"a.iso"}, "url": {srv.URL + "/a.iso"}}); ans.Code != 500 || ans.Message != "storage 'nope' does not exist\n" {
		t.Errorf("unknown storage: %s", ans.Status)
	}
	// A StorageClass keeps disks only, as PVE's block storages.
	if ans := a.Do("POST", "/nodes/"+isoNode+"/storage/local-lvm/download-url", url.Values{"content": {"iso"}, "filename": {"a.iso"}, "url": {srv.URL + "/a.iso"}}); ans.Code != 500 || ans.Message != "can't upload to storage type 'lvmthin', not a file based storage!\n" {
		t.Errorf("download into a StorageClass: %s", ans.Status)
	}

	// A download: the task (type download, id the file) ends when CDI is
	// done, and the image is listed as PVE lists it. bpg repeats node and
	// storage in the body.
	var upid string
	a.OK("POST", storage+"/download-url", url.Values{"content": {"iso"}, "filename": {"tiny.iso"}, "url": {srv.URL + "/images/tiny.iso"}, "verify-certificates": {"1"}, "node": {isoNode}, "storage": {"local"}}, &upid)
	if !strings.Contains(upid, ":download:tiny.iso:root@pam!ci:") {
		t.Fatalf("UPID %s", upid)
	}
	if _, listed := isoVolumes(a)["local:iso/tiny.iso"]; listed {
		t.Fatal("the image is listed while it downloads")
	}
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("download: %s", exit)
	}
	var lines []map[string]any
	a.OK("GET", "/nodes/"+isoNode+"/tasks/"+upid+"/log", nil, &lines)
	var log []string
	for _, l := range lines {
		log = append(log, l["t"].(string))
	}
	all := strings.Join(log, "\n")
	if !strings.HasPrefix(all, "downloading "+srv.URL+"/images/tiny.iso to /dev/pvc/default/tiny-iso") ||
		!strings.Contains(all, "size 123456789 bytes\nclaim of 1G\nimporting with CDI: DataVolume default/tiny-iso, StorageClass local-lvm") ||
		!strings.Contains(all, "download of '"+srv.URL+"/images/tiny.iso' to '/dev/pvc/default/tiny-iso' finished") || log[len(log)-1] != "TASK OK" {
		t.Fatalf("task log:\n%s", all)
	}
	// Listed with the file's size, as PVE lists a file, on the directory
	// storage only, though its claim is one of local-lvm.
	row := isoVolumes(a)["local:iso/tiny.iso"]
	if row == nil || row["content"] != "iso" || row["format"] != "iso" || row["size"] != float64(123456789) || row["path"] != "/dev/pvc/default/tiny-iso" {
		t.Fatalf("listing: %v", isoVolumes(a))
	}
	var vol map[string]any
	a.OK("GET", storage+"/content/local:iso%2Ftiny.iso", nil, &vol)
	if vol["size"] != float64(123456789) || vol["format"] != "iso" {
		t.Fatalf("volume: %v", vol)
	}
	if len(fileVolumes(a, "local-lvm", "iso")) != 0 || len(fileVolumes(a, "local-lvm", "")) == 0 {
		t.Fatalf("local-lvm lists files: %v", fileVolumes(a, "local-lvm", ""))
	}
	var storages []map[string]any
	a.OK("GET", "/nodes/"+isoNode+"/storage", url.Values{"content": {"iso"}}, &storages)
	if len(storages) != 1 || storages[0]["storage"] != "local" || storages[0]["type"] != "dir" || storages[0]["content"] != "import,iso,snippets" ||
		storages[0]["used"].(float64) < 1<<30 || storages[0]["shared"] != float64(0) {
		t.Fatalf("storages holding ISO images: %v", storages)
	}

	// Downloading the file again fails in the task, as PVE's worker does.
	a.OK("POST", storage+"/download-url", url.Values{"content": {"iso"}, "filename": {"tiny.iso"}, "url": {srv.URL + "/images/tiny.iso"}}, &upid)
	if exit := a.WaitTask(upid); exit != "refusing to override existing file '/dev/pvc/default/tiny-iso'" {
		t.Fatalf("second download: %s", exit)
	}

	// The image is a CD-ROM of a new VM.
	var vmid string
	a.OK("GET", "/cluster/nextid", nil, &vmid)
	a.OK("POST", "/nodes/"+isoNode+"/qemu", url.Values{"vmid": {vmid}, "name": {"installer"}, "ide2": {"local:iso/tiny.iso,media=cdrom"}, "scsi0": {"local-lvm:1"}}, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create: %s", exit)
	}
	var cfg map[string]any
	a.OK("GET", "/nodes/"+isoNode+"/qemu/"+vmid+"/config", nil, &cfg)
	if cfg["ide2"] != "local:iso/tiny.iso,media=cdrom,size=123456789" {
		t.Fatalf("config %v", cfg)
	}
	// It cannot be deleted while the VM uses it, nor VM disks here.
	if ans := a.Do("DELETE", storage+"/content/local:iso/tiny.iso", nil); ans.Code != 500 || ans.Message != "volume 'local:iso/tiny.iso' is still in use by VM "+vmid+" (remove the CD-ROM first)\n" {
		t.Fatalf("delete in use: %s", ans.Status)
	}
	lvm := "/nodes/" + isoNode + "/storage/local-lvm"
	if ans := a.Do("DELETE", lvm+"/content/local-lvm:vm-"+vmid+"-disk-0", nil); ans.Code != 500 || !strings.Contains(ans.Message, "deleting VM disk volume 'local-lvm:vm-"+vmid+"-disk-0' here is not supported") {
		t.Fatalf("delete a disk: %s", ans.Status)
	}
	if ans := a.Do("DELETE", lvm+"/content/local-lvm:iso/tiny.iso", nil); ans.Code != 500 || ans.Message != "volume 'local-lvm:iso/tiny.iso' does not exist\n" {
		t.Fatalf("a file through a StorageClass: %s", ans.Status)
	}
	if ans := a.Do("DELETE", storage+"/content/ceph-rbd:iso/tiny.iso", nil); ans.Code != 400 || ans.Errors["volume"] == "" {
		t.Fatalf("volume of another storage: %s %s", ans.Status, ans.Raw)
	}
	a.OK("DELETE", "/nodes/"+isoNode+"/qemu/"+vmid, nil, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("destroy: %s", exit)
	}

	// Deleted as proxmoxer and Ansible send it (unescaped slash): an imgdel
	// task, then the image is gone.
	a.OK("DELETE", storage+"/content/local:iso/tiny.iso", nil, &upid)
	if !strings.Contains(upid, ":imgdel:local:") {
		t.Fatalf("UPID %s", upid)
	}
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("delete: %s", exit)
	}
	if _, listed := isoVolumes(a)["local:iso/tiny.iso"]; listed {
		t.Fatal("the image is still listed")
	}
	if ans := a.Do("DELETE", storage+"/content/local:iso%2Ftiny.iso", nil); ans.Code != 500 || ans.Message != "volume 'local:iso/tiny.iso' does not exist\n" {
		t.Fatalf("delete again: %s", ans.Status)
	}

	// A download from a host that cannot be reached fails with CDI's
	// reason; it is not listed, and it can be deleted (escaped, as bpg
	// sends it; delay waits for the task, as in PVE).
	a.OK("POST", storage+"/download-url", url.Values{"content": {"iso"}, "filename": {"broken.iso"}, "url": {"http://fail.invalid/broken.iso"}}, &upid)
	if exit := a.WaitTask(upid); !strings.HasPrefix(exit, "download failed: Unable to connect to http data source") || !strings.Contains(exit, "fail.invalid") {
		t.Fatalf("failing download: %s", exit)
	}
	if _, listed := isoVolumes(a)["local:iso/broken.iso"]; listed {
		t.Fatal("a failed download is listed")
	}
	if ans := a.Do("DELETE", storage+"/content/local:iso%2Fbroken.iso", url.Values{"delay": {"10"}}); ans.Code != 200 || string(ans.Data) != "null" {
		t.Fatalf("delete the failed download: %s %s", ans.Status, ans.Raw)
	}
}

// PVE's permissions: downloading needs Datastore.AllocateTemplate and the
// network rights (Sys.Audit and Sys.Modify on /), uploading
// Datastore.AllocateTemplate, deleting Datastore.Allocate.
func TestDownloadPermissions(t *testing.T) {
	auditor := asIdentity(t, "auditor@pve")
	denied(t, auditor, "GET", "/nodes/"+isoNode+"/query-url-metadata", url.Values{"url": {"https://mirror.example/a.iso"}}, "Permission check failed (/, Sys.Modify)")
	denied(t, auditor, "POST", "/nodes/"+isoNode+"/storage/local/download-url",
		url.Values{"content": {"iso"}, "filename": {"a.iso"}, "url": {"https://mirror.example/a.iso"}}, "Permission check failed (/, Sys.Modify)")
	denied(t, auditor, "POST", "/nodes/"+isoNode+"/storage/local/upload", url.Values{"content": {"iso"}},
		"Permission check failed (/storage/local, Datastore.AllocateTemplate)")
	denied(t, asIdentity(t, "pooladmin@pve"), "DELETE", "/nodes/"+isoNode+"/storage/local/content/local:iso/a.iso", nil,
		"Permission check failed (/storage/local, Datastore.Allocate)")
	// An Administrator passes the checks (and learns the file is not there).
	admin := asIdentity(t, "admin@pve")
	if ans := admin.Do("DELETE", "/nodes/"+isoNode+"/storage/local/content/local:iso/a.iso", nil); ans.Code != 500 || !strings.Contains(ans.Message, "does not exist") {
		t.Fatalf("admin delete: %s", ans.Status)
	}
}

// Disk images to import: the image is checked and sized from its header
// before CDI is asked, listed with PVE's format and the file's size, and a
// VM's disk imports it by its volume id.
func TestDownloadImport(t *testing.T) {
	a := shared(t)
	srv := mirror(t)
	defer api.AllowLoopbackURLs()()
	storage := "/nodes/" + isoNode + "/storage/local"
	t.Cleanup(func() {
		for _, f := range []string{"noble.qcow2", "disk.img.raw"} {
			a.Do("DELETE", storage+"/content/local:import/"+f, nil)
		}
	})
	download := func(file, path string, extra url.Values) string {
		form := url.Values{"content": {"import"}, "filename": {file}, "url": {srv.URL + path}}
		for k, v := range extra {
			form[k] = v
		}
		var upid string
		a.OK("POST", storage+"/download-url", form, &upid)
		return a.WaitTask(upid)
	}
	logOf := func(upid string) string {
		var lines []map[string]any
		a.OK("GET", "/nodes/"+isoNode+"/tasks/"+upid+"/log", nil, &lines)
		var log []string
		for _, l := range lines {
			log = append(log, l["t"].(string))
		}
		return strings.Join(log, "\n")
	}

	// Not a qcow2 image: the task fails as PVE's check after the download.
	if exit := download("fake.qcow2", "/images/fake.qcow2", nil); exit != "failed to verify file: qemu-img: Could not open '/dev/pvc/default/import-fake-qcow2': Image is not in qcow2 format" {
		t.Fatalf("fake qcow2: %s", exit)
	}
	// PVE decompresses ISO images only.
	if exit := download("disk.img.raw", "/images/disk.img.raw", url.Values{"compression": {"gz"}}); exit != "decompression not supported for import" {
		t.Fatalf("compressed import: %s", exit)
	}
	if vols := fileVolumes(a, "local", "import"); len(vols) != 0 {
		t.Fatalf("refused downloads are listed: %v", vols)
	}

	var upid string
	a.OK("POST", storage+"/download-url", url.Values{"content": {"import"}, "filename": {"noble.qcow2"}, "url": {srv.URL + "/images/noble.qcow2"}}, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("qcow2 download: %s", exit)
	}
	if log := logOf(upid); !strings.Contains(log, "size 104 bytes\nqcow2 image of 3G\nclaim of 4G\nimporting with CDI: DataVolume default/import-noble-qcow2") {
		t.Fatalf("task log:\n%s", log)
	}
	if exit := download("disk.img.raw", "/images/disk.img.raw", nil); exit != "OK" {
		t.Fatalf("raw download: %s", exit)
	}
	vols := fileVolumes(a, "local", "import")
	if q := vols["local:import/noble.qcow2"]; q == nil || q["format"] != "qcow2" || q["size"] != float64(104) || q["content"] != "import" {
		t.Fatalf("qcow2 listing: %v", vols)
	}
	if r := vols["local:import/disk.img.raw"]; r == nil || r["format"] != "raw" || r["size"] != float64(1<<20) {
		t.Fatalf("raw listing: %v", vols)
	}

	// bpg's import_from: "<storage>:0,import-from=local:import/<file>",
	// then a resize; the new disk holds the image's disk (3G), not its claim.
	var vmid string
	a.OK("GET", "/cluster/nextid", nil, &vmid)
	a.OK("POST", "/nodes/"+isoNode+"/qemu", url.Values{"vmid": {vmid}, "name": {"imported"},
		"scsi0": {"file=local-lvm:0,import-from=local:import/noble.qcow2,iothread=1"},
		"scsi1": {"local-lvm:0,import-from=local:import/disk.img.raw"}}, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create: %s", exit)
	}
	t.Cleanup(func() { a.Do("DELETE", "/nodes/"+isoNode+"/qemu/"+vmid, url.Values{"purge": {"1"}}) })
	var cfg map[string]any
	a.OK("GET", "/nodes/"+isoNode+"/qemu/"+vmid+"/config", nil, &cfg)
	if cfg["scsi0"] != "local-lvm:vm-"+vmid+"-disk-0,iothread=1,size=3G" || cfg["scsi1"] != "local-lvm:vm-"+vmid+"-disk-1,size=1M" {
		t.Fatalf("config %v", cfg)
	}
	if ans := a.Do("POST", "/nodes/"+isoNode+"/qemu", url.Values{"vmid": {"4321"}, "scsi0": {"local-lvm:0,import-from=local:import/none.qcow2"}}); ans.Code != 400 || !strings.Contains(string(ans.Raw), "import-from: volume 'local:import/none.qcow2' does not exist") {
		t.Fatalf("missing image: %s %s", ans.Status, ans.Raw)
	}
}

// The directory storage's name and StorageClass are configured: "files" on
// ceph-rbd in the fixed-namespaces site.
func TestLocalStorageConfigured(t *testing.T) {
	shared(t)
	a := &testcaddy.PVE{T: t, Base: fmt.Sprintf("https://localhost:%d", fixedPort), C: testcaddy.Client(), Auth: testcaddy.TokenAuth(testToken, testSecret)}
	srv := mirror(t)
	defer api.AllowLoopbackURLs()()
	var rows []map[string]any
	a.OK("GET", "/storage", nil, &rows)
	var ids []string
	for _, r := range rows {
		ids = append(ids, fmt.Sprint(r["storage"], "=", r["type"], "/", r["content"]))
	}
	if got := strings.Join(ids, " "); got != "ceph-rbd=rbd/images,rootdir files=dir/import,iso,snippets local-lvm=lvmthin/images,rootdir" {
		t.Fatalf("storages: %s", got)
	}
	if ans := a.Do("GET", "/nodes/"+isoNode+"/storage/local/content", nil); ans.Code != 500 || ans.Message != "storage 'local' does not exist\n" {
		t.Fatalf("local: %s", ans.Status)
	}
	var upid string
	a.OK("POST", "/nodes/"+isoNode+"/storage/files/download-url", url.Values{"content": {"iso"}, "filename": {"tiny.iso"}, "url": {srv.URL + "/images/tiny.iso"}}, &upid)
	t.Cleanup(func() { a.Do("DELETE", "/nodes/"+isoNode+"/storage/files/content/files:iso/tiny.iso", nil) })
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("download: %s", exit)
	}
	var lines []map[string]any
	a.OK("GET", "/nodes/"+isoNode+"/tasks/"+upid+"/log", nil, &lines)
	if len(lines) < 4 || lines[3]["t"] != "importing with CDI: DataVolume default/tiny-iso, StorageClass ceph-rbd" {
		t.Fatalf("task log: %v", lines)
	}
	var vols []map[string]any
	a.OK("GET", "/nodes/"+isoNode+"/storage/files/content", nil, &vols)
	if len(vols) != 1 || vols[0]["volid"] != "files:iso/tiny.iso" {
		t.Fatalf("files: %v", vols)
	}
	a.OK("GET", "/nodes/"+isoNode+"/storage/ceph-rbd/content", url.Values{"content": {"iso"}}, &vols)
	if len(vols) != 0 {
		t.Fatalf("ceph-rbd lists the file: %v", vols)
	}
}
