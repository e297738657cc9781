// Package wakel4 is wake on request for TCP and UDP: the
// layer4.handlers.proxmox_wake handler of caddy-l4
// (github.com/mholt/caddy-l4). It holds a connection (SSH, a database, a
// game server) until its Proxmox VE guest is ready, then hands it to the
// next handler, usually proxy. It wakes guests through the proxmox app of
// package caddymodule/wake, so the HTTP and layer4 handlers of a guest
// share one runtime: one wake, one idle countdown, one activity count.
package wakel4

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/mholt/caddy-l4/layer4"
	"go.uber.org/zap"

	"github.com/caddy-proxmox/caddy-proxmox/caddymodule/wake"
	"github.com/caddy-proxmox/caddy-proxmox/lxc"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// Handler (layer4 proxmox_wake) wakes a stopped Proxmox VE guest when a
// connection arrives and holds the connection until the guest is ready,
// for at most hold_timeout; then it sets {l4.proxmox.upstream} (the
// guest's host:port, udp/host:port for UDP) and passes the connection on,
// to proxy {l4.proxmox.upstream}. A failed wake closes the connection
// (there is no page to show) and is logged.
//
// Every open connection counts as activity for as long as it stays open,
// however quiet, so the guest is never stopped under an SSH session or a
// database client; its idle countdown starts when the last one closes.
// A UDP flow is open until caddy-l4's server idle_timeout (30s) passes
// without a datagram. The first datagram of a flow wakes the guest; the
// datagrams that arrive while it wakes are held, up to max_datagrams per
// flow, and delivered in order once it is ready; further ones are dropped
// and logged.
type Handler struct {
	// Guest is "<cluster>/<vmid>" or "<cluster>/<name>" (no placeholders).
	Guest string `json:"guest"`
	// GuestOptions are how the guest is woken, checked and put to sleep,
	// as for the HTTP proxmox_wake; port is required. The tcp probe (the
	// default), udp (a UDP service that answers a query) or none serve
	// here: an http probe belongs to the HTTP handler. stream_idle_timeout bounds how long a silent connection
	// counts as activity.
	wake.GuestOptions
	// MaxDatagrams caps the datagrams held per UDP flow while the guest
	// wakes (16); later ones are dropped.
	MaxDatagrams int `json:"max_datagrams,omitempty"`

	binding *lxc.Binding
	guest   *lxc.Guest
	hold    time.Duration
	logger  *zap.Logger
}

// DefaultMaxDatagrams is max_datagrams' default.
const DefaultMaxDatagrams = 16

// Placeholders the handler sets for the handlers after it.
const (
	// PlaceholderUpstream is the network address to dial: host:port, or
	// udp/host:port for a UDP flow.
	PlaceholderUpstream = "l4.proxmox.upstream"
	// PlaceholderColdStart is true when the connection waited for a wake.
	PlaceholderColdStart = "l4.proxmox.cold_start"
)

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "layer4.handlers.proxmox_wake",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision binds the handler to its guest's shared runtime. It contacts
// nothing and never starts or stops the guest.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	if err := h.Validate(); err != nil {
		return err
	}
	cfg, _ := h.GuestConfig()
	h.hold = time.Duration(h.HoldTimeout)
	if h.hold == 0 || h.hold > cfg.WakeTimeout {
		// A wake ends by wake_timeout; the margin lets a held connection
		// see the wake's own verdict rather than its hold ending then.
		h.hold = cfg.WakeTimeout + 500*time.Millisecond
	}
	if h.MaxDatagrams == 0 {
		h.MaxDatagrams = DefaultMaxDatagrams
	}
	cluster, ref, _ := splitGuest(h.Guest)
	appIface, err := ctx.AppIfConfigured("proxmox")
	if err != nil {
		if errors.Is(err, caddy.ErrNotConfigured) {
			return fmt.Errorf("layer4 proxmox_wake %s: no proxmox global option: add proxmox { cluster %s { ... } }", h.Guest, cluster)
		}
		return fmt.Errorf("layer4 proxmox_wake: %w", err)
	}
	c, err := appIface.(*wake.ProxmoxApp).Cluster(cluster)
	if err != nil {
		return fmt.Errorf("layer4 proxmox_wake %s: %w", h.Guest, err)
	}
	b, err := lxc.AcquireGuest(c, ref, cfg, h.logger)
	if err != nil {
		return fmt.Errorf("layer4 proxmox_wake %s: %w", h.Guest, err)
	}
	h.binding, h.guest = b, b.Guest()
	return nil
}

// Validate checks the configuration; it changes nothing.
func (h *Handler) Validate() error {
	if _, _, err := splitGuest(h.Guest); err != nil {
		return fmt.Errorf("layer4 proxmox_wake: %w", err)
	}
	if h.Port < 1 || h.Port > 65535 {
		return fmt.Errorf("layer4 proxmox_wake %s: port %d: want the guest's service port (1-65535)", h.Guest, h.Port)
	}
	if h.MaxDatagrams < 0 {
		return errors.New("layer4 proxmox_wake: max_datagrams must not be negative")
	}
	if h.Probe == lxc.ProbeHTTP {
		return fmt.Errorf("layer4 proxmox_wake %s: %s", h.Guest, errProbeHTTP)
	}
	if _, err := h.GuestConfig(); err != nil {
		return fmt.Errorf("layer4 proxmox_wake %s: %w", h.Guest, err)
	}
	return nil
}

