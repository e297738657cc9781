package lxc

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Tags come as PVE's split_list reads them; PVE writes them with ';'.
func TestSplitTags(t *testing.T) {
	for in, want := range map[string]string{
		"":                           "[]",
		"caddy-wake":                 "[caddy-wake]",
		"caddy-port-8080;caddy-wake": "[caddy-port-8080 caddy-wake]",
		"a,b; c  d":                  "[a b c d]",
		"a\x00b c":                   "[a b c]",
	} {
		if got := fmt.Sprint(splitTags(in)); got != want {
			t.Errorf("%q: %s, want %s", in, got, want)
		}
	}
	rows := []resourceRow{{VMID: "100", Type: "lxc", Node: "pve1", Name: "web", Status: "stopped", Tags: "Caddy-Wake;caddy-port-8080"}}
	byVMID, _, _, _ := indexRows(rows, nil)
	if r := byVMID[100]; !r.HasTag("caddy-wake") || r.HasTag("caddy") {
		t.Fatalf("tags %v", r.Tags)
	}
}

// Overrides: caddy-<option>-<value>; unknown caddy- tags are reported,
// disagreeing or bad ones refused.
func TestWithTags(t *testing.T) {
	base := GuestConfig{IdleTimeout: 15 * time.Minute}.WithDefaults()
	cfg, ignored, err := base.WithTags([]string{"caddy-wake", "CADDY-PORT-8080", "caddy-idle-30m", "caddy-probe-http", "caddy-stop-stop", "caddy-wake-timeout-5m", "caddy-prot-9", "other", "caddy-port-8080"}, "caddy-wake")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Port != 8080 || cfg.IdleTimeout != 30*time.Minute || cfg.Probe != ProbeHTTP || cfg.ProbePath != "/" || cfg.StopMethod != StopStop || cfg.WakeTimeout != 5*time.Minute {
		t.Fatalf("cfg %+v", cfg)
	}
	if fmt.Sprint(ignored) != "[caddy-prot-9]" {
		t.Fatalf("ignored %v", ignored)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if c, _, _ := base.WithTags([]string{"caddy-idle-0"}, "caddy-wake"); c.IdleTimeout != 0 {
		t.Fatalf("caddy-idle-0: %v", c.IdleTimeout)
	}
	if c, _, _ := base.WithTags(nil, "caddy-wake"); c.Port != base.Port || c.IdleTimeout != base.IdleTimeout {
		t.Fatal("no tags changed the config")
	}
	for _, bad := range [][]string{
		{"caddy-port-80", "caddy-port-8080"},
		{"caddy-port-0"}, {"caddy-port-70000"}, {"caddy-idle-soon"},
		{"caddy-probe-udp"}, {"caddy-stop-kill"}, {"caddy-wake-timeout-0"},
	} {
		if _, _, err := base.WithTags(bad, "caddy-wake"); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	// The opt-in tag is no override even when it looks like one.
	if _, ignored, err := base.WithTags([]string{"caddy-port-web"}, "caddy-port-web"); err != nil || len(ignored) != 0 {
		t.Fatalf("opt-in tag read as an override: %v %v", ignored, err)
	}
}

// A placeholder reference serves only tagged guests, by vmid or by name
// (differing in case at most), and learns nothing before a poll.
func TestLookupTagged(t *testing.T) {
	web := Resource{VMID: 100, Kind: "lxc", Name: "web", Status: "stopped", Tags: []string{"caddy-wake"}}
	db := Resource{VMID: 101, Kind: "lxc", Name: "db", Status: "stopped"}
	tmpl := Resource{VMID: 9000, Kind: "qemu", Name: "base", Template: true, Tags: []string{"caddy-wake"}}
	c := &Cluster{byVMID: map[int]Resource{100: web, 101: db, 9000: tmpl},
		byName: map[string][]Resource{"Web": {web}, "db": {db}, "base": {tmpl}}}
	if _, err := c.LookupTagged("web", "caddy-wake"); !IsNotPolled(err) {
		t.Fatalf("before the first poll: %v", err)
	}
	c.polled = true
	for _, ref := range []string{"100", "web", "WEB", "Web"} {
		if r, err := c.LookupTagged(ref, "caddy-wake"); err != nil || r.VMID != 100 {
			t.Errorf("%s: %v %v", ref, r, err)
		}
	}
	for ref, want := range map[string]error{"101": ErrNotOptedIn, "db": ErrNotOptedIn, "nope": errNotFound, "999": errNotFound, "a/b": errNotFound, "": errNotFound} {
		_, err := c.LookupTagged(ref, "caddy-wake")
		if !errors.Is(err, want) || !IsNotServed(err) {
			t.Errorf("%q: %v, want %v", ref, err, want)
		}
	}
	if _, err := c.LookupTagged("base", "caddy-wake"); !IsNotServed(err) || !strings.Contains(err.Error(), "template") {
		t.Errorf("template: %v", err)
	}
	if _, err := c.LookupTagged("web", "other"); !errors.Is(err, ErrNotOptedIn) {
		t.Errorf("other tag: %v", err)
	}
}

func TestValidateTag(t *testing.T) {
	for _, ok := range []string{"caddy-wake", "a", "x_1.2+3"} {
		if err := ValidateTag(ok); err != nil {
			t.Error(err)
		}
	}
	for _, bad := range []string{"", "-a", "a b", "a/b", "a;b"} {
		if ValidateTag(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// FuzzTags: any tags value PVE could send splits and applies without a
// panic, and an accepted result keeps the config valid or says why not.
func FuzzTags(f *testing.F) {
	f.Add("caddy-wake;caddy-port-8080;caddy-idle-30m")
	f.Add("caddy-probe-http,caddy-stop-suspend caddy-wake-timeout-1h")
	f.Add("caddy-port-;caddy--;caddy-idle--1s;caddy-idle-9999999999h")
	f.Fuzz(func(t *testing.T, tags string) {
		base := GuestConfig{}.WithDefaults()
		cfg, _, err := base.WithTags(splitTags(tags), DefaultOptInTag)
		if err != nil {
			return
		}
		if cfg.Port < 1 || cfg.Port > 65535 || cfg.IdleTimeout < 0 || cfg.WakeTimeout <= 0 {
			t.Fatalf("%q gave %+v", tags, cfg)
		}
	})
}
