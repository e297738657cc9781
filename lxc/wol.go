package lxc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
)

// Power below the guest: a guest whose node is powered off is woken in
// two steps, the node first (wake-on-LAN, then waiting for it to join the
// cluster), bounded by its own join_timeout since a server boots in
// minutes, then the guest as usual within wake_timeout. The packet goes
// out through PVE's own POST /nodes/{node}/wakeonlan, which a node that
// is up sends to the MAC of the target's wakeonlan config, or, for nodes
// configured with a MAC here, from Caddy itself. Putting nodes to sleep is
// left to the administrator.

// NodeWake is how a cluster wakes powered-off nodes.
type NodeWake struct {
	// JoinTimeout bounds the wait for a woken node to be online.
	JoinTimeout time.Duration
	// MACs are the nodes Caddy sends the magic packet to itself, by node
	// name; the others are woken through PVE's wakeonlan call.
	MACs map[string]NodeMAC
}

// NodeMAC is where Caddy sends a node's magic packet.
type NodeMAC struct {
	// MAC is the node's network card's address.
	MAC string
	// Broadcast is the IPv4 broadcast address (and UDP port) the packet
	// goes to: 255.255.255.255:9 by default.
	Broadcast string
}

// Node wake defaults.
const (
	DefaultJoinTimeout = 5 * time.Minute
	defaultWOLPort     = "9" // discard, as PVE's wakeonlan uses
	// wolResend is how often the packet is sent again while the node
	// has not joined: UDP packets get lost, and a node may miss the first
	// while powering down.
	wolResend = 30 * time.Second
)

// validate checks the settings.
func (w *NodeWake) validate() error {
	if w.JoinTimeout < 0 {
		return errors.New("wake_nodes: join_timeout must not be negative")
	}
	for node, m := range w.MACs {
		if node == "" || strings.ContainsAny(node, "/ \t") {
			return fmt.Errorf("wake_nodes: bad node name %q", node)
		}
		if hw, err := net.ParseMAC(m.MAC); err != nil || len(hw) != 6 {
			return fmt.Errorf("wake_nodes: node %s: MAC %q must be six bytes (aa:bb:cc:dd:ee:ff)", node, m.MAC)
		}
		if _, err := broadcastAddr(m.Broadcast); err != nil {
			return fmt.Errorf("wake_nodes: node %s: %w", node, err)
		}
	}
	return nil
}

// String is the settings in a stable form, for the runtime's key.
func (w *NodeWake) String() string {
	if w == nil {
		return ""
	}
	nodes := make([]string, 0, len(w.MACs))
	for n, m := range w.MACs {
		nodes = append(nodes, n+"="+strings.ToLower(m.MAC)+"@"+m.Broadcast)
	}
	sort.Strings(nodes)
	return w.JoinTimeout.String() + " " + strings.Join(nodes, ",")
}

func (w *NodeWake) joinTimeout() time.Duration {
	if w.JoinTimeout > 0 {
		return w.JoinTimeout
	}
	return DefaultJoinTimeout
}

