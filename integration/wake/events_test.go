package wake

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
	"github.com/caddy-proxmox/caddy-proxmox/pvesim"
)

func init() {
	caddy.RegisterModule(eventRecorder{})
}

// recorded are the events eventRecorder saw, in order.
var recorded struct {
	mu     sync.Mutex
	events []recordedEvent
}

type recordedEvent struct {
	name, origin string
	data         map[string]any
}

// eventRecorder (events.handlers.proxmox_test_recorder) is an events
// handler module as a user's would be, subscribed with the events global
// option.
type eventRecorder struct{}

func (eventRecorder) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "events.handlers.proxmox_test_recorder", New: func() caddy.Module { return new(eventRecorder) }}
}

func (*eventRecorder) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next()
	return nil
}

func (*eventRecorder) Handle(_ context.Context, e caddy.Event) error {
	data := make(map[string]any, len(e.Data))
	for k, v := range e.Data {
		data[k] = v
	}
	origin := ""
	if e.Origin() != nil {
		origin = string(e.Origin().CaddyModule().ID)
	}
	recorded.mu.Lock()
	recorded.events = append(recorded.events, recordedEvent{name: e.Name(), origin: origin, data: data})
	recorded.mu.Unlock()
	return nil
}

// eventsOf returns the recorded events of one guest.
func eventsOf(cluster string, vmid int) []recordedEvent {
	recorded.mu.Lock()
	defer recorded.mu.Unlock()
	var out []recordedEvent
	for _, e := range recorded.events {
		if e.data["cluster"] == cluster && e.data["vmid"] == vmid {
			out = append(out, e)
		}
	}
	return out
}

func names(evs []recordedEvent) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.name)
	}
	return out
}

// The guests' wake, readiness, failure and sleep are Caddy events, with
// the guest's identity and what happened, for events handlers (exec…).
func TestCaddyEvents(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100, Name: "web"}, pvesim.GuestSpec{VMID: 101, Name: "wiki"})
	e.sim.FailStarts(101, "startup for container '101' failed")
	subscribe := ""
	for _, ev := range []string{"guest_waking", "guest_ready", "guest_wake_failed", "guest_asleep"} {
		subscribe += fmt.Sprintf("\t\ton %s proxmox_test_recorder\n", ev)
	}
	config := e.globals("events {\n"+subscribe+"\t}") + e.wakeSite("100", "") + e.site("g101.test", "101", "", "")
	testcaddy.Start(t, config)
	if a := e.get("/hello"); a.code != 200 {
		t.Fatalf("wake: %d", a.code)
	}
	waitFor(t, 3*time.Second, "idle stop", func() bool { return e.sim.Status(100) == "stopped" })
	waitFor(t, 2*time.Second, "guest_asleep", func() bool { return len(eventsOf(e.cluster, 100)) == 3 })
	evs := eventsOf(e.cluster, 100)
	if got := fmt.Sprint(names(evs)); got != "[guest_waking guest_ready guest_asleep]" {
		t.Fatalf("events %s", got)
	}
	for _, ev := range evs {
		d := ev.data
		if ev.origin != "proxmox" || d["guest"] != "100" || d["node"] != "pve1" || d["type"] != "lxc" || d["name"] != "web" {
			t.Fatalf("%s: origin %q data %v", ev.name, ev.origin, d)
		}
	}
	if evs[0].data["reason"] != "GET /hello" {
		t.Fatalf("waking reason %v", evs[0].data["reason"])
	}
	if d, ok := evs[1].data["duration"].(time.Duration); !ok || d <= 0 {
		t.Fatalf("ready duration %v", evs[1].data["duration"])
	}
	if evs[2].data["reason"] != "idle" || evs[2].data["stop_method"] != "shutdown" || evs[2].data["suspended"] != false {
		t.Fatalf("asleep data %v", evs[2].data)
	}

	if a := e.get("/", "Host: g101.test"); a.code != 503 {
		t.Fatalf("failing wake: %d", a.code)
	}
	waitFor(t, 2*time.Second, "guest_wake_failed", func() bool { return len(eventsOf(e.cluster, 101)) == 2 })
	evs = eventsOf(e.cluster, 101)
	d := evs[1].data
	if evs[1].name != "guest_wake_failed" || d["message"] != "The guest could not be started." ||
		d["retry_after"] != time.Second || d["timeout"] != false || !containsStr(d["error"], "startup for container '101' failed") {
		t.Fatalf("failure event %s %v", evs[1].name, d)
	}

	// After a reload the new config's events app gets them (the old one
	// is stopped, its context canceled).
	testcaddy.Load(t, strings.Replace(config, "idle_timeout 300ms", "idle_timeout 250ms", 1))
	if a := e.get("/again"); a.code != 200 {
		t.Fatalf("wake after reload: %d", a.code)
	}
	waitFor(t, 3*time.Second, "events after the reload", func() bool { return len(eventsOf(e.cluster, 100)) == 6 })
	if got := fmt.Sprint(names(eventsOf(e.cluster, 100)[3:])); got != "[guest_waking guest_ready guest_asleep]" {
		t.Fatalf("events after the reload %s", got)
	}
}

func containsStr(v any, sub string) bool {
	s, ok := v.(string)
	return ok && strings.Contains(s, sub)
}
