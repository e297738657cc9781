package wake

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
	"github.com/caddy-proxmox/caddy-proxmox/pvesim"
)

// One site block for many guests: "proxmox_wake lab/{labels.2}" on
// *.lab.test serves each guest tagged caddy-wake under its name (or
// vmid), with per-guest settings from its caddy- tags; untagged guests and
// unknown names get a 404 without a start, a status read or a runtime.
func TestPlaceholderReferenceServesTaggedGuestsOnly(t *testing.T) {
	apiPort := testcaddy.FreePort(t)
	e := newEnv(t,
		pvesim.GuestSpec{VMID: 100, Name: "web", Tags: []string{"caddy-wake"}},
		pvesim.GuestSpec{VMID: 101, Name: "db"},
		pvesim.GuestSpec{VMID: 102, Name: "api", Port: apiPort, Tags: []string{"caddy-wake", fmt.Sprintf("caddy-port-%d", apiPort), "caddy-idle-0"}},
		pvesim.GuestSpec{VMID: 103, Name: "bad", Tags: []string{"caddy-wake", "caddy-port-80", "caddy-port-8080"}},
	)
	e.adminPort = testcaddy.FreePort(t)
	e.start(e.site("*.lab.test", "{labels.2}", "", ""))

	a := e.get("/", "Host: web.lab.test")
	if a.code != 200 || !strings.Contains(a.body, "hello from web") || a.header.Get("X-Proxmox-Wake") != "cold" {
		t.Fatalf("web: %d %s", a.code, a.body)
	}
	// caddy-port-<n>: probed and proxied on its own port.
	a = e.get("/", "Host: api.lab.test")
	if a.code != 200 || !strings.Contains(a.body, "hello from api") {
		t.Fatalf("api: %d %s", a.code, a.body)
	}
	// Untagged, unknown, or the vmid of an untagged guest: 404, nothing
	// started, no guest API call.
	before := e.sim.CallsMatching("/lxc/101/")
	for _, host := range []string{"db.lab.test", "101.lab.test", "nope.lab.test"} {
		a = e.get("/", "Host: "+host)
		if a.code != 404 || !strings.Contains(a.body, "no service at this address") || a.header.Get("Cache-Control") != "no-store" {
			t.Fatalf("%s: %d %q", host, a.code, a.body)
		}
	}
	if n := e.sim.CallsMatching("/lxc/101/"); n != before || e.sim.Status(101) != "stopped" {
		t.Fatalf("untagged guest touched: %d calls, %s", n, e.sim.Status(101))
	}
	// Tags that disagree: refused, with the reason in the log only.
	for i := 0; i < 2; i++ {
		if a = e.get("/", "Host: bad.lab.test"); a.code != 503 || !strings.Contains(a.body, "misconfigured") || e.sim.ActionCalls(103, "start") != 0 {
			t.Fatalf("bad tags: %d %s", a.code, a.body)
		}
	}
	// Random names allocate nothing: the admin API still lists the two
	// guests served.
	for i := 0; i < 200; i++ {
		if a := e.get("/", fmt.Sprintf("Host: x%d.lab.test", i)); a.code != 404 {
			t.Fatalf("random name: %d", a.code)
		}
	}
	var list []guestInfo
	if code := e.adminJSON("GET", "/proxmox/guests", &list); code != 200 || len(list) != 2 {
		t.Fatalf("runtimes: %d %+v", code, list)
	}
	// A reload keeps the runtimes of the guests resolved so far, before
	// any request names them again.
	e.reload(e.site("*.lab.test", "{labels.2}", "hold_timeout 3s", ""))
	list = nil
	if code := e.adminJSON("GET", "/proxmox/guests", &list); code != 200 || len(list) != 2 {
		t.Fatalf("runtimes after a reload: %d %+v", code, list)
	}
	// The shared idle machinery: web idles out, api (caddy-idle-0) stays.
	waitFor(t, 3*time.Second, "web idles out", func() bool { return e.sim.Status(100) == "stopped" })
	if e.sim.Status(102) != "running" || e.sim.ActionCalls(102, "shutdown") != 0 {
		t.Fatalf("api stopped despite caddy-idle-0")
	}
	// Tagging a guest in Proxmox opts it in at the next poll.
	e.sim.SetTags(101, "caddy-wake")
	waitFor(t, 3*time.Second, "db served once tagged", func() bool {
		a, err := e.do("GET", "/", "Host: db.lab.test")
		return err == nil && a.code == 200 && strings.Contains(a.body, "hello from db")
	})
	// Untagging it shuts the door again (the runtime idles it out).
	e.sim.SetTags(101)
	waitFor(t, 3*time.Second, "db refused once untagged", func() bool {
		a, err := e.do("GET", "/", "Host: db.lab.test")
		return err == nil && a.code == 404
	})
	waitFor(t, 3*time.Second, "db idles out", func() bool { return e.sim.Status(101) == "stopped" })
	if n := e.sim.ActionCalls(101, "start"); n != 1 {
		t.Fatalf("db starts %d", n)
	}
}
