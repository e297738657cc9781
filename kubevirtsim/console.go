package kubevirtsim

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/internal/wsstream"

	"github.com/gorilla/websocket"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubevirt"
)

// PlainStreamProtocol is the websocket subprotocol virt-api speaks on the
// vnc and console subresources: raw bytes in binary frames.
const PlainStreamProtocol = "plain.kubevirt.io"

// Simulated display: a small framebuffer with four colour bars (red,
// green, blue, white) over its top half and grey below, so that a client
// that draws it shows whether it decoded position and colour right.
const (
	SimFramebufferWidth  = 64
	SimFramebufferHeight = 48
	SimDisplayName       = "kubevirtsim"
)

// SimScreenPixel is the colour the simulated display shows at (x, y).
func SimScreenPixel(x, y int) (r, g, b uint8) {
	if y >= SimFramebufferHeight/2 {
		return 0x80, 0x80, 0x80
	}
	switch x * 4 / SimFramebufferWidth {
	case 0:
		return 0xff, 0, 0
	case 1:
		return 0, 0xff, 0
	case 2:
		return 0, 0, 0xff
	}
	return 0xff, 0xff, 0xff
}

// pixelFormat is RFB's PIXEL_FORMAT (true colour only).
type pixelFormat struct {
	bytesPerPixel                   int
	bigEndian                       bool
	redMax, greenMax, blueMax       uint32
	redShift, greenShift, blueShift uint8
}

// serverPixelFormat is what ServerInit announces: 32 bpp, depth 24,
// little endian, true colour, 8 bits per channel at shifts 16/8/0.
var serverPixelFormat = pixelFormat{bytesPerPixel: 4, redMax: 255, greenMax: 255, blueMax: 255, redShift: 16, greenShift: 8}

// wire is the PIXEL_FORMAT structure (16 bytes).
func (f pixelFormat) wire() []byte {
	be := byte(0)
	if f.bigEndian {
		be = 1
	}
	b := []byte{byte(f.bytesPerPixel * 8), 24, be, 1}
	b = binary.BigEndian.AppendUint16(b, uint16(f.redMax))
	b = binary.BigEndian.AppendUint16(b, uint16(f.greenMax))
	b = binary.BigEndian.AppendUint16(b, uint16(f.blueMax))
	return append(b, f.redShift, f.greenShift, f.blueShift, 0, 0, 0)
}

// parsePixelFormat reads SetPixelFormat's PIXEL_FORMAT; ok is false for
// formats QEMU would refuse too (bits per pixel other than 8, 16 or 32).
func parsePixelFormat(b []byte) (pixelFormat, bool) {
	bpp := int(b[0]) / 8
	if int(b[0])%8 != 0 || (bpp != 1 && bpp != 2 && bpp != 4) {
		return pixelFormat{}, false
	}
	return pixelFormat{
		bytesPerPixel: bpp,
		bigEndian:     b[2] != 0,
		redMax:        uint32(binary.BigEndian.Uint16(b[4:])),
		greenMax:      uint32(binary.BigEndian.Uint16(b[6:])),
		blueMax:       uint32(binary.BigEndian.Uint16(b[8:])),
		redShift:      b[10],
		greenShift:    b[11],
		blueShift:     b[12],
	}, true
}

// appendPixel encodes one colour in the client's format.
func (f pixelFormat) appendPixel(dst []byte, r, g, b uint8) []byte {
	v := uint32(r)*f.redMax/255<<f.redShift | uint32(g)*f.greenMax/255<<f.greenShift | uint32(b)*f.blueMax/255<<f.blueShift
	switch f.bytesPerPixel {
	case 1:
		return append(dst, byte(v))
	case 2:
		if f.bigEndian {
			return binary.BigEndian.AppendUint16(dst, uint16(v))
		}
		return binary.LittleEndian.AppendUint16(dst, uint16(v))
	}
	if f.bigEndian {
		return binary.BigEndian.AppendUint32(dst, v)
	}
	return binary.LittleEndian.AppendUint32(dst, v)
}

// ConsoleServer stands in for virt-api's console websockets:
//
//	GET /apis/subresources.kubevirt.io/{v1,v1alpha3}/namespaces/{ns}/virtualmachineinstances/{name}/vnc
//	GET /apis/subresources.kubevirt.io/{v1,v1alpha3}/namespaces/{ns}/virtualmachineinstances/{name}/console
//
// vnc speaks a scripted RFB 3.8 server with security type None (as QEMU's
// VNC server under KubeVirt) that sends a raw-encoded framebuffer on every
// non-incremental update request; console is an echo TTY (carriage return
// echoes as CR LF). Like virt-api it refuses instances that do not run or
// lack the device, and keeps one session per instance and kind: a new
// connection ends the previous one.
type ConsoleServer struct {
	kv kubevirt.Interface
	// getVMI reads a VMI; nil: a GET with kv.
	getVMI func(ctx context.Context, ns, name string) (*virtv1.VirtualMachineInstance, error)

	mu     sync.Mutex
	active map[string]*websocket.Conn

	// ln and srv start with the first Dial, under mu; closed refuses
	// Dials after Close, which would leave a server nobody stops.
	ln     *pipeListener
	srv    *http.Server
	closed bool
}

