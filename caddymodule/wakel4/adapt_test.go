package wakel4

import (
	"maps"
	"slices"
	"testing"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
)

// TestCaddyfileAdapt: every Caddyfile of layer4's proxmox_wake in
// testdata/caddyfile_adapt adapts to its golden JSON inside caddy-l4's
// layer4 global option, or fails with its error. Every option the
// handler takes, its own and those it shares with the HTTP proxmox_wake
// (wake.GuestOptions), appears in a case that adapts; every HTTP option
// it refuses has a case that pins the reason.
func TestCaddyfileAdapt(t *testing.T) {
	dir := "testdata/caddyfile_adapt"
	adapted := testcaddy.AdaptCases(t, dir)
	keywords := append(testcaddy.CaddyfileKeywords(t, "."),
		testcaddy.CaddyfileKeywordsOf(t, "../wake", "GuestOptions.UnmarshalOption")...)
	if len(keywords) < 20 {
		t.Fatalf("only %d keywords found: %v", len(keywords), keywords)
	}
	testcaddy.AssertEveryKeywordAdapted(t, append(keywords, "proxmox_wake"), adapted)
	testcaddy.AssertEveryKeywordRefused(t, dir, slices.Sorted(maps.Keys(httpOnly)))
}
