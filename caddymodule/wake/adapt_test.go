package wake

import (
	"testing"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
)

// TestCaddyfileAdapt: every Caddyfile of the proxmox global option,
// proxmox_wake and the proxmox dynamic upstreams in
// testdata/caddyfile_adapt adapts to its golden JSON, or fails with its
// error; every option the parsers know appears in a case that adapts.
func TestCaddyfileAdapt(t *testing.T) {
	adapted := testcaddy.AdaptCases(t, "testdata/caddyfile_adapt")
	keywords := append([]string{"proxmox", "proxmox_wake", "dynamic"}, testcaddy.CaddyfileKeywords(t, ".")...)
	testcaddy.AssertEveryKeywordAdapted(t, keywords, adapted)
}
