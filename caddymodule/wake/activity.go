package wake

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

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

// activityConfig adds busy_if, pre_stop_check and stream_idle_timeout to
// the guest config.
func (h *WakeHandler) activityConfig(cfg *lxc.GuestConfig) {
	for _, b := range h.BusyIf {
		if b != nil {
			cfg.BusyIf = append(cfg.BusyIf, b.rule())
		}
	}
	cfg.PreStopCheck = h.PreStopCheck
	cfg.PreStopTimeout = time.Duration(h.PreStopTimeout)
	cfg.StreamIdleTimeout = time.Duration(h.StreamIdleTimeout)
}

// unmarshalMore reads the options of activity.go and page_template.go;
// known is false for an option it does not know.
func (m *WakeHandler) unmarshalMore(d *caddyfile.Dispenser, opt string) (known bool, err error) {
	switch opt {
	case "busy_if":
		args := d.RemainingArgs()
		if len(args) == 0 {
			return true, d.ArgErr()
		}
		r, err := lxc.ParseBusyIf(strings.Join(args, " "))
		if err != nil {
			return true, d.Err(err.Error())
		}
		m.BusyIf = append(m.BusyIf, busyIfOf(r))
	case "pre_stop_check":
		args := d.RemainingArgs()
		if len(args) < 1 || len(args) > 2 {
			return true, d.ArgErr()
		}
		m.PreStopCheck = args[0]
		if len(args) == 2 {
			dur, err := caddy.ParseDuration(args[1])
			if err != nil {
				return true, d.Errf("bad duration '%s': %v", args[1], err)
			}
			m.PreStopTimeout = caddy.Duration(dur)
		}
	case "stream_idle_timeout":
		dur, err := durationArg(d)
		if err != nil {
			return true, err
		}
		m.StreamIdleTimeout = caddy.Duration(dur)
	case "page":
		if !d.NextArg() {
			return true, d.ArgErr()
		}
		m.Page = d.Val()
		if d.NextArg() {
			return true, d.ArgErr()
		}
	case "use_handle_errors":
		if d.NextArg() {
			return true, d.ArgErr()
		}
		m.UseHandleErrors = true
	default:
		return false, nil
	}
	return true, nil
}

// beginActivity counts the request as activity until end is called. With
// stream_idle_timeout, a websocket or event stream is watched: w and the
// request body are wrapped to see its bytes, and so is the connection
// of an upgrade. A CONNECT is a stream too (a websocket over HTTP/2 or
// HTTP/3, whose client bytes come in the body).
func (h *WakeHandler) beginActivity(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, func()) {
	stream := isStream(r) || r.Method == http.MethodConnect
	if !stream || h.StreamIdleTimeout <= 0 {
		return w, h.guest.Begin(stream)
	}
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
	sc := streamConn{Conn: conn, s: w.s}
	if _, ok := conn.(interface{ CloseWrite() error }); ok {
		// reverse_proxy half-closes through CloseWrite when it has it.
		return &streamConnCW{sc}, brw, nil
	}
	return &sc, brw, nil
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
