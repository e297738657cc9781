package api

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
)

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "proxmox-api",
		Usage: `[--listen <addr>] [--simulate | --kubeconfig <path>] [--token <user@realm!name=secret>] [--user <user@realm:password>] [--namespace <ns>] [--insecure-no-auth]`,
		Short: "Serves the Proxmox VE API on KubeVirt in one line",
		Long: `
Starts Caddy with the proxmox_api handler on HTTPS (Caddy's internal CA),
HTTP/1.1 only like pveproxy, without a Caddyfile.

--simulate serves an in-memory KubeVirt cluster (nothing real is touched).
--kubeconfig picks a cluster; by default the standard loading rules apply
($KUBECONFIG, ~/.kube/config), then the in-cluster config.
--token and --user may be repeated; at least one is required unless
--insecure-no-auth is given. Secrets may be {env.VAR} placeholders.
`,
		CobraFunc: func(cmd *cobra.Command) {
			cmd.Flags().String("listen", ":8006", "Address to serve HTTPS on")
			cmd.Flags().Bool("simulate", false, "Serve an embedded, simulated KubeVirt cluster")
			cmd.Flags().String("kubeconfig", "", "Path to a kubeconfig file")
			cmd.Flags().StringArray("token", nil, "API token as user@realm!name=secret (repeatable)")
			cmd.Flags().StringArray("user", nil, "Login user as user@realm:password (repeatable)")
			cmd.Flags().StringArray("namespace", nil, "Namespace to serve (repeatable; default all)")
			cmd.Flags().String("ticket-key", "", "Key that signs tickets (share it between replicas)")
			cmd.Flags().Bool("insecure-no-auth", false, "Serve without authentication (dangerous)")
			cmd.Flags().Bool("debug", false, "Enable debug logs")
			cmd.RunE = caddycmd.WrapCommandFuncForCobra(cmdProxmoxAPI)
		},
	})
}

func cmdProxmoxAPI(fs caddycmd.Flags) (int, error) {
	caddy.TrapSignals()
	h := APIHandler{
		Simulate:       fs.Bool("simulate"),
		Kubeconfig:     fs.String("kubeconfig"),
		TicketKey:      fs.String("ticket-key"),
		InsecureNoAuth: fs.Bool("insecure-no-auth"),
	}
	var err error
	if h.Namespaces, err = fs.GetStringArray("namespace"); err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	tokens, _ := fs.GetStringArray("token")
	for _, t := range tokens {
		id, secret, ok := cutLast(t, "=")
		if !ok {
			return caddy.ExitCodeFailedStartup, fmt.Errorf("--token %q: want user@realm!name=secret", redact(t))
		}
		h.Tokens = append(h.Tokens, TokenConfig{ID: id, Secret: secret})
	}
	users, _ := fs.GetStringArray("user")
	for _, u := range users {
		id, pw, ok := strings.Cut(u, ":")
		if !ok {
			return caddy.ExitCodeFailedStartup, fmt.Errorf("--user: want user@realm:password")
		}
		h.Users = append(h.Users, UserConfig{ID: id, Password: pw})
	}
	if err := h.Validate(); err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	cfg, err := apiConfig(fs.String("listen"), h, fs.Bool("debug"))
	if err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	if err := caddy.Run(cfg); err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	caddy.Log().Info("proxmox API serving", zap.String("listen", fs.String("listen")), zap.Bool("simulate", h.Simulate))
	select {}
}

// redact hides the secret part of a token flag in error messages.
func redact(token string) string {
	if i := strings.Index(token, "="); i >= 0 {
		return token[:i] + "=…"
	}
	return token
}

// apiConfig is the JSON config the subcommand runs: one HTTPS server,
// HTTP/1.1 only (PVE's reason phrases carry error text), certificates
// from Caddy's internal CA for localhost and this host's name.
func apiConfig(listen string, h APIHandler, debug bool) (*caddy.Config, error) {
	if _, _, err := net.SplitHostPort(listen); err != nil {
		return nil, fmt.Errorf("--listen %q: %w", listen, err)
	}
	names := []string{"localhost", "127.0.0.1", "::1"}
	if hn, err := os.Hostname(); err == nil && hn != "" && hn != "localhost" {
		names = append(names, hn)
	}
	handler := struct {
		Handler string `json:"handler"`
		APIHandler
	}{"proxmox_api", h}
	server := map[string]any{
		"listen":    []string{listen},
		"protocols": []string{"h1"},
		// The README's limits for hostile clients (see servers/timeouts).
		"read_header_timeout":     "10s",
		"read_idle_timeout":       "10s",
		"read_min_rate":           1024,
		"idle_timeout":            "2m",
		"routes":                  []any{map[string]any{"handle": []any{handler}}},
		"tls_connection_policies": []any{map[string]any{"default_sni": "localhost"}},
		"automatic_https":         map[string]any{"disable_redirects": true},
	}
	tlsApp := map[string]any{
		"certificates": map[string]any{"automate": names},
		"automation": map[string]any{"policies": []any{map[string]any{
			"subjects": names,
			"issuers":  []any{map[string]any{"module": "internal"}},
		}}},
	}
	apps := map[string]json.RawMessage{
		"http": caddyconfig.JSON(map[string]any{"servers": map[string]any{"proxmox": server}}, nil),
		"tls":  caddyconfig.JSON(tlsApp, nil),
	}
	cfg := &caddy.Config{AppsRaw: apps}
	if debug {
		cfg.Logging = &caddy.Logging{Logs: map[string]*caddy.CustomLog{"default": {BaseLog: caddy.BaseLog{Level: zap.DebugLevel.CapitalString()}}}}
	}
	return cfg, nil
}
