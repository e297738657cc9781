package wake

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-proxmox/caddy-proxmox/lxc"
)

// BusyIf is a busy_if rule: the guest counts as active (and is not
// stopped for idleness) while, averaged over Window, any threshold that
// is set is exceeded. The values come from the cluster poll
// (/cluster/resources, which PVE's pvestatd updates every 10 seconds):
// no API call is added.
type BusyIf struct {
	// CPUPercent is a percentage of the guest's own CPUs, as PVE's GUI
	// shows it ("10% of 4 CPUs").
	CPUPercent float64 `json:"cpu_percent,omitempty"`
	// NetBytesPerSec is network traffic in and out together.
	NetBytesPerSec float64 `json:"net_bytes_per_sec,omitempty"`
	// NetInBytesPerSec is traffic to the guest.
	NetInBytesPerSec float64 `json:"netin_bytes_per_sec,omitempty"`
	// NetOutBytesPerSec is traffic from the guest.
	NetOutBytesPerSec float64 `json:"netout_bytes_per_sec,omitempty"`
	// DiskBytesPerSec is disk reads and writes together.
	DiskBytesPerSec float64 `json:"disk_bytes_per_sec,omitempty"`
	// DiskReadBytesPerSec is disk reads.
	DiskReadBytesPerSec float64 `json:"diskread_bytes_per_sec,omitempty"`
	// DiskWriteBytesPerSec is disk writes.
	DiskWriteBytesPerSec float64 `json:"diskwrite_bytes_per_sec,omitempty"`
	// Window is the averaging period (1m). Give it a few of pvestatd's
	// 10-second rounds.
	Window caddy.Duration `json:"window,omitempty"`
}

func (b BusyIf) rule() lxc.BusyRule {
	return lxc.BusyRule{
		CPU: b.CPUPercent, Net: b.NetBytesPerSec, NetIn: b.NetInBytesPerSec, NetOut: b.NetOutBytesPerSec,
		Disk: b.DiskBytesPerSec, DiskRead: b.DiskReadBytesPerSec, DiskWrite: b.DiskWriteBytesPerSec,
		Window: time.Duration(b.Window),
	}
}

func busyIfOf(r lxc.BusyRule) *BusyIf {
	return &BusyIf{
		CPUPercent: r.CPU, NetBytesPerSec: r.Net, NetInBytesPerSec: r.NetIn, NetOutBytesPerSec: r.NetOut,
		DiskBytesPerSec: r.Disk, DiskReadBytesPerSec: r.DiskRead, DiskWriteBytesPerSec: r.DiskWrite,
		Window: caddy.Duration(r.Window),
	}
}

// watchStream counts a websocket or event stream as activity until end
// is called, and watches it for stream_idle_timeout: w and the request
// body are wrapped to see its bytes, and so is the connection of an
// upgrade (a websocket over HTTP/2 or HTTP/3 is a CONNECT whose client
// bytes come in the body, its server bytes through w).
func (h *WakeHandler) watchStream(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, func()) {
	s, end := h.guest.BeginStream()
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = &streamBody{ReadCloser: r.Body, s: s}
	}
	return &streamWriter{ResponseWriter: w, s: s}, end
}

// streamBody notes the bytes a client sends on a watched stream.
type streamBody struct {
	io.ReadCloser
	s *lxc.StreamActivity
}

func (b *streamBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.s.Touch()
	}
	return n, err
}

// streamWriter notes the traffic of a watched stream. It passes Flush
// and the rest on through Unwrap, and wraps a hijacked connection.
type streamWriter struct {
	http.ResponseWriter
	s *lxc.StreamActivity
}

func (w *streamWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	if n > 0 {
		w.s.Touch()
	}
	return n, err
}

// Unwrap lets http.ResponseController reach the writers below.
func (w *streamWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Hijack hands reverse_proxy the client connection of an upgrade,
// wrapped to see its bytes.
func (w *streamWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return conn, brw, err
	}
	return WatchConn(conn, w.s), brw, nil
}

// WatchConn wraps a stream's connection so that each byte read or
// written touches s. It keeps CloseWrite when conn has it: reverse_proxy
// and layer4's proxy half-close through it.
func WatchConn(conn net.Conn, s *lxc.StreamActivity) net.Conn {
	sc := streamConn{Conn: conn, s: s}
	if _, ok := conn.(interface{ CloseWrite() error }); ok {
		return &streamConnCW{sc}
	}
	return &sc
}

type streamConn struct {
	net.Conn
	s *lxc.StreamActivity
}

func (c *streamConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.s.Touch()
	}
	return n, err
}

func (c *streamConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.s.Touch()
	}
	return n, err
}

type streamConnCW struct{ streamConn }

func (c *streamConnCW) CloseWrite() error {
	return c.Conn.(interface{ CloseWrite() error }).CloseWrite()
}
