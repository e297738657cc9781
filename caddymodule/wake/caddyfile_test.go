package wake

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// adapt runs a Caddyfile through Caddy's adapter and returns the JSON of
// the first proxmox_wake handler in it.
func adaptWake(t *testing.T, src string) (map[string]any, error) {
	t.Helper()
	raw, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), map[string]any{"filename": "Caddyfile"})
	if err != nil {
		return nil, err
	}
	var cfg any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	var find func(v any) map[string]any
	find = func(v any) map[string]any {
		switch v := v.(type) {
		case map[string]any:
			if v["handler"] == "proxmox_wake" {
				return v
			}
			for _, x := range v {
				if h := find(x); h != nil {
					return h
				}
			}
		case []any:
			for _, x := range v {
				if h := find(x); h != nil {
					return h
				}
			}
		}
		return nil
	}
	h := find(cfg)
	if h == nil {
		t.Fatalf("no proxmox_wake handler in %s", raw)
	}
	return h, nil
}

// Ignore lines naming a matcher are resolved after the directive is read
// (FinalizeUnmarshalCaddyfile), in their place among the matcher blocks.
func TestWakeIgnoreMatchersInOrder(t *testing.T) {
	h, err := adaptWake(t, `:8080 {
	@bots header User-Agent *bot*
	proxmox_wake lab/100 {
		ignore {
			path /health
		}
		ignore @bots
		ignore /metrics*
		port 8081
	}
}`)
	if err != nil {
		t.Fatal(err)
	}
	want := []any{
		map[string]any{"path": []any{"/health"}},
		map[string]any{"header": map[string]any{"User-Agent": []any{"*bot*"}}},
		map[string]any{"path": []any{"/metrics*"}},
	}
	if !reflect.DeepEqual(h["ignore"], want) {
		t.Fatalf("ignore = %v, want %v", h["ignore"], want)
	}
	if h["guest"] != "lab/100" || h["port"] != float64(8081) {
		t.Fatalf("handler = %v", h)
	}
}

// A named matcher the site does not define, or a matcher token that is
// no matcher, is a Caddyfile error.
func TestWakeIgnoreBadMatcher(t *testing.T) {
	for src, want := range map[string]string{
		":8080 {\n\tproxmox_wake lab/100 {\n\t\tignore @nope\n\t}\n}":               "unrecognized matcher name",
		":8080 {\n\tproxmox_wake lab/100 {\n\t\tignore *\n\t}\n}":                   "ignore needs a named matcher",
		":8080 {\n\tproxmox_wake lab/100 {\n\t\tignore {\n\t\t}\n\t}\n}":            "ignore needs a named matcher",
		":8080 {\n\t@a path /a\n\tproxmox_wake lab/100 {\n\t\tignore @a /b\n\t}\n}": "wrong argument count",
	} {
		if _, err := adaptWake(t, src); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", src, err, want)
		}
	}
}

// Validate reports a bad guest reference and changes nothing; Provision
// splits the reference itself.
func TestWakeValidateHasNoSideEffects(t *testing.T) {
	h := &WakeHandler{Guest: "lab/100"}
	before := *h
	if err := h.Validate(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*h, before) {
		t.Fatalf("Validate changed the handler: %+v", *h)
	}
	for _, g := range []string{"", "lab", "/100", "lab/"} {
		if err := (&WakeHandler{Guest: g}).Validate(); err == nil {
			t.Errorf("guest %q accepted", g)
		}
	}
}

// A placeholder reference adapts with Caddy's shorthand expanded and its
// opt-in tag; tag on a literal reference, or placeholders in the cluster
// name, are refused.
func TestWakePlaceholderReference(t *testing.T) {
	h, err := adaptWake(t, `*.lab.example.com {
	proxmox_wake lab/{labels.3} {
		tag web-on
		port 8080
	}
}`)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"handler": "proxmox_wake", "guest": "lab/{http.request.host.labels.3}", "tag": "web-on", "port": float64(8080)}
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("handler = %v, want %v", h, want)
	}
	for _, bad := range []*WakeHandler{
		{Guest: "lab/100", Tag: "caddy-wake"},
		{Guest: "{labels.2}/100"},
		{Guest: "lab/{labels.2}", Tag: "bad tag"},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if err := (&WakeHandler{Guest: "lab/{labels.2}"}).Validate(); err != nil {
		t.Fatal(err)
	}
}

