package wake

import (
	"fmt"
	"strings"
	"testing"

	"github.com/caddy-proxmox/caddy-proxmox/pvesim"
)

// "dynamic proxmox <cluster>/<guest>" without proxmox_wake finds the guest
// through the proxmox app: it proxies only while another site's
// proxmox_wake has the guest ready, and never wakes it.
func TestDynamicUpstreamsNamedGuest(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100, Name: "web"})
	passive := fmt.Sprintf("http://localhost:%d {\n\tbind 127.0.0.1\n\treverse_proxy {\n\t\tdynamic proxmox %s/web\n\t}\n}\n", e.port, e.cluster)
	e.start(e.wakeSite("100", "idle_timeout 1m"), passive)
	if a := e.get("/asleep", "Host: localhost"); a.code != 503 {
		t.Fatalf("passive site, guest asleep: %d %q", a.code, a.body)
	}
	if n := e.sim.ActionCalls(100, "start"); n != 0 {
		t.Fatalf("the passive site woke the guest (%d starts)", n)
	}
	if a := e.get("/wake"); a.code != 200 {
		t.Fatalf("wake: %d %q", a.code, a.body)
	}
	a := e.get("/passive", "Host: localhost")
	if a.code != 200 || !strings.Contains(a.body, "hello from web (vmid 100) /passive") {
		t.Fatalf("passive site, guest ready: %d %q", a.code, a.body)
	}
	if a.header.Get("X-Proxmox-Wake") != "" {
		t.Fatalf("the passive site marked a wake: %v", a.header)
	}
}
