package api

import (
	"testing"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
)

// TestCaddyfileAdapt: every proxmox_api Caddyfile in testdata/caddyfile_adapt
// adapts to its golden JSON, or fails with its error; every subdirective
// the parser knows appears in a case that adapts.
func TestCaddyfileAdapt(t *testing.T) {
	adapted := testcaddy.AdaptCases(t, "testdata/caddyfile_adapt")
	keywords := append([]string{"proxmox_api"}, testcaddy.CaddyfileKeywords(t, ".")...)
	testcaddy.AssertEveryKeywordAdapted(t, keywords, adapted)
}
