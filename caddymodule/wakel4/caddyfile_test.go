package wakel4

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// What the Caddyfile makes, JSON reads back the same way: the handlers
// of the golden adapt cases decode strictly into Handler (the fields of
// the embedded wake.GuestOptions included) and encode to the same JSON.
func TestGoldenJSONRoundTrip(t *testing.T) {
	files, _ := filepath.Glob("testdata/caddyfile_adapt/*.caddyfiletest")
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		_, want, _ := strings.Cut(string(b), "----------")
		if !strings.HasPrefix(strings.TrimSpace(want), "{") {
			continue
		}
		var cfg struct {
			Apps struct {
				Layer4 struct {
					Servers map[string]struct {
						Routes []struct {
							Handle []json.RawMessage `json:"handle"`
						} `json:"routes"`
					} `json:"servers"`
				} `json:"layer4"`
			} `json:"apps"`
		}
		if err := json.Unmarshal([]byte(want), &cfg); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, srv := range cfg.Apps.Layer4.Servers {
			for _, r := range srv.Routes {
				for _, raw := range r.Handle {
					if !bytes.Contains(raw, []byte(`"handler": "proxmox_wake"`)) {
						continue
					}
					var m map[string]any
					_ = json.Unmarshal(raw, &m)
					delete(m, "handler")
					in, _ := json.Marshal(m)
					var h Handler
					dec := json.NewDecoder(bytes.NewReader(in))
					dec.DisallowUnknownFields()
					if err := dec.Decode(&h); err != nil {
						t.Fatalf("%s: %v", f, err)
					}
					var back map[string]any
					_ = json.Unmarshal(caddyconfig.JSON(h, nil), &back)
					if !reflect.DeepEqual(back, m) {
						t.Errorf("%s: round trip\n got %v\nwant %v", f, back, m)
					}
					n++
				}
			}
		}
	}
	if n < 3 {
		t.Fatalf("%d handlers checked", n)
	}
}
