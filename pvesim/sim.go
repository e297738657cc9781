package pvesim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// Options configure a simulated cluster.
type Options struct {
	// ClusterName is reported by /cluster/status ("pvesim").
	ClusterName string
	// Nodes are the node names (["pve1"]).
	Nodes []string
	// TokenID and TokenSecret are the only accepted API token
	// ("root@pam!sim" and a random secret).
	TokenID     string
	TokenSecret string
	// TaskDelay is how long a task runs before it finishes (200ms).
	TaskDelay time.Duration
	// StatInterval is how often pvestatd measures the guests' usage (10s,
	// as on PVE): /cluster/resources shows the last measurement.
	StatInterval time.Duration
	// HADelay is how long pve-ha-manager's CRM and LRM take to act on a
	// request, each (3×TaskDelay). Real clusters take about 10s per round.
	HADelay time.Duration
	// Version is the PVE major version, 8 (default) or 9: it decides the
	// privilege the guest agent's network-get-interfaces needs.
	Version int
	// CRIU makes LXC suspend work (criu installed on the nodes); PVE does
	// not install it, so by default a container suspend task fails as
	// lxc-checkpoint does.
	CRIU bool
	// NodeBootDelay is how long a node takes from a magic packet to
	// joining the cluster (5×TaskDelay). Real nodes take minutes.
	NodeBootDelay time.Duration
	// Logf, if set, receives one line per notable simulator event.
	Logf func(format string, args ...any)
}

// GuestSpec describes one guest.
type GuestSpec struct {
	VMID int
	// Kind is "lxc" (default) or "qemu".
	Kind string
	// Name is the hostname (LXC) or VM name; default "guest-<vmid>".
	Name string
	// Node defaults to the first node.
	Node string
	// IP is the loopback address the guest serves on once started; default
	// 127.0.0.2 for the first guest, 127.0.0.3 for the second, and so on.
	IP string
	// Port is the TCP port the guest serves HTTP on (8080).
	Port int
	// Running starts the guest at once.
	Running bool
	// NoAgent makes a QEMU guest answer "No QEMU guest agent configured".
	NoAgent bool
	// CloudInit gives a QEMU guest its address statically in ipconfig0
	// (cloud-init) instead of DHCP.
	CloudInit bool
	// CloudInitIP, with CloudInit, is ipconfig0's address when it is not
	// the one the guest is reached at (IP, which its guest agent reports):
	// the address inside a NAT, such as KubeVirt's masquerade 10.0.2.2
	// behind proxmox_api.
	CloudInitIP string
	// AgentNotRunning enables the guest agent in a QEMU guest's config
	// but has it never answer ("QEMU guest agent is not running"), as when
	// the agent is not installed in the guest.
	AgentNotRunning bool
	// Template marks the guest a template: it is never started.
	Template bool
	// HA puts the guest under pve-ha-manager: start and stop requests
	// only ask HA, which acts HADelay later.
	HA bool
	// LeaseDelay is how long after a start the guest's eth0 is without
	// its address (a DHCP lease on its way); other interfaces have theirs
	// at once.
	LeaseDelay time.Duration
	// ExtraIfaces are further interfaces inside the guest (a Docker
	// bridge, a VPN), not in its PVE config.
	ExtraIfaces []Iface
	// StartDelay is how long the start task runs (Options.TaskDelay).
	StartDelay time.Duration
	// BootDelay is how long after the start task the guest's service
	// begins to listen (0: at once). Its address is known from the start.
	BootDelay time.Duration
	// ShutdownDelay is how long a graceful shutdown takes (TaskDelay).
	ShutdownDelay time.Duration
	// Handler serves the guest's HTTP; default: a hello page, a websocket
	// echo for upgrade requests, /sleep?d= and /stream.
	Handler http.Handler
	// Tags are the guest's Proxmox tags (its config's "tags").
	Tags []string
	// EchoTCP are ports on IP where the guest also serves a TCP echo
	// while it serves HTTP (an SSH server or a database, for layer4
	// wakes); EchoUDP the same for a UDP echo (a game server).
	EchoTCP []int
	EchoUDP []int
}

// Iface is an interface inside a guest that PVE's config does not list.
type Iface struct {
	Name, MAC, IP string
}

