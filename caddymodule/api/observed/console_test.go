package observed_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
)

// TestCaddyRecordsConsoleSessions: a console websocket, upgraded on the
// hijacked connection, is logged and counted as the 101 it answered, not
// as status 0 (code "200").
func TestCaddyRecordsConsoleSessions(t *testing.T) {
	s := start(t)
	c := testcaddy.Client()
	api := &testcaddy.PVE{T: t, Base: s.base, C: c, Auth: testcaddy.TokenAuth(adminToken, tokenSecret)}

	// The simulator's VM 100 runs once its start delay has passed.
	var vmNode string
	waitFor(t, "VM 100 running", func() (string, bool) {
		var rows []struct {
			VMID   int    `json:"vmid"`
			Node   string `json:"node"`
			Status string `json:"status"`
		}
		api.OK("GET", "/cluster/resources", url.Values{"type": {"vm"}}, &rows)
		for _, r := range rows {
			if r.VMID == 100 {
				vmNode = r.Node
				return r.Status, r.Status == "running"
			}
		}
		return "absent", false
	})
	vm := "/nodes/" + vmNode + "/qemu/100"
	var proxy struct {
		Port   string `json:"port"`
		Ticket string `json:"ticket"`
	}
	api.OK("POST", vm+"/termproxy", nil, &proxy)
	wsPath := "/api2/json" + vm + "/vncwebsocket?" + url.Values{"port": {proxy.Port}, "vncticket": {proxy.Ticket}}.Encode()
	hdr := http.Header{"Authorization": {"PVEAPIToken=" + adminToken + "=" + tokenSecret}}
	d := websocket.Dialer{Subprotocols: []string{"binary"}, HandshakeTimeout: 10 * time.Second}
	conn, res, err := d.Dial(strings.Replace(s.base, "http://", "ws://", 1)+wsPath, hdr)
	if err != nil {
		t.Fatalf("websocket: %v (%v)", err, res)
	}
	if res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade answered %s", res.Status)
	}
	_ = conn.Close()

	// The session's line and metrics come once its handler has returned.
	logged := waitFor(t, "the console session's access log line", func() ([]int, bool) {
		codes := accessLogStatuses(t, s.accessLog)["GET "+wsPath]
		return codes, len(codes) > 0
	})
	if len(logged) != 1 || logged[0] != http.StatusSwitchingProtocols {
		t.Errorf("access log: the console session logged with status %v, want [101]", logged)
	}
	counted := waitFor(t, "the console session's metrics", func() (map[string]float64, bool) {
		got := requestCounts(t, c, s.metrics)
		return got, got["101"] > 0
	})
	if counted["101"] != 1 {
		t.Errorf("metrics: %v console sessions counted as 101, want 1 (all: %v)", counted["101"], counted)
	}
}
