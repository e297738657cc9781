package testutil

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// A port from 127.0.0.1:0 is only free until something else takes it, and
// two things do while a test writes it into a config and starts a server
// on it: the kernel hands ports of its ephemeral range to every outgoing
// connection on the machine, and go test runs other packages' tests in
// other processes at the same time (a CI run once failed when ./caddy
// could not bind such a port). So ports come from below the ephemeral
// range, and each is held for the life of the test process by an flock
// on a file that every test process of the repository consults.
var ports struct {
	sync.Mutex
	held  map[int]*os.File // the lock files, kept open (and so locked) till exit
	dir   string
	lo    int
	hi    int
	ready bool
}

// portFloor is the lowest port handed out: above the well-known and the
// usual registered server ports (etcd 2379, kube-apiserver 6443, 8006).
const portFloor = 10000

// FreePort returns a loopback port, free for TCP and UDP, that no other
// test process of this repository holds and no outgoing connection can
// take. It stays reserved until the test process exits.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := Port()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Port is FreePort for callers without a testing.TB.
func Port() (int, error) {
	ports.Lock()
	defer ports.Unlock()
	if !ports.ready {
		ports.held = map[int]*os.File{}
		ports.dir = filepath.Join(os.TempDir(), "caddy-proxmox-ports")
		ports.lo, ports.hi = portFloor, ephemeralLow()
		ports.ready = true
		if err := os.MkdirAll(ports.dir, 0o777); err != nil {
			return 0, fmt.Errorf("port locks: %w", err)
		}
	}
	if ports.hi-ports.lo < 1000 {
		return kernelPort() // an odd ip_local_port_range: take the old risk
	}
	for range 500 {
		p := ports.lo + rand.IntN(ports.hi-ports.lo)
		if _, mine := ports.held[p]; mine {
			continue
		}
		f, ok := lockPort(p)
		if !ok {
			continue
		}
		if !bindable(p) {
			f.Close()
			continue
		}
		ports.held[p] = f
		return p, nil
	}
	return 0, fmt.Errorf("no free loopback port in %d-%d after 500 tries", ports.lo, ports.hi-1)
}

// lockPort takes the cross-process lock of port p without waiting.
func lockPort(p int) (*os.File, bool) {
	f, err := os.OpenFile(filepath.Join(ports.dir, strconv.Itoa(p)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, false
	}
	return f, true
}

// bindable tells whether p can be bound on 127.0.0.1 for TCP and for UDP
// now, i.e. no other program (not one of ours) uses it.
func bindable(p int) bool {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	l.Close()
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	u.Close()
	return true
}

// ephemeralLow is the first port the kernel may give outgoing connections.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return lo
}

func kernelPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
