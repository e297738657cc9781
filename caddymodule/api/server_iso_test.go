package api_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/caddy-proxmox/caddy-proxmox/caddymodule/api"
	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
)

// isoVolumes lists the ISO volume ids of local-lvm.
func isoVolumes(a *testcaddy.PVE) map[string]map[string]any {
	var rows []map[string]any
	a.OK("GET", "/nodes/"+isoNode+"/storage/local-lvm/content", url.Values{"content": {"iso"}}, &rows)
	out := map[string]map[string]any{}
	for _, r := range rows {
		out[r["volid"].(string)] = r
	}
	return out
}

func TestDownloadISO(t *testing.T) {
	a := shared(t)
	srv := mirror(t)
	defer api.AllowLoopbackURLs()()
	storage := "/nodes/" + isoNode + "/storage/local-lvm"
	download := func(form url.Values) testcaddy.Answer { return a.Do("POST", storage+"/download-url", form) }
	t.Cleanup(func() {
		for _, f := range []string{"tiny.iso", "broken.iso"} {
			a.Do("DELETE", storage+"/content/local-lvm:iso/"+f, nil)
		}
	})

	// What cannot be downloaded is refused before anything is made.
	for _, c := range []struct {
		form        url.Values
		code        int
		msg, errKey string
	}{
		{url.Values{"content": {"vztmpl"}, "filename": {"debian.tar.zst"}, "url": {srv.URL + "/x"}}, 500, "storage 'local-lvm' is not configured for content-type 'vztmpl' (only ISO images can be downloaded: there are no containers here)", ""},
		{url.Values{"content": {"import"}, "filename": {"disk.qcow2"}, "url": {srv.URL + "/x"}}, 500, "not configured for content-type 'import'", ""},
		{url.Values{"content": {"iso"}, "filename": {"debian.qcow2"}, "url": {srv.URL + "/x"}}, 400, "", "filename"},
		{url.Values{"content": {"iso"}, "filename": {"a.iso"}, "url": {"ftp://x/a.iso"}}, 400, "", "url"},
		{url.Values{"content": {"movies"}, "filename": {"a.iso"}, "url": {srv.URL + "/a.iso"}}, 400, "", "content"},
		{url.Values{"filename": {"a.iso"}, "url": {srv.URL + "/a.iso"}}, 400, "", "content"},
		{url.Values{"content": {"iso"}, "filename": {"a.iso"}, "url": {srv.URL + "/a.iso"}, "checksum": {"abc"}}, 400, "", "checksum-algorithm"},
		{url.Values{"content": {"iso"}, "filename": {"a.iso"}, "url": {srv.URL + "/a.iso"}, "checksum": {"abc"}, "checksum-algorithm": {"sha256"}}, 500, "checksum verification is not supported", ""},
		{url.Values{"content": {"iso"}, "filename": {"a.iso"}, "url": {srv.URL + "/a.iso"}, "compression": {"zst"}}, 500, "decompression method 'zst' is not supported", ""},
		{url.Values{"content": {"iso"}, "filename": {"a.iso"}, "url": {"https://mirror.example/a.iso"}, "verify-certificates": {"0"}}, 500, "verify-certificates=0 is not supported", ""},
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

	// A download: the task (type download, id the file) ends when CDI is
	// done, and the image is listed as PVE lists it. bpg repeats node and
	// storage in the body.
	var upid string
	a.OK("POST", storage+"/download-url", url.Values{"content": {"iso"}, "filename": {"tiny.iso"}, "url": {srv.URL + "/images/tiny.iso"}, "verify-certificates": {"1"}, "node": {isoNode}, "storage": {"local-lvm"}}, &upid)
	if !strings.Contains(upid, ":download:tiny.iso:root@pam!ci:") {
		t.Fatalf("UPID %s", upid)
	}
	if _, listed := isoVolumes(a)["local-lvm:iso/tiny.iso"]; listed {
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
		!strings.Contains(all, "size 123456789 bytes; claim of 1G") ||
		!strings.Contains(all, "download of '"+srv.URL+"/images/tiny.iso' to '/dev/pvc/default/tiny-iso' finished") || log[len(log)-1] != "TASK OK" {
		t.Fatalf("task log:\n%s", all)
	}
	row := isoVolumes(a)["local-lvm:iso/tiny.iso"]
	if row == nil || row["content"] != "iso" || row["format"] != "iso" || row["size"] != float64(1<<30) {
		t.Fatalf("listing: %v", isoVolumes(a))
	}
	var storages []map[string]any
	a.OK("GET", "/nodes/"+isoNode+"/storage", url.Values{"content": {"iso"}}, &storages)
	if len(storages) != 1 || storages[0]["storage"] != "local-lvm" {
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
	a.OK("POST", "/nodes/"+isoNode+"/qemu", url.Values{"vmid": {vmid}, "name": {"installer"}, "ide2": {"local-lvm:iso/tiny.iso,media=cdrom"}, "scsi0": {"local-lvm:1"}}, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create: %s", exit)
	}
	var cfg map[string]any
	a.OK("GET", "/nodes/"+isoNode+"/qemu/"+vmid+"/config", nil, &cfg)
	if cfg["ide2"] != "local-lvm:iso/tiny.iso,media=cdrom,size=1G" {
		t.Fatalf("config %v", cfg)
	}
	// It cannot be deleted while the VM uses it, nor VM disks here.
	if ans := a.Do("DELETE", storage+"/content/local-lvm:iso/tiny.iso", nil); ans.Code != 500 || ans.Message != "volume 'local-lvm:iso/tiny.iso' is still in use by VM "+vmid+" (remove the CD-ROM first)\n" {
		t.Fatalf("delete in use: %s", ans.Status)
	}
	if ans := a.Do("DELETE", storage+"/content/local-lvm:vm-"+vmid+"-disk-0", nil); ans.Code != 500 || !strings.Contains(ans.Message, "deleting VM disk volume 'local-lvm:vm-"+vmid+"-disk-0' here is not supported") {
		t.Fatalf("delete a disk: %s", ans.Status)
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
	a.OK("DELETE", storage+"/content/local-lvm:iso/tiny.iso", nil, &upid)
	if !strings.Contains(upid, ":imgdel:local-lvm:") {
		t.Fatalf("UPID %s", upid)
	}
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("delete: %s", exit)
	}
	if _, listed := isoVolumes(a)["local-lvm:iso/tiny.iso"]; listed {
		t.Fatal("the image is still listed")
	}
	if ans := a.Do("DELETE", storage+"/content/local-lvm:iso%2Ftiny.iso", nil); ans.Code != 500 || ans.Message != "volume 'local-lvm:iso/tiny.iso' does not exist\n" {
		t.Fatalf("delete again: %s", ans.Status)
	}

	// A download from a host that cannot be reached fails with CDI's
	// reason; it is not listed, and it can be deleted (escaped, as bpg
	// sends it; delay waits for the task, as in PVE).
	a.OK("POST", storage+"/download-url", url.Values{"content": {"iso"}, "filename": {"broken.iso"}, "url": {"http://fail.invalid/broken.iso"}}, &upid)
	if exit := a.WaitTask(upid); !strings.HasPrefix(exit, "download failed: Unable to connect to http data source") || !strings.Contains(exit, "fail.invalid") {
		t.Fatalf("failing download: %s", exit)
	}
	if _, listed := isoVolumes(a)["local-lvm:iso/broken.iso"]; listed {
		t.Fatal("a failed download is listed")
	}
	if ans := a.Do("DELETE", storage+"/content/local-lvm:iso%2Fbroken.iso", url.Values{"delay": {"10"}}); ans.Code != 200 || string(ans.Data) != "null" {
		t.Fatalf("delete the failed download: %s %s", ans.Status, ans.Raw)
	}
}

// PVE's permissions: downloading needs Datastore.AllocateTemplate and the
// network rights (Sys.Audit and Sys.Modify on /), deleting Datastore.Allocate.
func TestDownloadPermissions(t *testing.T) {
	auditor := asIdentity(t, "auditor@pve")
	denied(t, auditor, "GET", "/nodes/"+isoNode+"/query-url-metadata", url.Values{"url": {"https://mirror.example/a.iso"}}, "Permission check failed (/, Sys.Modify)")
	denied(t, auditor, "POST", "/nodes/"+isoNode+"/storage/local-lvm/download-url",
		url.Values{"content": {"iso"}, "filename": {"a.iso"}, "url": {"https://mirror.example/a.iso"}}, "Permission check failed (/, Sys.Modify)")
	denied(t, asIdentity(t, "pooladmin@pve"), "DELETE", "/nodes/"+isoNode+"/storage/local-lvm/content/local-lvm:iso/a.iso", nil,
		"Permission check failed (/storage/local-lvm, Datastore.Allocate)")
	// An Administrator passes the checks (and learns the file is not there).
	admin := asIdentity(t, "admin@pve")
	if ans := admin.Do("DELETE", "/nodes/"+isoNode+"/storage/local-lvm/content/local-lvm:iso/a.iso", nil); ans.Code != 500 || !strings.Contains(ans.Message, "does not exist") {
		t.Fatalf("admin delete: %s", ans.Status)
	}
}
