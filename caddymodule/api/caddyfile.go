package api

import (
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("proxmox_api", parseAPICaddyfile)
	// After the auth handlers and handle/route blocks, before the handlers
	// that answer everything (abort, error, respond, reverse_proxy,
	// file_server): a plain site block serves the API on /api2/json and
	// the rest of the site as before.
	httpcaddyfile.RegisterDirectiveOrder("proxmox_api", httpcaddyfile.Before, "abort")
}

func parseAPICaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	m := new(APIHandler)
	err := m.UnmarshalCaddyfile(h.Dispenser)
	return m, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens:
//
//	proxmox_api {
//		simulate {
//			vms <count>
//		}
//		kubeconfig <path>
//		context <name>
//		namespace <ns>...
//		task_namespace <ns>
//		default_pool <ns>
//		token <user@realm!name> <secret>
//		user <user@realm> <password>
//		ticket_key <secret>
//		trust_caddy_auth [<realm>]
//		insecure_no_auth
//		auth_failure_delay <duration>
//		stale_reads <duration>
//		sync_timeout <duration>
//		cluster_name <name>
//		impersonate
//		default_role <role>
//		identity <user@realm[!token]> {
//			role <role> [<acl path>]
//			kube_user <name>
//			kube_groups <group>...
//		}
//		prometheus <url> {
//			bearer_token_file <path>
//			header <name> <value>
//			interval <duration>
//		}
//		local_storage [<name>] {
//			storage_class <name>
//			max_upload <size>
//		}
//		cdi_upload_proxy <url> {
//			ca_file <path>
//		}
//	}
func (h *APIHandler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		switch d.Val() {
		case "simulate":
			if d.NextArg() {
				return d.ArgErr()
			}
			h.Simulate = true
			for nesting := d.Nesting(); d.NextBlock(nesting); {
				switch d.Val() {
				case "vms":
					if !d.NextArg() {
						return d.ArgErr()
					}
					n, err := strconv.Atoi(d.Val())
					if err != nil {
						return d.Errf("simulate vms: %v", err)
					}
					h.SimulateVMs = n
				default:
					return d.Errf("unknown simulate option '%s'", d.Val())
				}
			}
		case "impersonate":
			if d.NextArg() {
				return d.ArgErr()
			}
			h.Impersonate = true
		case "default_role":
			if !d.NextArg() {
				return d.ArgErr()
			}
			h.DefaultRole = d.Val()
			if d.NextArg() {
				return d.ArgErr()
			}
		case "identity":
			id, err := parseIdentity(d)
			if err != nil {
				return err
			}
			h.Identities = append(h.Identities, id)
		case "insecure_no_auth":
			if d.NextArg() {
				return d.ArgErr()
			}
			h.InsecureNoAuth = true
		case "kubeconfig", "context", "task_namespace", "default_pool", "ticket_key", "cluster_name":
			key := d.Val()
			if !d.NextArg() {
				return d.ArgErr()
			}
			v := d.Val()
			if d.NextArg() {
				return d.ArgErr()
			}
			switch key {
			case "kubeconfig":
				h.Kubeconfig = v
			case "context":
				h.Context = v
			case "task_namespace":
				h.TaskNamespace = v
			case "default_pool":
				h.DefaultPool = v
			case "ticket_key":
				h.TicketKey = v
			case "cluster_name":
				h.ClusterName = v
			}
		case "namespace":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.ArgErr()
			}
			h.Namespaces = append(h.Namespaces, args...)
		case "token":
			args := d.RemainingArgs()
			if len(args) != 2 {
				return d.Errf("token needs <user@realm!name> <secret>")
			}
			h.Tokens = append(h.Tokens, TokenConfig{ID: args[0], Secret: args[1]})
		case "user":
			args := d.RemainingArgs()
			if len(args) != 2 {
				return d.Errf("user needs <user@realm> <password>")
			}
			h.Users = append(h.Users, UserConfig{ID: args[0], Password: args[1]})
		case "trust_caddy_auth":
			args := d.RemainingArgs()
			switch len(args) {
			case 0:
				h.TrustCaddyAuth = "pve"
			case 1:
				h.TrustCaddyAuth = args[0]
			default:
				return d.ArgErr()
			}
		case "auth_failure_delay", "sync_timeout", "stale_reads":
			key := d.Val()
			if !d.NextArg() {
				return d.ArgErr()
			}
			dur, err := caddy.ParseDuration(d.Val())
			if err != nil {
				return d.Errf("bad %s: %v", key, err)
			}
			if d.NextArg() {
				return d.ArgErr()
			}
			switch cd := caddy.Duration(dur); key {
			case "sync_timeout":
				h.SyncTimeout = cd
			case "stale_reads":
				h.StaleReads = &cd
			default:
				h.AuthFailureDelay = &cd
			}
		case "prometheus":
			p, err := unmarshalPrometheus(d)
			if err != nil {
				return err
			}
			h.Prometheus = p
		case "local_storage":
			if err := h.LocalStorage.unmarshal(d); err != nil {
				return err
			}
		case "cdi_upload_proxy":
			h.UploadProxy = new(UploadProxyConfig)
			if err := h.UploadProxy.unmarshal(d); err != nil {
				return err
			}
		default:
			return d.Errf("unknown proxmox_api option '%s'", d.Val())
		}
	}
	return nil
}

// Interface guard
var _ caddyfile.Unmarshaler = (*APIHandler)(nil)

// parseIdentity reads an identity block; a role without a path applies
// to /.
func parseIdentity(d *caddyfile.Dispenser) (IdentityConfig, error) {
	var id IdentityConfig
	if !d.NextArg() {
		return id, d.ArgErr()
	}
	id.ID = d.Val()
	if d.NextArg() {
		return id, d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch d.Val() {
		case "role":
			args := d.RemainingArgs()
			if len(args) < 1 || len(args) > 2 {
				return id, d.ArgErr()
			}
			g := GrantConfig{Role: args[0], Path: "/"}
			if len(args) == 2 {
				g.Path = args[1]
			}
			id.Roles = append(id.Roles, g)
		case "kube_user":
			args := d.RemainingArgs()
			if len(args) != 1 {
				return id, d.ArgErr()
			}
			id.KubeUser = args[0]
		case "kube_groups":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return id, d.ArgErr()
			}
			id.KubeGroups = append(id.KubeGroups, args...)
		default:
			return id, d.Errf("identity: unknown option %q", d.Val())
		}
	}
	return id, nil
}
