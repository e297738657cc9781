// Package caddyproxmox registers every module of caddy-proxmox with Caddy.
// Build it into Caddy with xcaddy (see xcaddy.sh):
//
//	xcaddy build --with github.com/caddy-proxmox/caddy-proxmox=.
package caddyproxmox

import (
	// Both module families: the Proxmox VE API on KubeVirt
	// (http.handlers.proxmox_api, caddymodule/api) and wake on request
	// (the proxmox app, admin.api.proxmox, http.handlers.proxmox_wake and
	// the proxmox dynamic upstreams, caddymodule/wake).
	_ "github.com/caddy-proxmox/caddy-proxmox/caddymodule"
)
