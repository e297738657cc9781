package pvesim

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"time"
)

// Nodes that are powered off, and waking them: PVE's own POST
// /nodes/{node}/wakeonlan (pve-manager PVE/API2/Nodes.pm) and magic
// packets from elsewhere on the LAN (ListenWOL). An offline node's guests
// are off; its /cluster/resources row says "offline" and its guests' rows
// say "unknown" without name or usage, as once pmxcfs dropped their RRD
// data (after five minutes, pve-cluster src/pmxcfs/status.c); lock and
// tags still come, from the replicated configs. Every API call proxied to
// it fails as pveproxy's proxy does when the node does not answer: 595
// with the socket error as reason.

// nodePower is a node's power state. Fields are guarded by sim.mu.
type nodePower struct {
	off, booting bool
	// wakeonlan is the node config's wakeonlan MAC (what PVE sends the
	// packet to), "" when unset.
	wakeonlan string
	// packets counts magic packets for the node's MAC.
	packets int
}

// nodePowerLocked returns node's power state, creating it.
func (s *Sim) nodePowerLocked(node string) *nodePower {
	if s.power == nil {
		s.power = map[string]*nodePower{}
	}
	p := s.power[node]
	if p == nil {
		p = &nodePower{}
		s.power[node] = p
	}
	return p
}

func (s *Sim) offLocked(node string) bool {
	p := s.power[node]
	return p != nil && p.off
}

// NodeMAC is the MAC address of node's network card, which a magic packet
// must carry to wake it.
func (s *Sim) NodeMAC(node string) string {
	for i, n := range s.opts.Nodes {
		if n == node {
			return fmt.Sprintf("52:54:00:AA:00:%02X", i+1)
		}
	}
	return ""
}

// PowerOffNode turns node off, with its guests.
func (s *Sim) PowerOffNode(node string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.hasNode(node) {
		return fmt.Errorf("pvesim: no node %q", node)
	}
	for _, g := range s.guests {
		if g.spec.Node == node {
			g.stopLocked()
		}
	}
	p := s.nodePowerLocked(node)
	p.off, p.booting = true, false
	s.logf("pvesim: node %s powered off", node)
	return nil
}

// NodeOnline reports whether node is up and in the cluster.
func (s *Sim) NodeOnline(node string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hasNode(node) && !s.offLocked(node)
}

// SetNodeWakeOnLAN sets node's "wakeonlan" config (pvenode config set
// --wakeonlan <mac>), the MAC PVE's wakeonlan call sends to; "" unsets it.
func (s *Sim) SetNodeWakeOnLAN(node, mac string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodePowerLocked(node).wakeonlan = mac
}

// WakePackets is how many magic packets for node's MAC reached the LAN.
func (s *Sim) WakePackets(node string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.power[node]; p != nil {
		return p.packets
	}
	return 0
}

// magicLocked delivers a magic packet for mac: the node with that card,
// if off, boots and joins the cluster NodeBootDelay later. Called with
// sim.mu held.
func (s *Sim) magicLocked(mac string) {
	for _, n := range s.opts.Nodes {
		if !strings.EqualFold(s.NodeMAC(n), mac) {
			continue
		}
		p := s.nodePowerLocked(n)
		p.packets++
		if !p.off || p.booting {
			return
		}
		p.booting = true
		s.logf("pvesim: node %s boots (wake-on-LAN)", n)
		time.AfterFunc(s.opts.NodeBootDelay, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if p.booting {
				p.off, p.booting = false, false
				s.logf("pvesim: node %s joined the cluster", n)
			}
		})
		return
	}
}

// localNodeLocked is the node answering the API: the first one up.
func (s *Sim) localNodeLocked() string {
	for _, n := range s.opts.Nodes {
		if !s.offLocked(n) {
			return n
		}
	}
	return s.opts.Nodes[0]
}

// wakeOnLANLocked is POST /nodes/{node}/wakeonlan. It runs on the node
// that got the request (the method has no proxyto): it refuses to wake
// that node itself, needs Sys.PowerMgmt on /nodes/{node} and the node's
// wakeonlan config, and answers the MAC it sent the packet to.
func (s *Sim) wakeOnLANLocked(node string) (any, *apiError) {
	if err := s.checkLocked("/nodes/"+node, "Sys.PowerMgmt"); err != nil {
		return nil, err
	}
	if node == "localhost" || node == s.localNodeLocked() {
		return nil, newErr(500, "'%s' is local node, cannot wake my self!", node)
	}
	if !s.hasNode(node) {
		return nil, newErr(500, "no such cluster node '%s'", node)
	}
	mac := s.nodePowerLocked(node).wakeonlan
	if mac == "" {
		return nil, newErr(500, "No wake on LAN MAC address defined for '%s'!", node)
	}
	s.magicLocked(mac)
	return mac, nil
}

// ListenWOL listens for magic packets (UDP) on addr, as the LAN the
// nodes are on: a packet for a node's MAC wakes it. It returns the
// address listened on; Close stops it.
func (s *Sim) ListenWOL(addr string) (string, error) {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	s.wol = append(s.wol, pc)
	s.mu.Unlock()
	go func() {
		buf := make([]byte, 1500)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if mac, ok := parseMagic(buf[:n]); ok {
				s.mu.Lock()
				s.magicLocked(mac)
				s.mu.Unlock()
			}
		}
	}()
	return pc.LocalAddr().String(), nil
}

// parseMagic reads a magic packet: six 0xFF bytes, then the MAC sixteen
// times (a SecureOn password may follow).
func parseMagic(b []byte) (string, bool) {
	if len(b) < 102 || !bytes.Equal(b[:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}) {
		return "", false
	}
	mac := b[6:12]
	for i := 1; i < 16; i++ {
		if !bytes.Equal(b[6+6*i:12+6*i], mac) {
			return "", false
		}
	}
	return net.HardwareAddr(mac).String(), true
}
