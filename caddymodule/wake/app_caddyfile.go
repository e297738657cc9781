package wake

import (
	"encoding/json"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
)

func init() {
	httpcaddyfile.RegisterGlobalOption("proxmox", parseProxmoxGlobal)
}

// parseProxmoxGlobal sets up the proxmox app from the global option:
//
//	proxmox {
//		cluster <name> {
//			url <https://host:8006>       # repeatable: failover entry points
//			token_id <user@realm!name>
//			token_secret <secret>
//			tls_trusted_ca_certs <pem_file...>
//			tls_insecure_skip_verify
//			poll_interval <duration>
//			request_timeout <duration>
//			simulate                      # embedded demo cluster instead
//		}
//	}
//
// Several proxmox blocks merge.
func parseProxmoxGlobal(d *caddyfile.Dispenser, existing any) (any, error) {
	app := new(ProxmoxApp)
	if existing != nil {
		if prev, ok := existing.(httpcaddyfile.App); ok {
			if err := json.Unmarshal(prev.Value, app); err != nil {
				return nil, err
			}
		}
	}
	if err := app.UnmarshalCaddyfile(d); err != nil {
		return nil, err
	}
	return httpcaddyfile.App{Name: "proxmox", Value: caddyconfig.JSON(app, nil)}, nil
}

// UnmarshalCaddyfile reads a proxmox global option block.
func (a *ProxmoxApp) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // option name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		if d.Val() != "cluster" {
			return d.Errf("unknown proxmox option '%s' (want cluster)", d.Val())
		}
		if !d.NextArg() {
			return d.ArgErr()
		}
		pc := &PVECluster{Name: d.Val()}
		if d.NextArg() {
			return d.ArgErr()
		}
		for _, x := range a.Clusters {
			if x.Name == pc.Name {
				return d.Errf("cluster %q defined twice", pc.Name)
			}
		}
		for nesting := d.Nesting(); d.NextBlock(nesting); {
			opt := d.Val()
			switch opt {
			case "url":
				args := d.RemainingArgs()
				if len(args) == 0 {
					return d.ArgErr()
				}
				pc.URLs = append(pc.URLs, args...)
			case "token_id", "token_secret":
				if !d.NextArg() {
					return d.ArgErr()
				}
				if opt == "token_id" {
					pc.TokenID = d.Val()
				} else {
					pc.TokenSecret = d.Val()
				}
				if d.NextArg() {
					return d.ArgErr()
				}
			case "tls_trusted_ca_certs":
				args := d.RemainingArgs()
				if len(args) == 0 {
					return d.ArgErr()
				}
				pc.TLSTrustedCACerts = append(pc.TLSTrustedCACerts, args...)
			case "tls_insecure_skip_verify", "simulate":
				if d.NextArg() {
					return d.ArgErr()
				}
				if opt == "simulate" {
					pc.Simulate = true
				} else {
					pc.TLSInsecureSkipVerify = true
				}
			case "poll_interval", "request_timeout":
				dur, err := pmxDurationArg(d)
				if err != nil {
					return err
				}
				if opt == "poll_interval" {
					pc.PollInterval = caddy.Duration(dur)
				} else {
					pc.RequestTimeout = caddy.Duration(dur)
				}
			default:
				return d.Errf("unknown cluster option '%s'", opt)
			}
		}
		a.Clusters = append(a.Clusters, pc)
	}
	return nil
}

// pmxDurationArg reads exactly one duration argument.
func pmxDurationArg(d *caddyfile.Dispenser) (time.Duration, error) {
	if !d.NextArg() {
		return 0, d.ArgErr()
	}
	dur, err := caddy.ParseDuration(d.Val())
	if err != nil {
		return 0, d.Errf("bad duration '%s': %v", d.Val(), err)
	}
	if d.NextArg() {
		return 0, d.ArgErr()
	}
	return dur, nil
}

var _ caddyfile.Unmarshaler = (*ProxmoxApp)(nil)
