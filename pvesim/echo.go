package pvesim

import (
	"bufio"
	"net"
	"strconv"
	"sync"
)

// echoServers are a guest's non-HTTP services: a TCP echo on each of
// GuestSpec.EchoTCP (standing in for SSH or a database) and a UDP echo on
// each of GuestSpec.EchoUDP (a game server). They serve while the guest
// serves HTTP, and stopping the guest closes them and every open
// connection, as a powered-off guest would.
type echoServers struct {
	mu     sync.Mutex
	lns    []net.Listener
	pcs    []net.PacketConn
	conns  map[net.Conn]struct{}
	closed bool
}

// startEchoLocked opens the guest's echo services. Called with sim.mu held.
func (g *guest) startEchoLocked() {
	if len(g.spec.EchoTCP) == 0 && len(g.spec.EchoUDP) == 0 {
		return
	}
	es := &echoServers{conns: map[net.Conn]struct{}{}}
	for _, port := range g.spec.EchoTCP {
		addr := net.JoinHostPort(g.spec.IP, strconv.Itoa(port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			g.sim.logf("pvesim: guest %d cannot listen on tcp %s: %v", g.spec.VMID, addr, err)
			continue
		}
		es.lns = append(es.lns, ln)
		go es.serveTCP(ln)
	}
	for _, port := range g.spec.EchoUDP {
		addr := net.JoinHostPort(g.spec.IP, strconv.Itoa(port))
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			g.sim.logf("pvesim: guest %d cannot listen on udp %s: %v", g.spec.VMID, addr, err)
			continue
		}
		es.pcs = append(es.pcs, pc)
		go serveUDP(pc)
	}
	g.echo = es
}

// stopEchoLocked closes the echo services and their connections. Called
// with sim.mu held.
func (g *guest) stopEchoLocked() {
	if g.echo == nil {
		return
	}
	g.echo.close()
	g.echo = nil
}

func (es *echoServers) serveTCP(ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		es.mu.Lock()
		if es.closed {
			es.mu.Unlock()
			_ = conn.Close()
			return
		}
		es.conns[conn] = struct{}{}
		es.mu.Unlock()
		go func() {
			defer func() {
				es.mu.Lock()
				delete(es.conns, conn)
				es.mu.Unlock()
				_ = conn.Close()
			}()
			echo(conn, bufio.NewReader(conn))
		}()
	}
}

// serveUDP answers every datagram with itself.
func serveUDP(pc net.PacketConn) {
	buf := make([]byte, 65535)
	for {
		n, addr, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		_, _ = pc.WriteTo(buf[:n], addr)
	}
}

func (es *echoServers) close() {
	es.mu.Lock()
	defer es.mu.Unlock()
	es.closed = true
	for _, ln := range es.lns {
		_ = ln.Close()
	}
	for _, pc := range es.pcs {
		_ = pc.Close()
	}
	for c := range es.conns {
		_ = c.Close()
	}
	es.conns = map[net.Conn]struct{}{}
}
