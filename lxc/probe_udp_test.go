package lxc

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// The udp probe: an answer to its datagram means ready; a closed port
// (ICMP port unreachable) or a service that stays silent means not yet.
func TestProbeUDP(t *testing.T) {
	ctx := context.Background()
	echo, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := echo.ReadFrom(buf)
			if err != nil {
				return
			}
			if strings.HasPrefix(string(buf[:n]), "\xff\xff\xff\xffTSource") {
				_, _ = echo.WriteTo([]byte("\xff\xff\xff\xffA1234"), from)
			}
		}
	}()
	port := echo.LocalAddr().(*net.UDPAddr).Port
	query := "\xff\xff\xff\xffTSource Engine Query\x00"
	if err := probe(ctx, ProbeUDP, "127.0.0.1", port, query); err != nil {
		t.Fatalf("answering service: %v", err)
	}
	began := time.Now()
	if err := probe(ctx, ProbeUDP, "127.0.0.1", port, "hello"); err == nil || time.Since(began) < 900*time.Millisecond {
		t.Fatalf("silent service: %v after %v", err, time.Since(began))
	}
	closed, _ := net.ListenPacket("udp", "127.0.0.1:0")
	closedPort := closed.LocalAddr().(*net.UDPAddr).Port
	closed.Close()
	began = time.Now()
	if err := probe(ctx, ProbeUDP, "127.0.0.1", closedPort, query); err == nil || !strings.Contains(err.Error(), "refused") || time.Since(began) > 500*time.Millisecond {
		t.Fatalf("closed port: %v after %v", err, time.Since(began))
	}
}
