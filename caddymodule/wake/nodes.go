package wake

import (
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-proxmox/caddy-proxmox/lxc"
)

// WakeNodes wakes a guest's powered-off Proxmox VE node (wake-on-LAN)
// before the guest, and waits for it to join the cluster:
//
//	cluster <name> {
//		wake_nodes {
//			join_timeout 5m
//			node <node> <mac> [<broadcast_ip[:port]>]
//		}
//	}
//
// A node listed with its MAC gets the magic packet from Caddy itself;
// every other node through PVE's POST /nodes/{node}/wakeonlan, sent by a
// node that is up to the MAC of the target's wakeonlan config (pvenode
// config set --wakeonlan <mac>), which needs Sys.PowerMgmt on
// /nodes/{node}.
type WakeNodes struct {
	// JoinTimeout bounds the wait for a woken node to be online (5m). It
	// comes before the guest's own wake_timeout.
	JoinTimeout caddy.Duration `json:"join_timeout,omitempty"`
	// Nodes Caddy wakes itself, by node name.
	Nodes map[string]*WakeNodeMAC `json:"nodes,omitempty"`
}

// WakeNodeMAC is where Caddy sends a node's magic packet.
type WakeNodeMAC struct {
	// MAC is the node's network card's address.
	MAC string `json:"mac"`
	// Broadcast is the IPv4 broadcast address, with an optional UDP port
	// (255.255.255.255:9).
	Broadcast string `json:"broadcast,omitempty"`
}

// runtime converts the settings for package lxc (nil when unset).
func (w *WakeNodes) runtime() *lxc.NodeWake {
	if w == nil {
		return nil
	}
	nw := &lxc.NodeWake{JoinTimeout: time.Duration(w.JoinTimeout)}
	for name, m := range w.Nodes {
		if nw.MACs == nil {
			nw.MACs = map[string]lxc.NodeMAC{}
		}
		if m != nil {
			nw.MACs[name] = lxc.NodeMAC{MAC: m.MAC, Broadcast: m.Broadcast}
		}
	}
	return nw
}

// unmarshalWakeNodes reads a wake_nodes line, with or without a block.
func unmarshalWakeNodes(d *caddyfile.Dispenser) (*WakeNodes, error) {
	w := new(WakeNodes)
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch d.Val() {
		case "join_timeout":
			dur, err := durationArg(d)
			if err != nil {
				return nil, err
			}
			w.JoinTimeout = caddy.Duration(dur)
		case "node":
			args := d.RemainingArgs()
			if len(args) < 2 || len(args) > 3 {
				return nil, d.ArgErr()
			}
			m := &WakeNodeMAC{MAC: args[1]}
			if len(args) == 3 {
				m.Broadcast = args[2]
			}
			if w.Nodes == nil {
				w.Nodes = map[string]*WakeNodeMAC{}
			}
			if _, dup := w.Nodes[args[0]]; dup {
				return nil, d.Errf("wake_nodes: node %s given twice", args[0])
			}
			w.Nodes[args[0]] = m
		default:
			return nil, d.Errf("unknown wake_nodes option '%s'", d.Val())
		}
	}
	return w, nil
}
