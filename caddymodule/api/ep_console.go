package api

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"

	"github.com/caddy-proxmox/caddy-proxmox/internal/wsstream"
	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// Console access (vncproxy, termproxy, vncwebsocket).
//
// POST vncproxy/termproxy mint a short-lived console ticket bound to the
// caller, the VM's ACL path and a pseudo port; GET vncwebsocket checks it,
// upgrades the connection and bridges it to the KubeVirt vnc or console
// subresource. The console kind is not in the ticket text: each kind signs
// with its own key, so a termproxy ticket never opens a VNC display.
// Tickets are single-use across replicas (kube.ConsoleClaims), and the
// task returned with the ticket lives as long as the session, as PVE's
// worker does (kube.GoalSession).

const (
	// consoleTaskType is PVE's worker type for both vncproxy and termproxy.
	consoleTaskType = "vncproxy"
	consolePortMin  = 5900
	consolePortMax  = 5999
	// maxLoginLine bounds termproxy's "<user>:<ticket>\n" line.
	maxLoginLine = 4096
	// maxTermMessage bounds one termproxy input message.
	maxTermMessage = 1 << 20
)

// errInvalidVNCTicket is PVE's refusal of a bad console ticket.
func errInvalidVNCTicket() *apiError {
	return newError(http.StatusUnauthorized, "Permission denied - invalid vnc ticket")
}

// consoleKey is the signing key of one console kind.
func (h *APIHandler) consoleKey(kind string) []byte {
	return subkey(h.auth.ticketKey, "pve-console-"+kind)
}

// claimExpiry is how long a used ticket's claim is kept: past the
// ticket's validity, with room for clocks that differ between replicas.
func claimExpiry(issued time.Time) time.Time {
	return issued.Add(translate.ConsoleTicketLifetime + translate.ConsoleTicketSkew + time.Minute)
}

func (h *APIHandler) postQemuVNCProxy(q *request) (any, *apiError) {
	if e := q.p.allowOnly("node", "vmid", "websocket", "generate-password"); e != nil {
		return nil, e
	}
	// websocket=0 asks PVE for a VNC-over-TLS TCP port; only the websocket
	// path (vncwebsocket) exists here, so the flag is accepted and ignored.
	if _, e := q.p.boolean("websocket", false); e != nil {
		return nil, e
	}
	genpw, e := q.p.boolean("generate-password", false)
	if e != nil {
		return nil, e
	}
	return h.consoleProxy(q, kube.ConsoleVNC, genpw)
}

func (h *APIHandler) postQemuTermProxy(q *request) (any, *apiError) {
	if e := q.p.allowOnly("node", "vmid", "serial"); e != nil {
		return nil, e
	}
	// KubeVirt attaches one serial console: serial0.
	if s, ok, e := q.p.str("serial"); e != nil {
		return nil, e
	} else if ok && s != "serial0" {
		return nil, paramErr("serial", "only serial0 exists on KubeVirt (got '%s')", s)
	}
	return h.consoleProxy(q, kube.ConsoleSerial, false)
}

// consoleRefusal checks that g can serve a console of kind now.
func consoleRefusal(g kube.Guest, kind string) *apiError {
	if !g.State().Running() || g.InstanceMeta() == nil {
		return notRunning(g)
	}
	dev := g.VMI().Spec.Domain.Devices
	if kind == kube.ConsoleVNC && dev.AutoattachGraphicsDevice != nil && !*dev.AutoattachGraphicsDevice {
		return newError(http.StatusInternalServerError, "VM %d has no display (autoattachGraphicsDevice is false)", g.VMID)
	}
	if kind == kube.ConsoleSerial && dev.AutoattachSerialConsole != nil && !*dev.AutoattachSerialConsole {
		return newError(http.StatusInternalServerError, "VM %d has no serial console (autoattachSerialConsole is false)", g.VMID)
	}
	return nil
}

func randomConsolePort() (int, error) {
	n, err := rand.Int(rand.Reader, big.NewInt(consolePortMax-consolePortMin+1))
	if err != nil {
		return 0, err
	}
	return consolePortMin + int(n.Int64()), nil
}

