package wake

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
	"github.com/caddy-proxmox/caddy-proxmox/pvesim"
)

// Several Caddy instances in front of the same guests, as separate ./caddy
// processes (the binary xcaddy.sh builds) on one file_system storage,
// against one simulated cluster.

// instance is one ./caddy process serving guest 100 on its own port.
type instance struct {
	p    *testcaddy.Process
	base string
}

// process starts ./caddy sharing storage dir shared with the others, with
// its own home, and waits until it serves.
func (e *env) process(shared, opts string) *instance {
	e.t.Helper()
	port := testcaddy.FreePort(e.t)
	cfg := fmt.Sprintf(`{
	admin off
	storage file_system %s
	skip_install_trust
	servers {
		protocols h1
	}
	proxmox {
		share {
			interval 200ms
		}
		cluster %s {
			url %s
			token_id %s
			token_secret %s
			poll_interval 100ms
			request_timeout 2s
		}
	}
}
http://127.0.0.1:%d {
	bind 127.0.0.1
	@ready path /ready
	respond @ready "up"
	proxmox_wake %s/100 {
		port %d
		wake_timeout 10s
		hold_timeout 10s
		task_poll_interval 20ms
		probe_interval 20ms
		%s
	}
	reverse_proxy {
		dynamic proxmox
	}
}
`, shared, e.cluster, e.apiURL, e.sim.TokenID(), e.sim.TokenSecret(), port, e.cluster, e.guestPort, opts)
	in := &instance{p: testcaddy.StartProcess(e.t, e.t.TempDir(), cfg), base: fmt.Sprintf("http://127.0.0.1:%d", port)}
	in.p.WaitReady(in.base + "/ready")
	return in
}

func (in *instance) get(path string) (answer, error) {
	req, _ := http.NewRequest("GET", in.base+path, nil)
	req.Header.Set("Accept", "application/json")
	res, err := client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	return answer{code: res.StatusCode, header: res.Header, body: string(body)}, err
}

// A cold request to both instances at once: one posts the start, the
// other waits on it; both are served.
func TestSharedStorageOneStartServesAll(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100, StartDelay: time.Second})
	shared := t.TempDir()
	a := e.process(shared, "idle_timeout 1m")
	b := e.process(shared, "idle_timeout 1m")
	var wg sync.WaitGroup
	answers := make([]answer, 2)
	errs := make([]error, 2)
	for i, in := range []*instance{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i], errs[i] = in.get("/")
		}()
	}
	wg.Wait()
	for i := range answers {
		if errs[i] != nil || answers[i].code != 200 || answers[i].header.Get("X-Proxmox-Wake") != "cold" {
			t.Fatalf("instance %d: %v %d\n%s", i, errs[i], answers[i].code, []*instance{a, b}[i].p.Output())
		}
	}
	if n := e.sim.ActionCalls(100, "start"); n != 1 {
		t.Fatalf("start posted %d times, want once\nA:\n%s\nB:\n%s", n, a.p.Output(), b.p.Output())
	}
}

// Traffic through instance A keeps instance B, which sees the guest
// running but serves nothing, from stopping it; once the traffic ends,
// the guest is stopped no earlier than idle_timeout after it.
func TestSharedStorageActivityKeepsGuestUp(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100})
	shared := t.TempDir()
	const idle = time.Second
	a := e.process(shared, "idle_timeout 1s")
	b := e.process(shared, "idle_timeout 1s")
	if ans, err := a.get("/"); err != nil || ans.code != 200 {
		t.Fatalf("wake through A: %v %d", err, ans.code)
	}
	const deferred = "idle stop deferred: another Caddy instance served the guest"
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(b.p.Output(), deferred) {
		if time.Now().After(deadline) {
			t.Fatalf("B never deferred its idle stop to A\nB:\n%s", b.p.Output())
		}
		if ans, err := a.get("/"); err != nil || ans.code != 200 {
			t.Fatalf("through A: %v %d\nB:\n%s", err, ans.code, b.p.Output())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// B tried to stop the guest and did not: nothing stopped it meanwhile.
	if n := e.sim.ActionCalls(100, "shutdown"); n != 0 || e.sim.Status(100) != "running" {
		t.Fatalf("guest stopped while A served it (%d shutdowns)\nB:\n%s", n, b.p.Output())
	}
	last := time.Now()
	if ans, err := a.get("/"); err != nil || ans.code != 200 {
		t.Fatalf("through A: %v %d", err, ans.code)
	}
	waitFor(t, 15*time.Second, "idle stop once the traffic ended", func() bool { return e.sim.Status(100) == "stopped" })
	if took := time.Since(last); took < idle {
		t.Fatalf("stopped %s after the last request, before idle_timeout %s", took, idle)
	}
	if n := e.sim.ActionCalls(100, "shutdown"); n > 2 {
		t.Fatalf("%d shutdowns", n)
	}
}
