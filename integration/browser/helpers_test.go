// Package browser tests what people look at in a real browser: headless
// Chromium (Debian's chromium, driven with chromedp) against ./caddy as
// xcaddy.sh builds it. The wake loading page, its live progress and its
// hand-over run on the pvesim simulated Proxmox VE; noVNC and xterm.js
// open consoles on proxmox_api's simulated KubeVirt cluster the way
// Proxmox VE's own web console does.
//
//	go test ./integration/browser                      the tests
//	go test ./integration/browser -run TestWakeLoadingPage -update-screenshot
//	                                                   also rewrites docs/wake-loading.png
package browser

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
)

// EnvWeb names the environment variable that points at the node_modules
// folder web/npm-install.sh prints (test.sh sets it).
const EnvWeb = "CADDY_PROXMOX_WEB"

var (
	webOnce sync.Once
	webDir  string
	webErr  error
)

// webModules returns the node_modules folder holding noVNC and xterm.js:
// the one test.sh installed, or else one installed now (cached).
func webModules(t *testing.T) string {
	t.Helper()
	webOnce.Do(func() {
		if d := os.Getenv(EnvWeb); d != "" {
			webDir, webErr = d, nil
			if _, err := os.Stat(filepath.Join(d, "@novnc", "novnc", "core", "rfb.js")); err != nil {
				webErr = fmt.Errorf("%s=%s: %w", EnvWeb, d, err)
			}
			return
		}
		out, err := exec.Command(filepath.Join(harnessDir(), "npm-install.sh")).Output()
		if err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				err = fmt.Errorf("%w\n%s", err, ee.Stderr)
			}
			webErr = fmt.Errorf("installing the npm packages (web/npm-install.sh): %w", err)
			return
		}
		webDir = strings.TrimSpace(string(out))
	})
	if webErr != nil {
		t.Fatal(webErr)
	}
	return webDir
}

// harnessDir is web/: the pages that play Proxmox VE's console wrappers.
func harnessDir() string {
	_, self, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(self), "web")
}

// repoRoot is the repository's top folder.
func repoRoot() string {
	_, self, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(self), "..", "..")
}

// startCaddy runs ./caddy on caddyfile until the test ends and waits until
// addr accepts connections. Nothing is requested: on a wake site, a
// request would wake the guest.
func startCaddy(t *testing.T, dir, caddyfile, addr string) *testcaddy.Process {
	t.Helper()
	p := testcaddy.StartProcess(t, dir, caddyfile)
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return p
		}
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("./caddy did not listen on %s: %v; log:\n%s", addr, err, p.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
