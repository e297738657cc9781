package pvesim

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// guest is one simulated container or VM. Fields are guarded by sim.mu.
type guest struct {
	sim    *Sim
	spec   GuestSpec
	mac    string
	status string // running | stopped
	// qmp is QEMU's run state while the process runs, when it is not
	// "running": "paused" (suspended to RAM) or "prelaunch" (started
	// paused by a backup of a stopped VM).
	qmp        string
	lock       string
	checkpoint bool // LXC: a CRIU checkpoint waits in the dump directory
	ha         *haResource
	since      time.Time
	failStart  string
	neverReady bool
	// gen changes on every power transition so that a pending boot timer
	// of an earlier run does not start serving.
	gen int

	// usage is what it does and has done (usage.go).
	usage usageModel

	ln           net.Listener
	echo         *echoServers
	srv          *http.Server
	servingSince time.Time
	hijacked     *connSet
}

// connSet tracks upgraded connections, which http.Server.Close leaves
// open, so that stopping a guest really cuts its websockets.
type connSet struct {
	mu sync.Mutex
	m  map[net.Conn]struct{}
}

func (c *connSet) add(conn net.Conn) {
	c.mu.Lock()
	c.m[conn] = struct{}{}
	c.mu.Unlock()
}

func (c *connSet) remove(conn net.Conn) {
	c.mu.Lock()
	delete(c.m, conn)
	c.mu.Unlock()
}

func (c *connSet) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for conn := range c.m {
		_ = conn.Close()
	}
	c.m = map[net.Conn]struct{}{}
}

// paused reports whether QEMU runs without executing the guest.
func (g *guest) paused() bool { return g.qmp != "" }

// guestType is PVE's guest_type(), the subject of "... is locked".
func (g *guest) guestType() string { return g.kindLabel() }

func (g *guest) kindLabel() string {
	if g.spec.Kind == "qemu" {
		return "VM"
	}
	return "CT"
}

// bootLocked starts serving after the boot delay, unless the guest is
// stopped again before. Called with sim.mu held.
func (g *guest) bootLocked() {
	if g.neverReady {
		return
	}
	gen := g.gen
	serve := func() {
		g.sim.mu.Lock()
		defer g.sim.mu.Unlock()
		if g.gen != gen || g.status != "running" || g.paused() || g.sim.closed {
			return
		}
		g.serveLocked()
	}
	if g.spec.BootDelay <= 0 {
		g.serveLocked()
		return
	}
	time.AfterFunc(g.spec.BootDelay, serve)
}

// serveLocked opens the guest's listener. Called with sim.mu held.
func (g *guest) serveLocked() {
	if g.ln != nil {
		return
	}
	addr := net.JoinHostPort(g.spec.IP, strconv.Itoa(g.spec.Port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		g.sim.logf("pvesim: guest %d cannot listen on %s: %v", g.spec.VMID, addr, err)
		return
	}
	ln = countingListener{Listener: ln, in: &g.usage.servedIn, out: &g.usage.servedOut}
	h := g.spec.Handler
	if h == nil {
		h = g.defaultHandler()
	}
	g.hijacked = &connSet{m: map[net.Conn]struct{}{}}
	hj := g.hijacked
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ConnState: func(c net.Conn, st http.ConnState) {
			if st == http.StateHijacked {
				hj.add(c)
			}
		},
	}
	g.ln, g.srv, g.servingSince = ln, srv, time.Now()
	go func() { _ = srv.Serve(ln) }()
	g.startEchoLocked()
	g.sim.logf("pvesim: guest %d serves on %s", g.spec.VMID, addr)
}

// unserveLocked closes the listener and every connection, upgraded ones
// included. Called with sim.mu held.
func (g *guest) unserveLocked() {
	if g.srv != nil {
		_ = g.srv.Close()
		g.hijacked.closeAll()
	}
	g.stopEchoLocked()
	g.ln, g.srv = nil, nil
}

// defaultHandler is the guest's service: a hello page, a websocket-style
// echo for upgrade requests, /sleep?d=<duration> and /stream (SSE ticks).
func (g *guest) defaultHandler() http.Handler {
	name, vmid := g.spec.Name, g.spec.VMID
	hj := func() *connSet { return g.hijacked }
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Guest", name)
		if up := r.Header.Get("Upgrade"); up != "" {
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			defer conn.Close()
			set := hj()
			defer set.remove(conn)
			_, _ = fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: %s\r\nConnection: Upgrade\r\nX-Guest: %s\r\n\r\n", up, name)
			_ = brw.Flush()
			echo(conn, brw.Reader)
			return
		}
		switch r.URL.Path {
		case "/sleep":
			d, _ := time.ParseDuration(r.URL.Query().Get("d"))
			if d > 30*time.Second {
				d = 30 * time.Second
			}
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
		case "/stream":
			w.Header().Set("Content-Type", "text/event-stream")
			n, _ := strconv.Atoi(r.URL.Query().Get("n"))
			if n <= 0 || n > 100000 {
				n = 100000
			}
			rc := http.NewResponseController(w)
			for i := 0; i < n; i++ {
				if _, err := fmt.Fprintf(w, "data: tick %d\n\n", i); err != nil {
					return
				}
				_ = rc.Flush()
				select {
				case <-time.After(50 * time.Millisecond):
				case <-r.Context().Done():
					return
				}
			}
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = fmt.Fprintf(w, "hello from %s (vmid %d) %s\n", name, vmid, r.URL.Path)
	})
}

// echo copies what the peer sends back to it until either side closes.
func echo(conn net.Conn, r *bufio.Reader) {
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := conn.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			return
		}
	}
}
