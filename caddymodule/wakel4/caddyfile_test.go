package wakel4

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

func TestUnmarshalCaddyfile(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: `proxmox_wake lab/db 5432`, want: `{"guest":"lab/db","port":5432}`},
		{in: `proxmox_wake lab/100 {
			port 22
			idle_timeout 0
			wake_timeout 1m
			hold_timeout 30s
			stop_method stop
			stop_timeout 10s
			address 10.0.0.5
			probe http /health
			probe_interval 250ms
			ready_after 2s
			retry_backoff 5s 1m
			task_poll_interval 100ms
			max_pending 10
			max_datagrams 64
			keep_warm Mon-Fri 08:00-18:00
			time_zone Europe/Paris
			depends_on db cache
			leave_external
		}`, want: `{"guest":"lab/100","port":22,"idle_timeout":0,"wake_timeout":60000000000,"hold_timeout":30000000000,` +
			`"stop_method":"stop","stop_timeout":10000000000,"address":"10.0.0.5","probe":"http","probe_path":"/health",` +
			`"probe_interval":250000000,"ready_after":2000000000,"retry_backoff":5000000000,"max_backoff":60000000000,` +
			`"task_poll_interval":100000000,"max_pending":10,"max_datagrams":64,"keep_warm":["Mon-Fri 08:00-18:00"],` +
			`"time_zone":"Europe/Paris","depends_on":["db","cache"],"leave_external":true}`},
		{in: `proxmox_wake lab/game 27015 {
			probe none
			ready_after 5s
		}`, want: `{"guest":"lab/game","port":27015,"probe":"none","ready_after":5000000000}`},
		{in: `proxmox_wake`, err: "wrong argument count"},
		{in: `proxmox_wake lab/db 5432 extra`, err: "wrong argument count"},
		{in: `proxmox_wake lab/db ssh`, err: "port: want 1-65535, not 'ssh'"},
		{in: `proxmox_wake lab/db { port 0 }`, err: "port: want 1-65535"},
		{in: "proxmox_wake lab/db 22 {\nmode page\n}", err: "'mode' is an option of the HTTP proxmox_wake"},
		{in: "proxmox_wake lab/db 22 {\nignore @health\n}", err: "'ignore' is an option of the HTTP proxmox_wake"},
		{in: "proxmox_wake lab/db 22 {\nbogus 1\n}", err: "unknown layer4 proxmox_wake option 'bogus'"},
		{in: "proxmox_wake lab/db 22 {\nwake_timeout soon\n}", err: "bad duration 'soon'"},
		{in: "proxmox_wake lab/db 22 {\nmax_datagrams -1\n}", err: "want a count"},
		{in: "proxmox_wake lab/db 22 {\nprobe tcp /x\n}", err: "only the http probe takes a path"},
		{in: "proxmox_wake lab/db 22 {\nleave_external yes\n}", err: "wrong argument count"},
	} {
		var h Handler
		err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if got := string(caddyconfig.JSON(h, nil)); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.in, got, tc.want)
		}
		// What the Caddyfile makes, JSON reads back the same way.
		var back Handler
		if err := json.Unmarshal([]byte(tc.want), &back); err != nil || string(caddyconfig.JSON(back, nil)) != tc.want {
			t.Errorf("%s: JSON round trip: %v", tc.in, err)
		}
	}
}

// The handler parses inside caddy-l4's layer4 global option, as a route
// handler next to proxy.
func TestLayer4GlobalOption(t *testing.T) {
	src := `{
	proxmox {
		cluster lab {
			simulate
		}
	}
	layer4 {
		:2222 {
			route {
				proxmox_wake lab/web 22 {
					idle_timeout 30m
				}
				proxy {l4.proxmox.upstream}
			}
		}
	}
}
`
	raw, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"handler":"proxmox_wake"`, `"guest":"lab/web"`, `"port":22`, `"idle_timeout":1800000000000`,
		`"handler":"proxy"`, `"dial":["{l4.proxmox.upstream}"]`,
	} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("adapted config lacks %s:\n%s", want, raw)
		}
	}
}