// broadcastAddr reads "ip[:port]" (default 255.255.255.255:9).
func broadcastAddr(s string) (*net.UDPAddr, error) {
	if s == "" {
		s = "255.255.255.255"
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		host, port = s, defaultWOLPort
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.To4() == nil {
		return nil, fmt.Errorf("broadcast %q must be an IPv4 address with an optional :port", s)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return nil, fmt.Errorf("broadcast %q: bad port", s)
	}
	return &net.UDPAddr{IP: ip.To4(), Port: p}, nil
}

// magicPacket is six 0xFF bytes and the MAC sixteen times.
func magicPacket(mac net.HardwareAddr) []byte {
	p := make([]byte, 0, 6+16*len(mac))
	p = append(p, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	for range 16 {
		p = append(p, mac...)
	}
	return p
}

// sendMagicPacket broadcasts m's magic packet over UDP.
func sendMagicPacket(m NodeMAC) error {
	hw, err := net.ParseMAC(m.MAC)
	if err != nil {
		return err
	}
	to, err := broadcastAddr(m.Broadcast)
	if err != nil {
		return err
	}
	lc := net.ListenConfig{Control: setBroadcast}
	pc, err := lc.ListenPacket(context.Background(), "udp4", ":0")
	if err != nil {
		return fmt.Errorf("wake-on-LAN socket: %w", err)
	}
	defer pc.Close()
	if _, err := pc.WriteTo(magicPacket(hw), to); err != nil {
		return fmt.Errorf("sending the magic packet to %s: %w", to, err)
	}
	return nil
}

// nodeOp is one node wake, shared by every guest wake that needs it.
type nodeOp struct {
	done chan struct{}
	err  error
}

// nodeStatus is the node's status in /cluster/resources: online, offline
// or unknown. Any token may read node rows (without Sys.Audit they come
// without usage).
func (c *Cluster) nodeStatus(ctx context.Context, node string) (string, error) {
	var rows []struct {
		Type   string `json:"type"`
		Node   string `json:"node"`
		Status string `json:"status"`
	}
	if err := c.Client().Get(ctx, "/cluster/resources?type=node", &rows); err != nil {
		return "", err
	}
	for _, r := range rows {
		if r.Type == "node" && r.Node == node {
			return r.Status, nil
		}
	}
	return "", fmt.Errorf("node %s is not in the cluster", node)
}

// wakeNode starts waking node unless a wake of it is running.
func (c *Cluster) wakeNode(node string) *nodeOp {
	c.nodeMu.Lock()
	defer c.nodeMu.Unlock()
	if op := c.nodeOps[node]; op != nil {
		return op
	}
	if c.nodeOps == nil {
		c.nodeOps = map[string]*nodeOp{}
	}
	op := &nodeOp{done: make(chan struct{})}
	c.nodeOps[node] = op
	go func() {
		op.err = c.runNodeWake(node)
		c.nodeMu.Lock()
		delete(c.nodeOps, node)
		c.nodeMu.Unlock()
		close(op.done)
	}()
	return op
}

// runNodeWake sends the packet (again every wolResend) until the node is
// online, within join_timeout.
func (c *Cluster) runNodeWake(node string) error {
	w := c.cfg.WakeNodes
	ctx, cancel := context.WithTimeout(c.ctx, w.joinTimeout())
	defer cancel()
	log := c.logger.With(zap.String("node", node))
	start := time.Now()
	var sent time.Time
	for {
		if time.Since(sent) >= wolResend {
			if err := c.sendWake(ctx, node, log); err != nil {
				return err
			}
			sent = time.Now()
		}
		if !sleepCtx(ctx, c.cfg.PollInterval) {
			return fmt.Errorf("node %s not online within join_timeout %s: %w", node, w.joinTimeout(), ctx.Err())
		}
		st, err := c.nodeStatus(ctx, node)
		if err != nil {
			log.Debug("reading the node's status", zap.Error(err))
			continue
		}
		if st == "online" {
			log.Info("node joined the cluster", zap.Duration("duration", time.Since(start)))
			return nil
		}
	}
}

// sendWake sends the node's magic packet: from Caddy when the node has a
// MAC here, else through PVE, from the node the API request lands on.
func (c *Cluster) sendWake(ctx context.Context, node string, log *zap.Logger) error {
	if m, ok := c.cfg.WakeNodes.MACs[node]; ok {
		if err := sendMagicPacket(m); err != nil {
			return err
		}
		log.Info("node is offline: magic packet sent", zap.String("mac", m.MAC), zap.String("broadcast", m.Broadcast))
		return nil
	}
	var mac string
	if err := c.Client().Post(ctx, "/nodes/"+node+"/wakeonlan", nil, &mac); err != nil {
		return fmt.Errorf("POST /nodes/%s/wakeonlan: %w", node, err)
	}
	log.Info("node is offline: PVE sent the magic packet", zap.String("mac", mac))
	return nil
}

// Public words of a node wake.
const (
	msgNodeOff     = "The server the service runs on is powered off."
	msgNodeNoWake  = "The server the service runs on could not be woken."
	msgNodeTimeout = "The server the service runs on did not come up in time."
)

// nodeUp wakes the guest's node if it is offline, before the timed part
// of a wake. It costs one /cluster/resources?type=node read per wake when
// wake_nodes is set, and otherwise only for a guest whose row has no
// status (what an offline node's guests show), to say why the wake
// cannot work. Anything it cannot tell is left to the wake's own steps.
func (g *Guest) nodeUp(b *Binding) error {
	c := b.c
	if c == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(g.ctx, c.cfg.RequestTimeout)
	defer cancel()
	res, polled, err := c.lookupPolled(g.ref)
	if !polled && c.cfg.WakeNodes != nil {
		// Caddy just started: the first poll tells where the guest is.
		if c.WaitReady(ctx) != nil {
			return nil
		}
		res, err = c.Lookup(g.ref)
	}
	if err != nil || res.Node == "" || (c.cfg.WakeNodes == nil && res.Status != "unknown") {
		return nil
	}
	// Only "offline" (not a cluster member now) is a node to wake:
	// "unknown" is a member whose pvestatd sent no data, whose API answers.
	st, err := c.nodeStatus(ctx, res.Node)
	if err != nil || st != "offline" {
		return nil
	}
	if c.cfg.WakeNodes == nil {
		return fail(msgNodeOff, fmt.Errorf("node %s is %s (wake_nodes in the cluster's config wakes it)", res.Node, st))
	}
	g.emit(Event{Phase: "waking_node", Message: "The server is powered off; waking it up", Detail: "Waking node " + res.Node + " (wake-on-LAN)", Progress: 5})
	g.logger.Info("waking the guest's node", zap.String("node", res.Node), zap.Int("vmid", res.VMID))
	op := c.wakeNode(res.Node)
	select {
	case <-op.done:
	case <-g.ctx.Done():
		return g.ctx.Err()
	}
	switch err := op.err; {
	case err == nil:
	case isPermission(err):
		return g.permissionFailure(err)
	case errors.Is(err, context.DeadlineExceeded):
		return &WakeError{Err: err, Public: msgNodeTimeout, Timeout: true}
	default:
		return fail(msgNodeNoWake, err)
	}
	g.emit(Event{Phase: "node_online", Message: "The server is up", Detail: "Node " + res.Node + " joined the cluster", Progress: 7})
	return nil
}