// Sim is a simulated Proxmox VE cluster. It is an http.Handler for the
// API under /api2/json; Listen serves it on a loopback port.
type Sim struct {
	opts Options

	mu       sync.Mutex
	guests   map[int]*guest
	tasks    map[string]*task
	calls    map[string]int
	faults   []*fault
	acl      map[string][]string // nil: the token may do anything
	stale    map[string]bool     // nodes whose pvestatd stalled
	power    map[string]*nodePower
	wol      []net.PacketConn
	nextIP   int
	pid      int
	started  time.Time
	closed   bool
	server   *http.Server
	listener net.Listener
}

// New returns a simulator with no guests.
func New(opts Options) *Sim {
	if opts.ClusterName == "" {
		opts.ClusterName = "pvesim"
	}
	if len(opts.Nodes) == 0 {
		opts.Nodes = []string{"pve1"}
	}
	if opts.TokenID == "" {
		opts.TokenID = "root@pam!sim"
	}
	if opts.TokenSecret == "" {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		opts.TokenSecret = hex.EncodeToString(b)
	}
	if opts.TaskDelay == 0 {
		opts.TaskDelay = 200 * time.Millisecond
	}
	if opts.StatInterval == 0 {
		opts.StatInterval = 10 * time.Second
	}
	if opts.HADelay == 0 {
		opts.HADelay = 3 * opts.TaskDelay
	}
	if opts.Version == 0 {
		opts.Version = 8
	}
	if opts.NodeBootDelay == 0 {
		opts.NodeBootDelay = 5 * opts.TaskDelay
	}
	return &Sim{
		opts:    opts,
		guests:  map[int]*guest{},
		tasks:   map[string]*task{},
		calls:   map[string]int{},
		stale:   map[string]bool{},
		nextIP:  2,
		pid:     4000,
		started: time.Now(),
	}
}

// TokenID is the accepted API token id.
func (s *Sim) TokenID() string { return s.opts.TokenID }

// TokenSecret is the accepted API token secret.
func (s *Sim) TokenSecret() string { return s.opts.TokenSecret }

// Nodes are the node names.
func (s *Sim) Nodes() []string { return append([]string(nil), s.opts.Nodes...) }

// AddGuest adds a guest; a Running guest starts serving at once.
func (s *Sim) AddGuest(spec GuestSpec) error {
	if spec.VMID < 100 || spec.VMID > 999999999 {
		return fmt.Errorf("pvesim: vmid %d out of range", spec.VMID)
	}
	if spec.Kind == "" {
		spec.Kind = "lxc"
	}
	if spec.Kind != "lxc" && spec.Kind != "qemu" {
		return fmt.Errorf("pvesim: kind %q is neither lxc nor qemu", spec.Kind)
	}
	for _, t := range spec.Tags {
		if !tagRE.MatchString(t) {
			return fmt.Errorf("pvesim: tag %q: invalid characters in tag", t)
		}
	}
	if spec.Name == "" {
		spec.Name = fmt.Sprintf("guest-%d", spec.VMID)
	}
	if spec.Port == 0 {
		spec.Port = 8080
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if spec.Node == "" {
		spec.Node = s.opts.Nodes[0]
	}
	if !s.hasNode(spec.Node) {
		return fmt.Errorf("pvesim: no node %q", spec.Node)
	}
	if _, dup := s.guests[spec.VMID]; dup {
		return fmt.Errorf("pvesim: vmid %d exists", spec.VMID)
	}
	if spec.IP == "" {
		n := s.nextIP
		s.nextIP++
		spec.IP = fmt.Sprintf("127.0.%d.%d", n/250, 2+(n-2)%250)
		if n < 252 {
			spec.IP = fmt.Sprintf("127.0.0.%d", n)
		}
	}
	if ip := net.ParseIP(spec.IP); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("pvesim: guest address %q is not a loopback address", spec.IP)
	}
	if spec.Template && spec.Running {
		return fmt.Errorf("pvesim: template %d cannot run", spec.VMID)
	}
	g := &guest{sim: s, spec: spec, status: "stopped", mac: macFor(spec.VMID)}
	if spec.HA {
		g.ha = &haResource{state: "stopped"}
		if spec.Running {
			g.ha.state = "started"
		}
	}
	s.guests[spec.VMID] = g
	if spec.Running {
		g.status = "running"
		g.since = time.Now()
		g.bootLocked()
	}
	return nil
}

func (s *Sim) hasNode(n string) bool {
	for _, x := range s.opts.Nodes {
		if x == n {
			return true
		}
	}
	return false
}

