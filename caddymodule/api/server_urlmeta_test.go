package api_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/caddymodule/api"
)

const isoNode = "kv-node-1-lab-internal"

// mirror is an ISO mirror: tiny.iso answers HEAD, nohead.iso only a ranged
// GET, named answers with a Content-Disposition, away redirects to a
// cloud metadata address; noble.qcow2 is a qcow2 image's header, fake.qcow2
// no image, disk.img.raw a raw image of 1 MiB; anything else is 404.
func mirror(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/images/tiny.iso":
			w.Header().Set("Content-Type", "application/x-iso9660-image; charset=binary")
			w.Header().Set("Content-Length", "123456789")
			w.WriteHeader(http.StatusOK)
		case "/images/nohead.iso":
			if r.Method == http.MethodHead {
				w.WriteHeader(http.StatusMethodNotAllowed)
				return
			}
			if r.Header.Get("Range") != "bytes=0-0" {
				t.Errorf("GET without a range: %v", r.Header)
			}
			w.Header().Set("Content-Range", "bytes 0-0/987654321")
			w.WriteHeader(http.StatusPartialContent)
			_, _ = w.Write([]byte{0})
		case "/images/noble.qcow2":
			// A qcow2 header: version 3, a 3 GiB disk.
			h := make([]byte, 104)
			copy(h, "QFI\xfb")
			binary.BigEndian.PutUint32(h[4:], 3)
			binary.BigEndian.PutUint64(h[24:], 3<<30)
			http.ServeContent(w, r, "noble.qcow2", time.Time{}, bytes.NewReader(h))
		case "/images/fake.qcow2":
			http.ServeContent(w, r, "fake.qcow2", time.Time{}, strings.NewReader("asd"))
		case "/images/disk.img.raw":
			http.ServeContent(w, r, "disk.img.raw", time.Time{}, bytes.NewReader(make([]byte, 1<<20)))
		case "/download":
			w.Header().Set("Content-Disposition", `attachment; filename="netinst.iso"`)
			w.Header().Set("Content-Length", "42")
		case "/away":
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestQueryURLMetadata(t *testing.T) {
	a := shared(t)
	srv := mirror(t)
	path := "/nodes/" + isoNode + "/query-url-metadata"

	// Loopback is refused in production: the plugin must not probe itself.
	if ans := a.Do("GET", path, url.Values{"url": {srv.URL + "/images/tiny.iso"}}); ans.Code != 500 || !strings.Contains(ans.Message, "refusing to connect to 127.0.0.1 (loopback address)") {
		t.Fatalf("loopback: %s", ans.Status)
	}
	defer api.AllowLoopbackURLs()()

	var meta map[string]any
	a.OK("GET", path, url.Values{"url": {srv.URL + "/images/tiny.iso?x=1"}, "verify-certificates": {"1"}}, &meta)
	if len(meta) != 3 || meta["filename"] != "tiny.iso" || meta["size"] != float64(123456789) || meta["mimetype"] != "application/x-iso9660-image" {
		t.Fatalf("metadata %v", meta)
	}
	meta = nil
	a.OK("GET", path, url.Values{"url": {srv.URL + "/images/nohead.iso"}}, &meta)
	if meta["filename"] != "nohead.iso" || meta["size"] != float64(987654321) {
		t.Fatalf("ranged GET fallback: %v", meta)
	}
	meta = nil
	a.OK("GET", path, url.Values{"url": {srv.URL + "/download"}}, &meta)
	if meta["filename"] != "netinst.iso" || meta["size"] != float64(42) {
		t.Fatalf("Content-Disposition: %v", meta)
	}
	for _, c := range []struct {
		url, code, msg string
	}{
		{srv.URL + "/missing.iso", "500", "invalid server response: '404 Not Found'"},
		{srv.URL + "/away", "500", "refusing to connect to 169.254.169.254 (link-local address)"},
		{"http://169.254.169.254/latest/", "500", "refusing to connect to 169.254.169.254 (link-local address)"},
		{"http://[fe80::1]/x.iso", "500", "refusing to connect to fe80::1 (link-local address)"},
		{"http://0.0.0.0/x.iso", "500", "refusing to connect to 0.0.0.0 (unspecified address)"},
		{"ftp://mirror.example/x.iso", "400", ""},
		{"file:///etc/passwd", "400", ""},
	} {
		ans := a.Do("GET", path, url.Values{"url": {c.url}})
		if fmt.Sprint(ans.Code) != c.code || !strings.Contains(ans.Message, c.msg) {
			t.Errorf("%s: %s %s", c.url, ans.Status, ans.Raw)
		}
		if c.code == "400" && ans.Errors["url"] != "value does not match the regex pattern\n" {
			t.Errorf("%s: errors %v", c.url, ans.Errors)
		}
	}
	if ans := a.Do("GET", path, nil); ans.Code != 400 || ans.Errors["url"] == "" {
		t.Fatalf("no url: %s %s", ans.Status, ans.Raw)
	}
}