// consoleProxy answers vncproxy and termproxy. The port is only an
// identifier bound into the ticket (nothing listens on it). The task runs
// until the session ends, or ends after kube.SessionConnectTimeout if no
// client connects (kube.GoalSession).
func (h *APIHandler) consoleProxy(q *request, kind string, genpw bool) (any, *apiError) {
	g, e := h.guest(q)
	if e != nil {
		return nil, e
	}
	if e := consoleRefusal(g, kind); e != nil {
		return nil, e
	}
	port, err := randomConsolePort()
	if err != nil {
		return nil, newError(http.StatusInternalServerError, "allocating a console port: %v", err)
	}
	user := q.id.ID()
	// A random id keeps two tickets for the same caller, VM and port in
	// the same second apart: each is used once and names its own task.
	id, err := randomAlnum(16)
	if err != nil {
		return nil, newError(http.StatusInternalServerError, "generating a ticket id: %v", err)
	}
	ticket := translate.SignConsoleTicketID(h.consoleKey(kind), id, user, fmt.Sprintf("/vms/%d", g.VMID), port, time.Now())
	what := "VNC"
	if kind == kube.ConsoleSerial {
		what = "serial console"
	}
	spec := h.taskSpec(q, g, consoleTaskType, kube.GoalSession, kube.SessionConnectTimeout,
		fmt.Sprintf("%s session for VM %d (%s/%s) on port %d, through vncwebsocket", what, g.VMID, g.Namespace(), g.Name(), port))
	spec.Object = kube.TicketKey(ticket)
	upid, e := h.beginSpec(q, spec)
	if e != nil {
		return nil, e
	}
	res := map[string]any{"user": user, "ticket": ticket, "port": strconv.Itoa(port), "upid": upid}
	if kind == kube.ConsoleVNC {
		// PVE sends the node certificate; Caddy's is not reachable from a
		// handler, and websocket clients do not use it.
		res["cert"] = ""
		if genpw {
			pw, err := randomAlnum(8)
			if err != nil {
				return nil, newError(http.StatusInternalServerError, "generating a password: %v", err)
			}
			res["password"] = pw
			res["ticket"] = pw + ":" + ticket
		}
	}
	return res, nil
}

// randomAlnum returns n random letters and digits: an 8-character VNC
// password like PVE's, or a ticket id.
func randomAlnum(n int) (string, error) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	for i := range b {
		n, err := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
		if err != nil {
			return "", err
		}
		b[i] = alphabet[n.Int64()]
	}
	return string(b), nil
}

