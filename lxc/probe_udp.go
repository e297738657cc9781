package lxc

import (
	"context"
	"fmt"
	"net"
	"time"
)

// probeUDP sends one datagram (a query the service answers: a game
// server's status query, a DNS question) and waits up to a second for
// any answer, which means ready. An ICMP port unreachable (the connected
// socket's read fails with "connection refused") or silence means not
// yet: a UDP service that answers nothing cannot be probed (use probe
// none with ready_after).
func probeUDP(ctx context.Context, addr string, datagram []byte) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "udp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	deadline := time.Now().Add(time.Second)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = conn.SetDeadline(deadline)
	if _, err := conn.Write(datagram); err != nil {
		return fmt.Errorf("udp probe: %w", err)
	}
	buf := make([]byte, 2048)
	if _, err := conn.Read(buf); err != nil {
		return fmt.Errorf("udp probe: no answer: %w", err)
	}
	return nil
}
