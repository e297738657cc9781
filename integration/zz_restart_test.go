package integration

import (
	"fmt"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
)

// TestTasksSurviveRestart stops Caddy entirely (its cluster connection
// and task workers end), starts a fresh one, and reads the earlier tasks.
// It runs last (go test runs files in name order, hence zz_): the
// restarted Caddy serves only the main site.
func TestZZTasksSurviveRestart(t *testing.T) {
	a := pve(t)
	node := firstNode(a)
	id := nextID(a)
	var upid string
	a.OK("POST", "/nodes/"+node+"/qemu", form("vmid", id, "name", "restart-test", "start", "1"), &upid)
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	// A new process would start from nothing but the cluster: so does this.
	port := strings.TrimPrefix(base, "https://localhost:")
	cfg := testcaddy.Globals(caddyDir) + fmt.Sprintf(`
https://localhost:%s {
	tls internal
	proxmox_api {
		kubeconfig %s
		token %s %s
		auth_failure_delay 0s
	}
}
`, port, env.Kubeconfig, tokenID, tokenSecret)
	if err := loadCaddy(cfg); err != nil {
		t.Fatal(err)
	}
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create+start task after restart: %s", exit)
	}
	if st := a.Status(node, id); st["status"] != "running" {
		t.Fatalf("after restart: %v", st)
	}
	var tasks []map[string]any
	a.OK("GET", "/nodes/"+node+"/tasks", form("vmid", id), &tasks)
	if len(tasks) == 0 || tasks[0]["upid"] != upid || tasks[0]["status"] != "OK" {
		t.Fatalf("task list after restart: %v", tasks)
	}
}
