package wake

import (
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
)

// FuzzCaddyfile runs arbitrary directive bodies through the wake family's
// three Caddyfile parsers (the proxmox global option, proxmox_wake and the
// dynamic proxmox upstreams) and the validation that follows them: a typo
// in a Caddyfile is an error message, never a panic. The seeds include
// proxmox_api's directive (caddymodule/api fuzzes that parser), so that
// foreign options reach these parsers too.
func FuzzCaddyfile(f *testing.F) {
	f.Add("proxmox_api {\n simulate {\n vms 3\n }\n token root@pam!ci s3cret\n user a@pve pw\n auth_failure_delay 1s\n}")
	f.Add("proxmox {\n cluster lab {\n url https://pve:8006\n token_id a@pam!x\n token_secret y\n poll_interval 1s\n }\n}")
	f.Add("proxmox_wake lab/web {\n port 8080\n idle_timeout 2m\n keep_warm Mon-Fri 09:00-18:00\n depends_on 101 db\n ignore {\n path /health\n }\n mode hold\n show_details\n}")
	f.Add("proxmox_wake lab/web {\n busy_if cpu > 10% net>1MB/s for 5m\n busy_if disk > 5MB/s\n pre_stop_check http://{guest.address}:9000/idle 2s\n stream_idle_timeout 10m\n page wake.html\n use_handle_errors\n}")
	f.Add("proxmox lab/web 8080 {\n guest lab/101\n port 99999\n}")
	f.Add("proxmox_api {\n auth_failure_delay -1s\n sync_timeout\n namespace\n}")
	f.Add("proxmox {\n share {\n interval 5s\n }\n cluster lab {\n simulate\n wake_nodes {\n join_timeout 1m\n node pve2 aa:bb:cc:dd:ee:ff 10.0.0.255:9\n }\n }\n}")
	f.Add("proxmox_wake lab/{labels.2} {\n tag caddy-wake\n keep_warm 08:00-09:00\n time_zone Europe/Paris\n}")
	f.Fuzz(func(t *testing.T, text string) {
		tokens, err := caddyfile.Tokenize([]byte(text), "Caddyfile")
		if err != nil || len(tokens) == 0 {
			return
		}
		d := func() *caddyfile.Dispenser { return caddyfile.NewDispenser(tokens) }
		var app ProxmoxApp
		if app.UnmarshalCaddyfile(d()) == nil {
			_ = app.Validate()
		}
		_, _ = parseProxmoxGlobal(d(), nil)
		if h, err := parseWakeCaddyfile(httpcaddyfile.Helper{Dispenser: d()}); err == nil {
			_ = h.(*WakeHandler).Validate()
		}
		var up WakeUpstreams
		if up.UnmarshalCaddyfile(d()) == nil {
			_ = up.Validate()
		}
	})
}
