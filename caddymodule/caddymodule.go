// Package caddymodule registers every Caddy module of caddy-proxmox, as
// Caddy's modules/caddyhttp/standard does for its own: it holds nothing
// but imports. Each module family lives in its own package.
package caddymodule

import (
	// The Proxmox VE API on KubeVirt: http.handlers.proxmox_api and the
	// `caddy proxmox-api` command.
	_ "github.com/caddy-proxmox/caddy-proxmox/caddymodule/api"
	// Wake on request: the proxmox app, admin.api.proxmox,
	// http.handlers.proxmox_wake and the proxmox dynamic upstreams
	// (http.reverse_proxy.upstreams.proxmox).
	_ "github.com/caddy-proxmox/caddy-proxmox/caddymodule/wake"
	// Wake on request for TCP and UDP: layer4.handlers.proxmox_wake, for
	// caddy-l4's layer4 app (build with --with github.com/mholt/caddy-l4
	// for its proxy handler).
	_ "github.com/caddy-proxmox/caddy-proxmox/caddymodule/wakel4"
)
