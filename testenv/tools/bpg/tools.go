//go:build tools

// Package tools pins the bpg Terraform provider whose own acceptance tests
// (build tag acceptance) testenv/bpg/run.sh runs against caddy-proxmox. It
// lives in its own module so that the provider never enters the plugin's
// dependency graph.
package tools

import _ "github.com/bpg/terraform-provider-proxmox/fwprovider/test"