// macFor is a stable, locally administered MAC address for a vmid, in the
// BC:24:11 prefix PVE uses.
func macFor(vmid int) string {
	return fmt.Sprintf("BC:24:11:%02X:%02X:%02X", (vmid>>16)&0xff, (vmid>>8)&0xff, vmid&0xff)
}

// Listen serves the API on addr (e.g. "127.0.0.1:0") and returns its base
// URL without /api2/json. Close stops it.
func (s *Sim) Listen(addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	s.mu.Lock()
	s.server, s.listener = srv, ln
	s.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), nil
}

// Close stops the API listener and every guest's service. Pending tasks
// no longer change anything.
func (s *Sim) Close() error {
	s.mu.Lock()
	s.closed = true
	srv := s.server
	for _, pc := range s.wol {
		_ = pc.Close()
	}
	for _, g := range s.guests {
		g.gen++
		g.unserveLocked()
	}
	s.mu.Unlock()
	if srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		_ = srv.Close()
	}
	return nil
}

func (s *Sim) logf(format string, args ...any) {
	if s.opts.Logf != nil {
		s.opts.Logf(format, args...)
	}
}

// Status is a guest's PVE status: "running" or "stopped" (a suspended
// VM is "running", as in PVE). Unknown vmids give "".
func (s *Sim) Status(vmid int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.guests[vmid]; g != nil {
		return g.status
	}
	return ""
}

// Paused reports whether a VM's QEMU runs without running the guest
// (suspended to RAM, or prelaunch for a backup).
func (s *Sim) Paused(vmid int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.guests[vmid]
	return g != nil && g.paused()
}

// Serving reports whether a guest's service is listening.
func (s *Sim) Serving(vmid int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.guests[vmid]
	return g != nil && g.ln != nil
}

// ServingSince is when the guest's service last began listening (zero
// while it is not serving), to measure time from readiness to first byte.
func (s *Sim) ServingSince(vmid int) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.guests[vmid]; g != nil && g.ln != nil {
		return g.servingSince
	}
	return time.Time{}
}

// Addr is the guest's service address, ip:port.
func (s *Sim) Addr(vmid int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.guests[vmid]; g != nil {
		return net.JoinHostPort(g.spec.IP, fmt.Sprint(g.spec.Port))
	}
	return ""
}

// GuestIDs lists the vmids in order.
func (s *Sim) GuestIDs() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]int, 0, len(s.guests))
	for id := range s.guests {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	return ids
}

// StartGuest starts a guest at once, as someone else (the PVE GUI, a
// script) would; no task, no API call is counted.
func (s *Sim) StartGuest(vmid int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.guests[vmid]
	if g == nil {
		return fmt.Errorf("pvesim: no guest %d", vmid)
	}
	if g.status == "running" && !g.paused() {
		return nil
	}
	g.startedLocked()
	return nil
}

// StopGuest stops a guest at once, as someone else would.
func (s *Sim) StopGuest(vmid int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.guests[vmid]
	if g == nil {
		return fmt.Errorf("pvesim: no guest %d", vmid)
	}
	g.stopLocked()
	return nil
}

// Calls is how many API calls "METHOD /path" received (path without
// /api2/json and query), e.g. Calls("GET /cluster/resources").
func (s *Sim) Calls(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[key]
}

// CallsMatching sums the calls whose key contains sub.
func (s *Sim) CallsMatching(sub string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, v := range s.calls {
		if strings.Contains(k, sub) {
			n += v
		}
	}
	return n
}

// TotalCalls is the number of API calls received.
func (s *Sim) TotalCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, v := range s.calls {
		n += v
	}
	return n
}

// CallCounts is a copy of the per-path call counters.
func (s *Sim) CallCounts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]int, len(s.calls))
	for k, v := range s.calls {
		m[k] = v
	}
	return m
}

// ResetCalls zeroes the call counters.
func (s *Sim) ResetCalls() {
	s.mu.Lock()
	s.calls = map[string]int{}
	s.mu.Unlock()
}

// ActionCalls is how many times a power action (start, stop, shutdown,
// suspend, resume) was requested for a guest through the API.
func (s *Sim) ActionCalls(vmid int, action string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	suffix := fmt.Sprintf("/%d/status/%s", vmid, action)
	for k, v := range s.calls {
		if strings.HasPrefix(k, "POST ") && strings.HasSuffix(k, suffix) {
			n += v
		}
	}
	return n
}