// NewConsoleServer serves the console subresources of the VMIs in kv.
func NewConsoleServer(kv kubevirt.Interface) *ConsoleServer {
	return &ConsoleServer{kv: kv, active: map[string]*websocket.Conn{}}
}

func parseConsolePath(p string) (ns, name, kind string, ok bool) {
	rest, found := strings.CutPrefix(p, groupPath+"/")
	if !found {
		return "", "", "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 6 || !isSubresourceVersion(parts[0]) || parts[1] != "namespaces" || parts[3] != "virtualmachineinstances" ||
		parts[2] == "" || parts[4] == "" || (parts[5] != "vnc" && parts[5] != "console") {
		return "", "", "", false
	}
	return parts[2], parts[4], parts[5], true
}

func consoleRefused(msg string) error {
	return apierrors.NewBadRequest(msg)
}

// ServeHTTP upgrades a console request and runs the session.
func (s *ConsoleServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ns, name, kind, ok := parseConsolePath(r.URL.Path)
	if !ok {
		writeStatus(w, notFound())
		return
	}
	s.serve(w, r, ns, name, kind)
}

// serve runs a console session of kind (vnc or console) with the VMI ns/name.
func (s *ConsoleServer) serve(w http.ResponseWriter, r *http.Request, ns, name, kind string) {
	if r.Method != http.MethodGet {
		writeStatus(w, methodNotAllowed(r.Method))
		return
	}
	get := s.getVMI
	if get == nil {
		get = func(ctx context.Context, ns, name string) (*virtv1.VirtualMachineInstance, error) {
			return s.kv.KubevirtV1().VirtualMachineInstances(ns).Get(ctx, name, metav1.GetOptions{})
		}
	}
	vmi, err := get(r.Context(), ns, name)
	if err != nil {
		writeStatus(w, err)
		return
	}
	if vmi.Status.Phase != virtv1.Running {
		writeStatus(w, consoleRefused(fmt.Sprintf("Unable to connect to VM because phase is %s instead of Running", vmi.Status.Phase)))
		return
	}
	dev := vmi.Spec.Domain.Devices
	if kind == "vnc" && dev.AutoattachGraphicsDevice != nil && !*dev.AutoattachGraphicsDevice {
		writeStatus(w, consoleRefused("No graphics devices are present."))
		return
	}
	if kind == "console" && dev.AutoattachSerialConsole != nil && !*dev.AutoattachSerialConsole {
		writeStatus(w, consoleRefused("No serial consoles are present."))
		return
	}
	up := websocket.Upgrader{Subprotocols: []string{PlainStreamProtocol}, CheckOrigin: func(*http.Request) bool { return true }}
	conn, err := up.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader answered
	}
	key := ns + "/" + name + "/" + kind
	s.mu.Lock()
	if old := s.active[key]; old != nil {
		_ = old.Close()
	}
	s.active[key] = conn
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.active[key] == conn {
			delete(s.active, key)
		}
		s.mu.Unlock()
		_ = conn.Close()
	}()
	rw := wsstream.New(conn)
	if kind == "vnc" {
		_ = serveRFB(bufio.NewReader(rw), rw)
		return
	}
	_ = serveEchoTTY(rw, rw)
}

// Dial opens a console websocket to s in-process (no network): the
// simulator's replacement for kvcorev1.AsyncSubresourceHelper. Its
// signature matches what kube.Simulate dials consoles with.
func (s *ConsoleServer) Dial(ctx context.Context, ns, name, kind string) (*websocket.Conn, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errors.New("console server closed")
	}
	if s.srv == nil {
		s.ln = newPipeListener()
		s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
		go func(srv *http.Server, ln *pipeListener) { _ = srv.Serve(ln) }(s.srv, s.ln)
	}
	ln := s.ln
	s.mu.Unlock()
	d := websocket.Dialer{
		NetDialContext:   func(ctx context.Context, _, _ string) (net.Conn, error) { return ln.dial(ctx) },
		Subprotocols:     []string{PlainStreamProtocol},
		HandshakeTimeout: 10 * time.Second,
	}
	u := "ws://virt-api.kubevirtsim" + groupPath + "/" + virtv1.ApiStorageVersion + "/namespaces/" + ns + "/virtualmachineinstances/" + name + "/" + kind
	conn, resp, err := d.DialContext(ctx, u, nil)
	if err != nil {
		if resp != nil {
			defer resp.Body.Close()
			var st metav1.Status
			if body, rerr := io.ReadAll(io.LimitReader(resp.Body, 1<<16)); rerr == nil && json.Unmarshal(body, &st) == nil && st.Kind == "Status" {
				return nil, &apierrors.StatusError{ErrStatus: st}
			}
			return nil, fmt.Errorf("console websocket: %s: %w", resp.Status, err)
		}
		return nil, err
	}
	return conn, nil
}

