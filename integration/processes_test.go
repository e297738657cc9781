package integration

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
)

// caddyProcess runs ./caddy (as built by xcaddy.sh) with the API on the
// shared cluster and the given ticket key.
func caddyProcess(t *testing.T, ticketKey string) (*testcaddy.Process, string) {
	return apiProcess(t, testcaddy.TokenAuth(tokenID, tokenSecret),
		"token "+tokenID+" "+tokenSecret, "user "+userID+" "+userPass, "ticket_key "+ticketKey)
}

// waitProcess waits until the process serves the API (its caches synced).
func waitProcess(t *testing.T, p *testcaddy.Process, base string) {
	t.Helper()
	waitAPI(t, &testcaddy.PVE{T: t, Base: base, C: testcaddy.Client(), Auth: testcaddy.TokenAuth(tokenID, tokenSecret)}, p)
}

// ticketAuth authenticates like a browser or proxmoxer with a ticket:
// the cookie, and the CSRF token on writes.
func ticketAuth(ticket, csrf string) func(*http.Request) {
	return func(r *http.Request) {
		r.AddCookie(&http.Cookie{Name: "PVEAuthCookie", Value: url.QueryEscape(ticket)})
		if r.Method != http.MethodGet && csrf != "" {
			r.Header.Set("CSRFPreventionToken", csrf)
		}
	}
}

// TestTwoCaddyProcesses: two ./caddy processes on one apiserver with one
// ticket key behave as one PVE cluster: a ticket from one works on the
// other (CSRF-protected writes too), a task started on one is polled to
// completion on the other, and restarting either loses nothing.
func TestTwoCaddyProcesses(t *testing.T) {
	// vmids are reused after a delete: earlier tests' tasks of the same id
	// are not this test's.
	since := float64(time.Now().Unix())
	const key = "5b1f0e8c2d7a4e9f8c3b6a1d0e2f4a7c"
	pa, baseA := caddyProcess(t, key)
	pb, baseB := caddyProcess(t, key)
	tokA := &testcaddy.PVE{T: t, Base: baseA, C: testcaddy.Client(), Auth: testcaddy.TokenAuth(tokenID, tokenSecret)}
	tokB := &testcaddy.PVE{T: t, Base: baseB, C: testcaddy.Client(), Auth: testcaddy.TokenAuth(tokenID, tokenSecret)}

	// A ticket issued by A.
	var login map[string]any
	(&testcaddy.PVE{T: t, Base: baseA, C: testcaddy.Client()}).OK("POST", "/access/ticket", form("username", userID, "password", userPass), &login)
	ticket, _ := login["ticket"].(string)
	csrf, _ := login["CSRFPreventionToken"].(string)
	if ticket == "" || csrf == "" {
		t.Fatalf("login on A: %v", login)
	}
	onB := &testcaddy.PVE{T: t, Base: baseB, C: testcaddy.Client(), Auth: ticketAuth(ticket, csrf)}
	node := firstNode(onB)
	id := nextID(onB)

	// A CSRF-protected write on B with A's ticket; without the token it is refused.
	noCSRF := &testcaddy.PVE{T: t, Base: baseB, C: testcaddy.Client(), Auth: ticketAuth(ticket, "")}
	if ans := noCSRF.Do("POST", "/nodes/"+node+"/qemu", form("vmid", id, "name", "two-procs")); ans.Code != http.StatusUnauthorized {
		t.Fatalf("write without CSRF token on B: %s", ans.Status)
	}
	var upid string
	onB.OK("POST", "/nodes/"+node+"/qemu", form("vmid", id, "name", "two-procs"), &upid)
	// Started on B, polled on A.
	if exit := tokA.WaitTask(upid); exit != "OK" {
		t.Fatalf("create (B) polled on A: %s", exit)
	}
	// A lists the VM whose create task it read as ended, as every PVE
	// node would, though its own watch may not have delivered it yet.
	var rows []map[string]any
	tokA.OK("GET", "/cluster/resources", form("type", "vm"), &rows)
	if !slices.ContainsFunc(rows, func(r map[string]any) bool { return fmt.Sprint(r["vmid"]) == id }) {
		t.Fatalf("A read B's create task as ended but does not list VM %s: %v", id, rows)
	}
	path := "/nodes/" + node + "/qemu/" + id

	// A task started on A, then A restarts at once: the restarted A and B
	// both see it to its end.
	tokA.OK("POST", path+"/status/start", nil, &upid)
	pa.Restart()
	waitProcess(t, pa, baseA)
	if exit := tokA.WaitTask(upid); exit != "OK" {
		t.Fatalf("start task after restarting A: %s", exit)
	}
	if exit := tokB.WaitTask(upid); exit != "OK" {
		t.Fatalf("start task (A) polled on B: %s", exit)
	}
	// Read there, the end shows there: B says running next.
	if st := onB.Status(node, id); st["status"] != "running" {
		t.Fatalf("status on B after reading A's start end: %v", st)
	}
	// The ticket still works on the restarted A, writes included.
	onA := &testcaddy.PVE{T: t, Base: baseA, C: testcaddy.Client(), Auth: ticketAuth(ticket, csrf)}
	if st := onA.Status(node, id); st["status"] != "running" {
		t.Fatalf("status on the restarted A: %v", st)
	}
	onA.OK("POST", path+"/status/stop", nil, &upid)

	// B restarts while that stop runs: nothing lost either.
	pb.Restart()
	waitProcess(t, pb, baseB)
	if exit := onB.WaitTask(upid); exit != "OK" {
		t.Fatalf("stop task (A) after restarting B: %s", exit)
	}
	if st := onB.Status(node, id); st["status"] != "stopped" {
		t.Fatalf("status on B after reading A's stop end: %v", st)
	}
	var tasks []map[string]any
	onB.OK("GET", "/nodes/"+node+"/tasks", form("vmid", id), &tasks)
	if len(tasks) < 3 {
		t.Fatalf("task history on the restarted B: %v", tasks)
	}
	for _, tk := range tasks {
		if st, _ := tk["starttime"].(float64); st < since {
			continue
		}
		if tk["status"] != "OK" {
			t.Errorf("task on B after restarts: %v", tk)
		}
	}
	onB.OK("DELETE", path, nil, &upid)
	if exit := tokA.WaitTask(upid); exit != "OK" {
		t.Fatalf("delete (B) polled on A: %s", exit)
	}
}
