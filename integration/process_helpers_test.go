package integration

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
)

// apiProcess runs ./caddy (as built by xcaddy.sh) serving proxmox_api on
// the shared cluster with the given extra directives, one per line, and
// returns it with its base URL once it serves the API to auth (caches
// synced).
func apiProcess(t *testing.T, auth func(*http.Request), directives ...string) (*testcaddy.Process, string) {
	t.Helper()
	dir := t.TempDir()
	port := testcaddy.FreePort(t)
	cfg := testcaddy.Globals(dir) + fmt.Sprintf(`
https://localhost:%d {
	tls internal
	proxmox_api {
		kubeconfig %s
		auth_failure_delay 0s
		%s
	}
}
`, port, env.Kubeconfig, strings.Join(directives, "\n\t\t"))
	p := testcaddy.StartProcess(t, dir, cfg)
	base := fmt.Sprintf("https://localhost:%d", port)
	waitAPI(t, &testcaddy.PVE{T: t, Base: base, C: testcaddy.Client(), Auth: auth}, p)
	return p, base
}