// errProbeHTTP refuses the http probe: the port is a TCP or UDP service,
// not necessarily one that speaks HTTP in clear.
var errProbeHTTP = errors.New("probe http is for the HTTP proxmox_wake: probe a layer4 service with tcp, udp <datagram>, or none with ready_after")

// splitGuest splits "<cluster>/<vmid|name>". Placeholders are refused: a
// connection has no host name or path to pick a guest by, and a guest
// chosen from what a client sends could be any guest.
func splitGuest(guest string) (cluster, ref string, err error) {
	cluster, ref, ok := strings.Cut(guest, "/")
	if !ok || cluster == "" {
		return "", "", fmt.Errorf("guest %q must be <cluster>/<vmid> or <cluster>/<name>", guest)
	}
	if strings.ContainsAny(guest, "{}") {
		return "", "", fmt.Errorf("guest %q: placeholders are for the HTTP proxmox_wake only", guest)
	}
	if err := lxc.ValidateRef(ref); err != nil {
		return "", "", err
	}
	return cluster, ref, nil
}

// Cleanup releases this config's binding of the guest. The guest runtime
// (timers, state, a wake in progress) lives on if the next config uses it.
func (h *Handler) Cleanup() error {
	if h.binding != nil {
		return h.binding.Release()
	}
	return nil
}

// Handle counts the connection as activity while it is open, wakes the
// guest if needed, holds the connection until the guest is ready and
// passes it on.
func (h *Handler) Handle(cx *layer4.Connection, next layer4.Handler) error {
	g := h.guest
	udp := isDatagram(cx)
	cx, end := h.begin(cx, udp)
	defer end()
	if up, ok := g.Upstream(h.Port); ok {
		setUpstream(cx, up, udp, false)
		return next.Handle(cx)
	}
	log := h.logger.With(zap.String("guest", h.Guest), zap.String("remote", cx.RemoteAddr().String()))
	network := "tcp"
	if udp {
		network = "udp"
	}
	op := g.Wake(network + " connection")
	release, ok := g.Hold(h.MaxPending)
	if !ok {
		log.Warn("too many connections waiting for the guest to start; closing this one", zap.Int("max_pending", h.MaxPending))
		return nil
	}
	var (
		err    error
		queued [][]byte
	)
	if udp {
		queued, err = h.holdFlow(cx, op, log)
	} else {
		err = h.holdConn(op)
	}
	release()
	if err != nil {
		if errors.Is(err, errFlowEnded) {
			log.Debug("UDP flow ended while the guest was starting")
		} else {
			log.Warn("closing the connection: the guest is not ready", zap.Error(err))
		}
		return nil
	}
	up, ok := g.Upstream(h.Port)
	if !ok {
		// Stopped again in the meantime (e.g. by the admin API).
		log.Warn("closing the connection: the guest went to sleep again while it waited")
		return nil
	}
	setUpstream(cx, up, udp, true)
	if len(queued) > 0 {
		cx = cx.Wrap(&replayConn{Conn: cx.Conn, queue: queued})
	}
	return next.Handle(cx)
}

// begin counts the connection as activity until end is called. With
// stream_idle_timeout a TCP connection's bytes are watched, so that once
// silent for that long it no longer keeps the guest up. A UDP flow needs
// no watching: caddy-l4 ends it after its own idle_timeout of silence.
func (h *Handler) begin(cx *layer4.Connection, udp bool) (*layer4.Connection, func()) {
	if h.StreamIdleTimeout <= 0 || udp {
		return cx, h.guest.Begin(true)
	}
	s, end := h.guest.BeginStream()
	return cx.Wrap(wake.WatchConn(cx.Conn, s)), end
}

// errHoldTimeout ends a hold that outlasted hold_timeout.
var errHoldTimeout = errors.New("not ready within hold_timeout")

// holdConn waits, without reading, for the wake of a stream connection:
// the client's bytes wait in the kernel's buffers meanwhile.
func (h *Handler) holdConn(op *lxc.WakeOp) error {
	timer := time.NewTimer(h.hold)
	defer timer.Stop()
	select {
	case <-op.Done():
		return op.Err()
	case <-timer.C:
		return errHoldTimeout
	}
}

// setUpstream tells the next handlers where the guest is.
func setUpstream(cx *layer4.Connection, up string, udp, cold bool) {
	if udp {
		up = "udp/" + up
	}
	repl := cx.Replacer()
	repl.Set(PlaceholderUpstream, up)
	repl.Set(PlaceholderColdStart, cold)
}

// isDatagram tells a UDP flow from a stream connection.
func isDatagram(cx *layer4.Connection) bool {
	switch cx.LocalAddr().(type) {
	case *net.UDPAddr:
		return true
	case *net.UnixAddr:
		return cx.LocalAddr().Network() == "unixgram"
	}
	return false
}

// Interface guards.
var (
	_ caddy.Provisioner  = (*Handler)(nil)
	_ caddy.Validator    = (*Handler)(nil)
	_ caddy.CleanerUpper = (*Handler)(nil)
	_ layer4.NextHandler = (*Handler)(nil)
)