// Close stops the in-process listener and ends every session.
func (s *ConsoleServer) Close() error {
	s.mu.Lock()
	s.closed = true
	for k, c := range s.active {
		_ = c.Close()
		delete(s.active, k)
	}
	srv := s.srv
	s.mu.Unlock()
	if srv != nil {
		return srv.Close()
	}
	return nil
}

// serveEchoTTY echoes input like a terminal in echo mode.
func serveEchoTTY(r io.Reader, w io.Writer) error {
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			out := strings.ReplaceAll(string(buf[:n]), "\r", "\r\n")
			if _, werr := io.WriteString(w, out); werr != nil {
				return werr
			}
		}
		if err != nil {
			return err
		}
	}
}

// serveRFB runs the server side of RFB 3.8 with security type None: the
// handshake, ServerInit, and raw framebuffer updates on request. Client
// messages it does not know end the session, as they would desynchronise
// the stream.
func serveRFB(r *bufio.Reader, w io.Writer) error {
	if _, err := io.WriteString(w, "RFB 003.008\n"); err != nil {
		return err
	}
	ver := make([]byte, 12)
	if _, err := io.ReadFull(r, ver); err != nil {
		return err
	}
	if !strings.HasPrefix(string(ver), "RFB 003.") {
		return fmt.Errorf("bad client version %q", ver)
	}
	if _, err := w.Write([]byte{1, 1}); err != nil { // one security type: None
		return err
	}
	sec, err := r.ReadByte()
	if err != nil {
		return err
	}
	if sec != 1 {
		reason := "security type not offered"
		msg := binary.BigEndian.AppendUint32([]byte{0, 0, 0, 1}, uint32(len(reason)))
		_, _ = w.Write(append(msg, reason...))
		return errors.New(reason)
	}
	if _, err := w.Write([]byte{0, 0, 0, 0}); err != nil { // SecurityResult OK
		return err
	}
	if _, err := r.ReadByte(); err != nil { // ClientInit (shared flag)
		return err
	}
	pf := serverPixelFormat
	init := binary.BigEndian.AppendUint16(nil, SimFramebufferWidth)
	init = binary.BigEndian.AppendUint16(init, SimFramebufferHeight)
	init = append(init, pf.wire()...)
	init = binary.BigEndian.AppendUint32(init, uint32(len(SimDisplayName)))
	init = append(init, SimDisplayName...)
	if _, err := w.Write(init); err != nil {
		return err
	}
	skip := func(n int) error { _, err := r.Discard(n); return err }
	for {
		typ, err := r.ReadByte()
		if err != nil {
			return err
		}
		switch typ {
		case 0: // SetPixelFormat: 3 bytes padding, then PIXEL_FORMAT
			msg := make([]byte, 19)
			if _, err := io.ReadFull(r, msg); err != nil {
				return err
			}
			if f, ok := parsePixelFormat(msg[3:]); ok {
				pf = f
			}
		case 2: // SetEncodings
			hdr := make([]byte, 3)
			if _, err := io.ReadFull(r, hdr); err != nil {
				return err
			}
			if err := skip(4 * int(binary.BigEndian.Uint16(hdr[1:]))); err != nil {
				return err
			}
		case 3: // FramebufferUpdateRequest
			req := make([]byte, 9)
			if _, err := io.ReadFull(r, req); err != nil {
				return err
			}
			if req[0] != 0 {
				continue // incremental: the screen never changes
			}
			if err := writeFramebuffer(w, pf); err != nil {
				return err
			}
		case 4: // KeyEvent
			if err := skip(7); err != nil {
				return err
			}
		case 5: // PointerEvent
			if err := skip(5); err != nil {
				return err
			}
		case 6: // ClientCutText
			hdr := make([]byte, 7)
			if _, err := io.ReadFull(r, hdr); err != nil {
				return err
			}
			if err := skip(int(binary.BigEndian.Uint32(hdr[3:]))); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unsupported RFB client message %d", typ)
		}
	}
}

// writeFramebuffer sends the whole screen as one raw rectangle in the
// client's pixel format.
func writeFramebuffer(w io.Writer, pf pixelFormat) error {
	msg := []byte{0, 0, 0, 1} // FramebufferUpdate, padding, one rectangle
	msg = binary.BigEndian.AppendUint16(msg, 0)
	msg = binary.BigEndian.AppendUint16(msg, 0)
	msg = binary.BigEndian.AppendUint16(msg, SimFramebufferWidth)
	msg = binary.BigEndian.AppendUint16(msg, SimFramebufferHeight)
	msg = binary.BigEndian.AppendUint32(msg, 0) // Raw encoding
	for y := 0; y < SimFramebufferHeight; y++ {
		for x := 0; x < SimFramebufferWidth; x++ {
			r, g, b := SimScreenPixel(x, y)
			msg = pf.appendPixel(msg, r, g, b)
		}
	}
	_, err := w.Write(msg)
	return err
}

// pipeListener is a net.Listener whose connections are in-memory pipes.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) dial(ctx context.Context) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.closed:
	case <-ctx.Done():
	}
	_ = client.Close()
	_ = server.Close()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, net.ErrClosed
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "kubevirtsim-console" }