// getQemuVNCWebsocket is GET vncwebsocket: it takes the connection over and,
// once it has, answers nothing more (a session route).
func (h *APIHandler) getQemuVNCWebsocket(q *request) (any, *apiError) {
	if e := q.p.allowOnly("node", "vmid", "port", "vncticket"); e != nil {
		return nil, e
	}
	g, e := h.guest(q)
	if e != nil {
		return nil, e
	}
	port, e := q.p.integer("port", -1, consolePortMin, consolePortMax)
	if e != nil {
		return nil, e
	}
	vncticket, ok, e := q.p.str("vncticket")
	if e != nil {
		return nil, e
	}
	if port < 0 || !ok || vncticket == "" {
		errs := map[string]string{}
		if port < 0 {
			errs["port"] = "property is missing and it is not optional"
		}
		if !ok || vncticket == "" {
			errs["vncticket"] = "property is missing and it is not optional"
		}
		return nil, paramError(errs)
	}
	user := q.id.ID()
	path := fmt.Sprintf("/vms/%d", g.VMID)
	now := time.Now()
	kind := ""
	var verr error
	var issued time.Time
	for _, k := range []string{kube.ConsoleVNC, kube.ConsoleSerial} {
		at, err := translate.VerifyConsoleTicket(h.consoleKey(k), vncticket, user, path, int(port), now)
		if err == nil {
			kind, issued = k, at
			break
		}
		// Keep the most telling reason: a signature mismatch under the
		// other kind's key says nothing.
		if verr == nil || !errors.Is(err, translate.ErrTicketSignature) {
			verr = err
		}
	}
	if kind == "" {
		h.logger.Info("console ticket refused", zap.String("user", user), zap.String("path", path), zap.Int64("port", port), zap.Error(verr))
		return nil, errInvalidVNCTicket()
	}
	// A plain GET must not use the ticket up.
	if !websocket.IsWebSocketUpgrade(q.r) {
		return nil, newError(http.StatusBadRequest, "websocket upgrade required")
	}
	bare := translate.StripConsolePassword(vncticket)
	first, err := q.c.ConsoleClaims.Claim(q.ctx(), bare, claimExpiry(issued))
	if err != nil {
		h.logger.Warn("console ticket not checked", zap.String("user", user), zap.String("path", path), zap.Error(err))
		return nil, newError(http.StatusInternalServerError, "unable to check the console ticket: %v", err)
	}
	if !first {
		h.logger.Info("console ticket refused", zap.String("user", user), zap.String("path", path), zap.Int64("port", port), zap.String("reason", "already used"))
		return nil, errInvalidVNCTicket()
	}
	session, e := h.attachSession(q, g, bare)
	if e != nil {
		return nil, e
	}
	if e := consoleRefusal(g, kind); e != nil {
		session.end(e.Message)
		return nil, e
	}
	stream, err := q.c.OpenConsole(q.ctx(), g, kind)
	if err != nil {
		e := consoleError(g, err)
		session.end(e.Message)
		return nil, e
	}
	up := websocket.Upgrader{
		// The ticket, obtained with a CSRF-protected POST, authorizes the
		// connection; pveproxy does not check the origin either.
		CheckOrigin: func(*http.Request) bool { return true },
	}
	var hdr http.Header
	if proto := pickSubprotocol(websocket.Subprotocols(q.r)); proto != "" {
		hdr = http.Header{"Sec-Websocket-Protocol": {proto}}
	}
	conn, err := up.Upgrade(q.w, q.r, hdr)
	if err != nil {
		_ = stream.Close()
		session.end("websocket upgrade failed: " + err.Error())
		return nil, nil // the upgrader answered
	}
	// The upgrader wrote its 101 on the hijacked connection; Caddy's access
	// log and metrics learn it only from WriteHeader.
	q.w.WriteHeader(http.StatusSwitchingProtocols)
	h.logger.Info("console session started", zap.String("user", user), zap.String("vm", g.Namespace()+"/"+g.Name()), zap.String("kind", kind))
	browser := wsstream.New(conn)
	if kind == kube.ConsoleVNC {
		err = stream.Stream(browser, browser)
	} else {
		err = termSession(browser, stream, user, vncticket)
	}
	_ = conn.Close()
	// A session ends when either side hangs up; that is its normal end.
	exit := translate.ExitOK
	if errors.Is(err, errTermLogin) {
		exit = err.Error()
	}
	session.end(exit)
	h.logger.Info("console session ended", zap.String("user", user), zap.String("vm", g.Namespace()+"/"+g.Name()), zap.String("kind", kind), zap.Error(err))
	return nil, nil
}

// pickSubprotocol echoes noVNC's and xterm.js's "binary" when offered,
// else the first protocol offered, as pveproxy echoes what it gets.
func pickSubprotocol(offered []string) string {
	for _, p := range offered {
		if p == "binary" {
			return p
		}
	}
	if len(offered) > 0 {
		return offered[0]
	}
	return ""
}

// consoleError answers a failed connection to the console subresource.
func consoleError(g kube.Guest, err error) *apiError {
	if errors.Is(err, kube.ErrNoConsole) {
		return newError(http.StatusNotImplemented, "%v", err)
	}
	if msg, ok := kube.StatusMessage(err); ok {
		return newError(http.StatusInternalServerError, "connecting to the console of VM %d failed: %s", g.VMID, msg)
	}
	if kube.IsDenied(err) {
		return kubeDenied(err)
	}
	if errors.Is(err, kube.ErrConsoleNotServed) {
		return newError(http.StatusBadGateway, "connecting to the console of VM %d failed: KubeVirt's virt-api answered 404 (is subresources.kubevirt.io served?)", g.VMID)
	}
	return newError(http.StatusInternalServerError, "connecting to the console of VM %d failed: %v", g.VMID, err)
}

// errTermLogin ends a termproxy session whose login line is wrong.
var errTermLogin = errors.New("termproxy: authentication failed (the login line does not match the websocket's user and ticket)")

