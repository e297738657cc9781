package wake

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

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
