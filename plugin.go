// Package caddyproxmox registers every module of caddy-proxmox with Caddy.
// Build it into Caddy with xcaddy (see xcaddy.sh):
//
//	xcaddy build --with github.com/caddy-proxmox/caddy-proxmox=.
package caddyproxmox

import (
	// The Proxmox VE API on KubeVirt (http.handlers.proxmox_api).
	_ "github.com/caddy-proxmox/caddy-proxmox/caddymodule"
)