// termSession speaks termproxy's protocol to xterm.js: the first line is
// "<user>:<ticket>\n", answered "OK"; then input arrives as "0:<len>:<data>",
// resizes as "1:<cols>:<rows>:" and pings as "2", parsed as a byte stream.
// Only input reaches the serial line; output passes through raw.
func termSession(browser *wsstream.Conn, stream *kube.Console, user, ticket string) error {
	br := bufio.NewReader(browser)
	line, err := readLoginLine(br)
	if err != nil {
		_ = stream.Close()
		return err
	}
	u, t, _ := strings.Cut(line, ":")
	if subtle.ConstantTimeCompare([]byte(u), []byte(user)) != 1 || subtle.ConstantTimeCompare([]byte(t), []byte(ticket)) != 1 {
		_ = stream.Close()
		return errTermLogin
	}
	if _, err := browser.Write([]byte("OK")); err != nil {
		_ = stream.Close()
		return err
	}
	return stream.Stream(&termInput{r: br}, browser)
}

func readLoginLine(br *bufio.Reader) (string, error) {
	var b []byte
	for len(b) <= maxLoginLine {
		c, err := br.ReadByte()
		if err != nil {
			return "", err
		}
		if c == '\n' {
			return string(b), nil
		}
		b = append(b, c)
	}
	return "", errors.New("termproxy login line too long")
}

// termInput turns termproxy client messages into the bytes typed.
type termInput struct {
	r       *bufio.Reader
	pending int // data bytes left in the current input message
}

func (t *termInput) Read(p []byte) (int, error) {
	for {
		if t.pending > 0 {
			if len(p) > t.pending {
				p = p[:t.pending]
			}
			n, err := t.r.Read(p)
			t.pending -= n
			return n, err
		}
		typ, err := t.r.ReadByte()
		if err != nil {
			return 0, err
		}
		switch typ {
		case '0':
			if err := t.expect(':'); err != nil {
				return 0, err
			}
			n, err := t.number(maxTermMessage)
			if err != nil {
				return 0, err
			}
			t.pending = n
		case '1':
			if err := t.expect(':'); err != nil {
				return 0, err
			}
			// Resizing means nothing to a serial line.
			if _, err := t.number(1 << 16); err != nil {
				return 0, err
			}
			if _, err := t.number(1 << 16); err != nil {
				return 0, err
			}
		case '2':
			// ping
		default:
			return 0, fmt.Errorf("termproxy: unknown message type %q", typ)
		}
	}
}

func (t *termInput) expect(c byte) error {
	got, err := t.r.ReadByte()
	if err != nil {
		return err
	}
	if got != c {
		return fmt.Errorf("termproxy: expected %q, got %q", c, got)
	}
	return nil
}

// number reads decimal digits up to a ':' and checks the bound.
func (t *termInput) number(max int) (int, error) {
	n, digits := 0, 0
	for {
		c, err := t.r.ReadByte()
		if err != nil {
			return 0, err
		}
		if c == ':' && digits > 0 {
			return n, nil
		}
		if c < '0' || c > '9' || digits >= 8 {
			return 0, fmt.Errorf("termproxy: bad number")
		}
		n = n*10 + int(c-'0')
		digits++
		if n > max {
			return 0, fmt.Errorf("termproxy: %d exceeds %d", n, max)
		}
	}
}

// consoleSession is the task of an open console session (nil: the ticket
// has no task, e.g. one minted by an older version during an upgrade).
type consoleSession struct {
	s *kube.Session
}

// end ends the session's task with exit; it is safe on nil.
func (c *consoleSession) end(exit string) {
	if c == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c.s.End(ctx, exit)
}

// attachSession marks the vncproxy/termproxy task of the ticket as
// connected, so that it runs for as long as the session. Like PVE's
// worker, which stops listening after 10 s, a task that ended because the
// client came too late refuses the connection.
func (h *APIHandler) attachSession(q *request, g kube.Guest, ticket string) (*consoleSession, *apiError) {
	s, err := q.c.Tasks.AttachSession(q.ctx(), kube.TicketKey(ticket))
	switch {
	case err == nil:
		return &consoleSession{s: s}, nil
	case errors.Is(err, kube.ErrNoSuchTask):
		h.logger.Info("console session without a task", zap.String("vm", g.Namespace()+"/"+g.Name()))
		return nil, nil
	case errors.Is(err, kube.ErrSessionEnded):
		return nil, newError(http.StatusInternalServerError, "console of VM %d unavailable: %v", g.VMID, err)
	default:
		return nil, newError(http.StatusInternalServerError, "recording the console session of VM %d: %v", g.VMID, err)
	}
}
