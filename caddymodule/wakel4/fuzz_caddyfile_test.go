package wakel4

import (
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// FuzzCaddyfile runs arbitrary handler bodies through the layer4
// proxmox_wake parser and the validation that follows it: a typo in a
// Caddyfile is an error message, never a panic. Seeds include the HTTP
// handler's options, which this parser must refuse in words.
func FuzzCaddyfile(f *testing.F) {
	f.Add("proxmox_wake lab/db 5432")
	f.Add("proxmox_wake lab/100 {\n port 22\n idle_timeout 30m\n keep_warm Mon-Fri 08:00-18:00\n time_zone Europe/Paris\n depends_on 101 db\n retry_backoff 1s 1m\n}")
	f.Add("proxmox_wake lab/game 27015 {\n probe none\n ready_after 5s\n max_datagrams 64\n max_pending 3\n}")
	f.Add("proxmox_wake lab/{labels.2} {\n tag caddy-wake\n mode page\n ignore {\n path /health\n }\n}")
	f.Add("proxmox_wake lab/web 0 {\n probe http\n probe tcp /x\n port 99999\n}")
	f.Fuzz(func(t *testing.T, text string) {
		tokens, err := caddyfile.Tokenize([]byte(text), "Caddyfile")
		if err != nil || len(tokens) == 0 {
			return
		}
		var h Handler
		if h.UnmarshalCaddyfile(caddyfile.NewDispenser(tokens)) == nil {
			_ = h.Validate()
		}
	})
}