// wake_nodes adapts into the cluster, with or without a block.
func TestWakeNodesCaddyfile(t *testing.T) {
	raw, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(`{
	proxmox {
		cluster lab {
			url https://pve1:8006
			token_id caddy@pve!wake
			token_secret s
			wake_nodes {
				join_timeout 3m
				node pve2 aa:bb:cc:dd:ee:ff 192.168.1.255
				node pve3 aa:bb:cc:dd:ee:00
			}
		}
		cluster other {
			simulate
			wake_nodes
		}
	}
}
:8080 {
	respond ok
}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Apps struct {
			Proxmox ProxmoxApp `json:"proxmox"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	cs := cfg.Apps.Proxmox.Clusters
	w := cs[0].WakeNodes
	if len(cs) != 2 || w == nil || w.JoinTimeout != caddy.Duration(3*time.Minute) || w.Nodes["pve2"].Broadcast != "192.168.1.255" || w.Nodes["pve3"].MAC != "aa:bb:cc:dd:ee:00" {
		t.Fatalf("adapted %s", raw)
	}
	if cs[1].WakeNodes == nil || len(cs[1].WakeNodes.Nodes) != 0 {
		t.Fatalf("bare wake_nodes: %s", raw)
	}
	if err := cfg.Apps.Proxmox.Validate(); err != nil {
		t.Fatal(err)
	}
	cs[0].WakeNodes.Nodes["pve2"].MAC = "nope"
	if err := cfg.Apps.Proxmox.Validate(); err == nil {
		t.Fatal("bad MAC accepted")
	}
}

// time_zone names an IANA zone for keep_warm.
func TestWakeTimeZone(t *testing.T) {
	h, err := adaptWake(t, ":8080 {\n\tproxmox_wake lab/100 {\n\t\tkeep_warm Mon-Fri 08:00-18:00\n\t\ttime_zone Europe/Paris\n\t}\n}")
	if err != nil {
		t.Fatal(err)
	}
	if h["time_zone"] != "Europe/Paris" || !reflect.DeepEqual(h["keep_warm"], []any{"Mon-Fri 08:00-18:00"}) {
		t.Fatalf("handler = %v", h)
	}
	if err := (&WakeHandler{Guest: "lab/100", GuestOptions: GuestOptions{TimeZone: "Europe/Paris"}}).Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (&WakeHandler{Guest: "lab/100", GuestOptions: GuestOptions{TimeZone: "Mars/Olympus"}}).Validate(); err == nil {
		t.Fatal("unknown zone accepted")
	}
}

// share adapts into the app, with or without its block.
func TestShareCaddyfile(t *testing.T) {
	for src, want := range map[string]string{
		"share {\n\t\t\tinterval 5s\n\t\t}": `{"interval":5000000000}`,
		"share":                             `{}`,
	} {
		raw, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte("{\n\tproxmox {\n\t\t"+src+"\n\t\tcluster lab {\n\t\t\tsimulate\n\t\t}\n\t}\n}\n:8080 {\n\trespond ok\n}"), nil)
		if err != nil {
			t.Fatal(err)
		}
		var cfg struct {
			Apps struct {
				Proxmox struct {
					Share json.RawMessage `json:"share"`
				} `json:"proxmox"`
			} `json:"apps"`
		}
		if err := json.Unmarshal(raw, &cfg); err != nil || string(cfg.Apps.Proxmox.Share) != want {
			t.Errorf("%q: share %s, want %s (%v)", src, cfg.Apps.Proxmox.Share, want, err)
		}
	}
	if _, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte("{\n\tproxmox {\n\t\tshare {\n\t\t\tevery 5s\n\t\t}\n\t}\n}\n:8080 {\n\trespond ok\n}"), nil); err == nil {
		t.Fatal("unknown share option accepted")
	}
}

// busy_if, pre_stop_check, stream_idle_timeout, page and
// use_handle_errors adapt to their JSON fields.
func TestWakeActivityAndPageAdapt(t *testing.T) {
	h, err := adaptWake(t, `:8080 {
	proxmox_wake lab/100 {
		busy_if cpu > 10% net > 1MB/s disk>5MiB/s for 5m
		busy_if netin > 500kB/s
		pre_stop_check http://{guest.address}:9000/idle 2s
		stream_idle_timeout 10m
		page /etc/caddy/wake.html
		use_handle_errors
	}
}`)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(map[string]any{
		"busy_if": h["busy_if"], "pre_stop_check": h["pre_stop_check"], "pre_stop_timeout": h["pre_stop_timeout"],
		"stream_idle_timeout": h["stream_idle_timeout"], "page": h["page"], "use_handle_errors": h["use_handle_errors"],
	})
	want := `{"busy_if":[{"cpu_percent":10,"disk_bytes_per_sec":5242880,"net_bytes_per_sec":1000000,"window":300000000000},{"netin_bytes_per_sec":500000}],` +
		`"page":"/etc/caddy/wake.html","pre_stop_check":"http://{guest.address}:9000/idle","pre_stop_timeout":2000000000,` +
		`"stream_idle_timeout":600000000000,"use_handle_errors":true}`
	if string(got) != want {
		t.Fatalf("adapted:\n%s\nwant:\n%s", got, want)
	}
	for src, want := range map[string]string{
		"busy_if":                       "wrong argument count",
		"busy_if cpu > lots":            "want a percentage",
		"busy_if for 5m":                "no condition",
		"pre_stop_check":                "wrong argument count",
		"pre_stop_check http://x/ soon": "bad duration",
		"stream_idle_timeout":           "wrong argument count",
		"page":                          "wrong argument count",
		"page a b":                      "wrong argument count",
		"use_handle_errors yes":         "wrong argument count",
	} {
		_, err := adaptWake(t, ":8080 {\n\tproxmox_wake lab/100 {\n\t\t"+src+"\n\t}\n}")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err %v, want %q", src, err, want)
		}
	}
	for _, h := range []*WakeHandler{
		{Guest: "lab/100", GuestOptions: GuestOptions{PreStopCheck: "ftp://x/"}},
		{Guest: "lab/100", GuestOptions: GuestOptions{PreStopCheck: "http://{guest.ip}/"}},
		{Guest: "lab/100", GuestOptions: GuestOptions{BusyIf: []*BusyIf{{Window: caddy.Duration(time.Minute)}}}},
		{Guest: "lab/100", GuestOptions: GuestOptions{StreamIdleTimeout: -1}},
	} {
		if err := h.Validate(); err == nil {
			t.Errorf("%+v accepted", h)
		}
	}
}
