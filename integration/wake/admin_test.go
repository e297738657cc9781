package wake

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
	"github.com/caddy-proxmox/caddy-proxmox/pvesim"
)

// guestInfo is a guest as the admin API shows it.
type guestInfo struct {
	Cluster      string     `json:"cluster"`
	Guest        string     `json:"guest"`
	VMID         int        `json:"vmid"`
	Node         string     `json:"node"`
	State        string     `json:"state"`
	Address      string     `json:"address"`
	SleepIn      *float64   `json:"sleep_in"`
	Inflight     int        `json:"inflight"`
	Streams      int        `json:"streams"`
	LastActivity *time.Time `json:"last_activity"`
	External     bool       `json:"started_externally"`
	LastError    string     `json:"last_error"`
	Lock         string     `json:"lock"`
	HAState      string     `json:"hastate"`
	Busy         string     `json:"busy"`
}

// The admin API lists guests with state and time to sleep, and wakes or
// puts one to sleep.
func TestAdminAPI(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100, Name: "web"})
	e.adminPort = testcaddy.FreePort(t)
	e.start(e.wakeSite("100", "idle_timeout 1m"))
	waitFor(t, 2*time.Second, "first poll", func() bool {
		var list []guestInfo
		return e.adminJSON("GET", "/proxmox/guests", &list) == 200 && len(list) == 1 && list[0].State == "stopped"
	})
	var one guestInfo
	if code := e.adminJSON("POST", fmt.Sprintf("/proxmox/guests/%s/web/wake?wait=1", e.cluster), &one); code != 200 || one.State != "ready" {
		t.Fatalf("wake: %d %+v", code, one)
	}
	if one.VMID != 100 || one.Node != "pve1" || one.Address == "" || one.SleepIn == nil || *one.SleepIn < 50 {
		t.Fatalf("info: %+v", one)
	}
	if e.sim.Status(100) != "running" {
		t.Fatal("not started")
	}
	if code := e.adminJSON("POST", fmt.Sprintf("/proxmox/guests/%s/100/sleep", e.cluster), &one); code != 202 {
		t.Fatalf("sleep: %d", code)
	}
	waitFor(t, 3*time.Second, "admin sleep", func() bool {
		one = guestInfo{}
		return e.sim.Status(100) == "stopped" &&
			e.adminJSON("GET", fmt.Sprintf("/proxmox/guests/%s/100", e.cluster), &one) == 200 && one.State == "stopped"
	})
	if one.SleepIn != nil {
		t.Fatalf("a stopped guest has no sleep_in: %+v", one)
	}
	if code := e.adminJSON("GET", "/proxmox/guests/nope/1", nil); code != 404 {
		t.Fatalf("unknown guest: %d", code)
	}
}

// The metrics are on Caddy's registry (served by the metrics handler).
func TestMetrics(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100})
	e.start(e.site("127.0.0.1", "100", "", "metrics /metrics"))
	if a := e.get("/"); a.code != 200 {
		t.Fatalf("wake: %d", a.code)
	}
	waitFor(t, 3*time.Second, "idle stop", func() bool { return e.sim.Status(100) == "stopped" })
	time.Sleep(150 * time.Millisecond)
	res, err := client.Get(e.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	body := string(b)
	for _, want := range []string{
		fmt.Sprintf(`caddy_proxmox_wake_duration_seconds_count{cluster="%s",guest="100",result="ready"} 1`, e.cluster),
		fmt.Sprintf(`caddy_proxmox_stops_total{cluster="%s",guest="100",reason="idle"} 1`, e.cluster),
		fmt.Sprintf(`caddy_proxmox_guest_state{cluster="%s",guest="100",state="stopped"} 1`, e.cluster),
		fmt.Sprintf(`caddy_proxmox_held_requests{cluster="%s",guest="100"} 0`, e.cluster),
		fmt.Sprintf(`caddy_proxmox_cluster_polls_total{cluster="%s",result="ok"}`, e.cluster),
		fmt.Sprintf(`caddy_proxmox_wake_failures_total{cluster="%s",guest="100"} 0`, e.cluster),
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", grepLines(body, "caddy_proxmox"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Bad Caddyfiles are refused with a clear message.
func TestCaddyfileErrors(t *testing.T) {
	good := "{\n\tproxmox {\n\t\tcluster lab {\n\t\t\turl https://pve:8006\n\t\t\ttoken_id a@pve!t\n\t\t\ttoken_secret s\n\t\t}\n\t}\n}\n"
	for _, c := range []struct{ cfg, want string }{
		{good + ":1 {\n\tproxmox_wake lab/100 {\n\t\tstop_method kill\n\t}\n}", "stop_method"},
		{good + ":1 {\n\tproxmox_wake lab {\n\t}\n}", "<cluster>/<vmid>"},
		{good + ":1 {\n\tproxmox_wake lab/100 {\n\t\tbogus 1\n\t}\n}", "unknown proxmox_wake option"},
		{good + ":1 {\n\tproxmox_wake other/100\n}", "no cluster"},
		{good + ":1 {\n\tproxmox_wake lab/100 {\n\t\tkeep_warm Funday 09:00-10:00\n\t}\n}", "unknown day"},
		{":1 {\n\tproxmox_wake lab/100\n}", "no proxmox global option"},
		{"{\n\tproxmox {\n\t\tcluster lab {\n\t\t\turl https://pve:8006\n\t\t\ttoken_id nobang\n\t\t\ttoken_secret s\n\t\t}\n\t}\n}\n:1 {\n\trespond ok\n}", "token_id"},
		{"{\n\tproxmox {\n\t\tcluster lab {\n\t\t\tsimulate\n\t\t\turl https://x\n\t\t}\n\t}\n}\n:1 {\n\trespond ok\n}", "simulate excludes"},
	} {
		err := adaptAndValidate(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("config:\n%s\nerror %v, want %q", c.cfg, err, c.want)
		}
	}
	if err := adaptAndValidate(good + ":1 {\n\tproxmox_wake lab/100 {\n\t\tignore {\n\t\t\tpath /health\n\t\t}\n\t\tkeep_warm Mon-Fri 08:00-18:00\n\t\tdepends_on 101 db\n\t\tprobe http /healthz\n\t}\n\treverse_proxy {\n\t\tdynamic proxmox 8080\n\t}\n}"); err != nil {
		t.Errorf("good config refused: %v", err)
	}
}

func adaptAndValidate(cfg string) error {
	js, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cfg), nil)
	if err != nil {
		return err
	}
	return validateJSON(js)
}
