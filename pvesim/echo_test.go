package pvesim

import (
	"bufio"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testutil"
)

// A guest's TCP and UDP echo services answer while it runs; stopping it
// closes them and cuts the open connection.
func TestEchoServices(t *testing.T) {
	s := New(Options{Nodes: []string{"pve1"}, TaskDelay: 10 * time.Millisecond})
	t.Cleanup(func() { _ = s.Close() })
	tcpPort, udpPort := testutil.FreePort(t), testutil.FreePort(t)
	if err := s.AddGuest(GuestSpec{VMID: 100, IP: "127.0.0.63", Port: testutil.FreePort(t), EchoTCP: []int{tcpPort}, EchoUDP: []int{udpPort}}); err != nil {
		t.Fatal(err)
	}
	tcpAddr := net.JoinHostPort("127.0.0.63", strconv.Itoa(tcpPort))
	udpAddr := net.JoinHostPort("127.0.0.63", strconv.Itoa(udpPort))
	if c, err := net.DialTimeout("tcp", tcpAddr, time.Second); err == nil {
		c.Close()
		t.Fatal("a stopped guest's TCP echo accepted a connection")
	}
	if err := s.StartGuest(100); err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", tcpAddr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(conn)
	if _, err := conn.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("tcp echo: %q %v", line, err)
	}
	u, err := net.Dial("udp", udpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	_ = u.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := u.Write([]byte("datagram")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, err := u.Read(buf); err != nil || string(buf[:n]) != "datagram" {
		t.Fatalf("udp echo: %q %v", buf[:n], err)
	}
	if err := s.StopGuest(100); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("the open connection outlived the guest")
	}
	if c, err := net.DialTimeout("tcp", tcpAddr, time.Second); err == nil {
		c.Close()
		t.Fatal("a stopped guest's TCP echo still accepts")
	}
}
