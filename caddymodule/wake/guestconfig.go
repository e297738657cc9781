package wake

import "github.com/caddy-proxmox/caddy-proxmox/lxc"

// GuestConfig is the guest config these settings make, with defaults,
// validated. Other module families that wake guests (layer4's
// proxmox_wake) bind theirs with it, so that an option means the same
// everywhere.
func (h *WakeHandler) GuestConfig() (lxc.GuestConfig, error) { return h.config() }
