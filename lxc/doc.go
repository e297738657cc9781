// Package lxc is the runtime behind the proxmox app and the proxmox_wake
// handler: a pool of Proxmox VE clusters reached with go-proxmox, one
// cluster-wide /cluster/resources poll per interval feeding the state of
// every guest, and per-guest state machines that wake LXC containers and
// QEMU VMs on demand (one wake at a time, detached from requests, ready in
// layers) and stop them once they have really been idle.
//
// Clusters and guests live in package-level caddy.UsagePools, so that a
// config reload shares them between the old and the new config: idle
// timers, in-flight counters and wakes survive, and no guest is started
// twice. Nothing here talks to Proxmox until Cluster.Start.
package lxc
