package api

import (
	"regexp"
	"testing"
)

// pveIsUpload is pveproxy's own test (HTTPServer.pm isUpload), the oracle
// isUploadPath must agree with.
var pveIsUpload = regexp.MustCompile(`^/api2/json/nodes/[^/]+/storage/[^/]+/upload$`)

func TestIsUploadPath(t *testing.T) {
	for _, p := range []string{
		"/api2/json/nodes/pve1/storage/local/upload",
		"/api2/json/nodes/pve1/storage/local/upload/",
		"/api2/json/nodes//storage/local/upload",
		"/api2/json/nodes/pve1/storage//upload",
		"/api2/json/nodes/pve1/storage/local/download-url",
		"/api2/json/nodes/pve1/storage/local/content",
		"/api2/json/nodes/pve1/x/storage/local/upload",
		"/api2/json/nodes/pve1/storage/a/b/upload",
		"/api2/extjs/nodes/pve1/storage/local/upload",
		"/api2/json/nodes/pve1/storage/local/uploadx",
		"/api2/json/nodes/pve1/qemu/100/status/current",
		"", "/", "/api2/json/nodes/", "/api2/json/nodes/pve1", "/api2/json/nodes/pve1/storage/",
	} {
		if got, want := isUploadPath(p), pveIsUpload.MatchString(p); got != want {
			t.Errorf("isUploadPath(%q) = %v, pveproxy says %v", p, got, want)
		}
	}
}

func FuzzIsUploadPath(f *testing.F) {
	f.Add("/api2/json/nodes/pve1/storage/local/upload")
	f.Add("/api2/json/nodes/a/storage/b/upload\n")
	f.Fuzz(func(t *testing.T, p string) {
		if got, want := isUploadPath(p), pveIsUpload.MatchString(p); got != want {
			t.Errorf("isUploadPath(%q) = %v, pveproxy says %v", p, got, want)
		}
	})
}
