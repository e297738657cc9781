package wake

import (
	"cmp"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/caddy-proxmox/caddy-proxmox/lxc"
)

func init() {
	caddy.RegisterModule(WakeHandler{})
}

// WakeHandler (proxmox_wake) wakes a stopped Proxmox VE guest when a
// request arrives, and passes requests on (to reverse_proxy with
// "dynamic proxmox") once it is ready. Browsers navigating get a loading
// page with live progress at once; every other request is held until the
// guest is ready, for at most hold_timeout, then answered 503 (or 504)
// with Retry-After. The guest is stopped once no request has been in
// flight (websockets and streams included) for idle_timeout.
type WakeHandler struct {
	// Guest is "<cluster>/<vmid>" or "<cluster>/<name>". The guest part
	// may hold placeholders ("lab/{labels.2}"), resolved per request:
	// then only guests carrying Tag are served, others get a 404.
	Guest string `json:"guest"`
	// Tag is the Proxmox tag a guest needs to be served through a
	// placeholder reference (caddy-wake); its caddy-<option>-<value> tags
	// override port, idle_timeout, wake_timeout, probe and stop_method.
	Tag string `json:"tag,omitempty"`
	// GuestOptions are how the guest is woken, checked and put to sleep
	// (shared with the layer4 handler).
	GuestOptions
	// Mode is auto (browsers get the loading page, others are held),
	// page (everyone gets the page, but websockets and event streams are
	// held) or hold (nobody does).
	Mode string `json:"mode,omitempty"`
	// IgnoreRaw are matcher sets for requests that neither wake the
	// guest nor count as activity (health checks, bots): they are passed
	// on when the guest is ready, else answered 503.
	IgnoreRaw caddyhttp.RawMatcherSets `json:"ignore,omitempty" caddy:"namespace=http.matchers"`
	// EventsPath is the reserved path of the progress stream
	// (/.well-known/proxmox-wake/events).
	EventsPath string `json:"events_path,omitempty"`
	// ShowDetails puts node names, addresses and the cluster's error text
	// on the loading page, the progress stream and the held requests'
	// answers. Off, visitors read what failed in general words and the
	// details go to the log and the admin API only.
	ShowDetails bool `json:"show_details,omitempty"`
	// Page is a file with an html/template for the loading and error
	// page that browsers get, read when the config loads. It is given
	// .Name (the guest's public name), .State, .Message, .Error,
	// .EventsPath, .Refresh (the retry time in seconds, also
	// .RetryAfter) and .Progress. The status code, Cache-Control:
	// no-store and Retry-After stay the handler's.
	Page string `json:"page,omitempty"`
	// UseHandleErrors hands the handler's error answers (a failed wake,
	// a hold that timed out, too many waiting requests, an ignored
	// request while the guest sleeps) to the site's handle_errors routes
	// as a 503 or 504 error instead of answering itself; the loading page
	// stays the handler's. {http.proxmox_wake.*} placeholders describe
	// the guest.
	UseHandleErrors bool `json:"use_handle_errors,omitempty"`

	// namedIgnores wait for FinalizeUnmarshalCaddyfile (Caddyfile only).
	namedIgnores []namedIgnore
	ignore       caddyhttp.MatcherSets
	binding      *lxc.Binding
	guest        *lxc.Guest
	hold         time.Duration
	// port is Port with its default: the guest's Upstream(0) would give
	// the port of whichever handler of the guest was provisioned last.
	port   int
	logger *zap.Logger

	// dynamic resolves a reference with placeholders (binding and guest
	// are then nil; each request gets a copy bound to its guest).
	dynamic *dynamicGuests
	// page is Page, parsed (nil: the built-in page).
	page *template.Template
}

// Response header marking how a request met the guest: "cold" when it
// waited for a wake, "loading" on the loading page.
const wakeHeader = "X-Proxmox-Wake"

// Context variables for the proxmox dynamic upstreams.
const (
	wakeVarGuest    = "proxmox.guest"
	wakeVarUpstream = "proxmox.upstream"
)

const defaultEventsPath = "/.well-known/proxmox-wake/events"

// CaddyModule returns the Caddy module information.
func (WakeHandler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.proxmox_wake",
		New: func() caddy.Module { return new(WakeHandler) },
	}
}

// Provision binds the handler to its guest's shared runtime. It contacts
// nothing and never starts or stops the guest.
func (h *WakeHandler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	if err := h.Validate(); err != nil {
		return err
	}
	cfg, _ := h.GuestConfig()
	h.port = cfg.Port
	h.hold = time.Duration(h.HoldTimeout)
	if h.hold == 0 {
		h.hold = time.Minute
	}
	// A wake ends by wake_timeout; the margin lets a held request get the
	// wake's own verdict (504) rather than a hold timeout at that moment.
	h.hold = min(h.hold, cfg.WakeTimeout+500*time.Millisecond)
	if h.EventsPath == "" {
		h.EventsPath = defaultEventsPath
	}
	if err := h.loadPage(); err != nil {
		return err
	}
	if h.IgnoreRaw != nil {
		mods, err := ctx.LoadModule(h, "IgnoreRaw")
		if err != nil {
			return fmt.Errorf("proxmox_wake: loading ignore matchers: %w", err)
		}
		if err := h.ignore.FromInterface(mods); err != nil {
			return fmt.Errorf("proxmox_wake: ignore matchers: %w", err)
		}
	}
	cluster, ref, _ := splitGuest(h.Guest)
	appIface, err := ctx.AppIfConfigured("proxmox")
	if err != nil {
		if errors.Is(err, caddy.ErrNotConfigured) {
			return fmt.Errorf("proxmox_wake %s: no proxmox global option: add proxmox { cluster %s { ... } }", h.Guest, cluster)
		}
		return fmt.Errorf("proxmox_wake: %w", err)
	}
	c, err := appIface.(*ProxmoxApp).Cluster(cluster)
	if err != nil {
		return fmt.Errorf("proxmox_wake %s: %w", h.Guest, err)
	}
	if hasPlaceholder(ref) {
		h.dynamic = newDynamicGuests(c, ref, cmp.Or(h.Tag, lxc.DefaultOptInTag), cfg, h.logger)
		return nil
	}
	b, err := lxc.AcquireGuest(c, ref, cfg, h.logger)
	if err != nil {
		return fmt.Errorf("proxmox_wake %s: %w", h.Guest, err)
	}
	h.binding, h.guest = b, b.Guest()
	return nil
}

// Validate checks the configuration; it changes nothing.
func (h *WakeHandler) Validate() error {
	if _, _, err := splitGuest(h.Guest); err != nil {
		return fmt.Errorf("proxmox_wake: %w", err)
	}
	switch h.Mode {
	case "", "auto", "page", "hold":
	default:
		return fmt.Errorf("proxmox_wake: mode %q must be auto, page or hold", h.Mode)
	}
	if h.Probe == lxc.ProbeUDP {
		return fmt.Errorf("proxmox_wake %s: %s", h.Guest, errProbeUDP)
	}
	if h.EventsPath != "" && !strings.HasPrefix(h.EventsPath, "/") {
		return fmt.Errorf("proxmox_wake: events_path %q must start with /", h.EventsPath)
	}
	if _, err := h.GuestConfig(); err != nil {
		return fmt.Errorf("proxmox_wake %s: %w", h.Guest, err)
	}
	return h.validateTag()
}

// errProbeUDP refuses the udp probe: an HTTP service answers on TCP.
var errProbeUDP = errors.New("probe udp is for layer4's proxmox_wake: an HTTP service is probed with tcp or http")

// splitGuest splits a guest reference "<cluster>/<vmid|name>".
func splitGuest(guest string) (cluster, ref string, err error) {
	cluster, ref, ok := strings.Cut(guest, "/")
	if !ok || cluster == "" || hasPlaceholder(cluster) {
		return "", "", fmt.Errorf("guest %q must be <cluster>/<vmid> or <cluster>/<name>", guest)
	}
	if err := lxc.ValidateRef(ref); err != nil {
		return "", "", err
	}
	return cluster, ref, nil
}

// Cleanup releases this config's binding of the guest. The guest runtime
// (timers, state, a wake in progress) lives on if the next config uses it.
func (h *WakeHandler) Cleanup() error {
	if h.dynamic != nil {
		h.dynamic.Release()
	}
	if h.binding != nil {
		return h.binding.Release()
	}
	return nil
}

// ServeHTTP wakes the guest if needed and passes the request on.
func (h *WakeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if h.dynamic != nil {
		return h.serveDynamic(w, r, next)
	}
	g := h.guest
	if len(h.ignore) > 0 {
		match, err := h.ignore.AnyMatchWithError(r)
		if err != nil {
			return caddyhttp.Error(http.StatusInternalServerError, err)
		}
		if match {
			// Neither wakes nor extends: no Begin, no Wake.
			if up, ok := g.Upstream(h.port); ok {
				h.setUpstream(r, up, false)
				return next.ServeHTTP(w, r)
			}
			return h.unavailable(w, r, http.StatusServiceUnavailable, 5*time.Second, "The service is asleep.")
		}
	}
	if r.URL.Path == h.EventsPath {
		return h.serveEvents(w, r)
	}
	// The request counts as activity from here to its end, ready guest
	// or not; the common case, a ready guest and no watched stream, takes
	// the guest's lock once on the way in and once on the way out.
	var (
		up    string
		ready bool
	)
	if stream := isStream(r); stream && h.StreamIdleTimeout > 0 {
		var end func()
		w, end = h.watchStream(w, r)
		defer end()
		up, ready = g.Upstream(h.port)
	} else {
		up, ready = g.BeginUpstream(h.port, stream)
		defer g.End(stream)
	}
	if ready {
		h.setUpstream(r, up, false)
		return next.ServeHTTP(w, r)
	}
	op := g.Wake(r.Method + " " + r.URL.Path)
	if wantsPage(r, h.Mode) {
		select {
		case <-op.Done():
			if op.Err() == nil {
				return h.proxyCold(w, r, next)
			}
		default:
		}
		return h.servePage(w, r, op)
	}

	release, ok := g.Hold(h.MaxPending)
	if !ok {
		return h.unavailable(w, r, http.StatusServiceUnavailable, 2*time.Second, "Too many requests are waiting for the service to start.")
	}
	defer release()
	timer := time.NewTimer(h.hold)
	defer timer.Stop()
	select {
	case <-op.Done():
	case <-timer.C:
		return h.unavailable(w, r, http.StatusServiceUnavailable, 5*time.Second, "The service is starting; it was not ready in time. Try again shortly.")
	case <-r.Context().Done():
		// The client left; the wake goes on without it.
		return nil
	}
	if err := op.Err(); err != nil {
		return h.wakeFailed(w, r, err)
	}
	return h.proxyCold(w, r, next)
}

// proxyCold passes on a request that waited for a wake.
func (h *WakeHandler) proxyCold(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	up, ok := h.guest.Upstream(h.port)
	if !ok {
		// Stopped again in the meantime (e.g. by the admin API).
		return h.unavailable(w, r, http.StatusServiceUnavailable, 2*time.Second, "The service went to sleep again. Try again.")
	}
	h.setUpstream(r, up, true)
	w.Header().Set(wakeHeader, "cold")
	return next.ServeHTTP(w, r)
}

// setUpstream hands the guest to the proxmox dynamic upstreams and sets
// placeholders: {http.vars.proxmox.upstream}, {proxmox.upstream},
// {proxmox.cold_start}.
func (h *WakeHandler) setUpstream(r *http.Request, up string, cold bool) {
	ctx := r.Context()
	// The address goes into an interface once for both tables (each
	// conversion of a string to any is an allocation).
	var upv any = up
	if vars, ok := ctx.Value(caddyhttp.VarsCtxKey).(map[string]any); ok {
		vars[wakeVarGuest] = h.guest
		vars[wakeVarUpstream] = upv
	}
	if repl, ok := ctx.Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		repl.Set("proxmox.upstream", upv)
		repl.Set("proxmox.cold_start", cold)
	}
}

// wakeFailed answers a failed wake: 504 when wake_timeout expired, else
// 503, both with Retry-After set to the back-off.
func (h *WakeHandler) wakeFailed(w http.ResponseWriter, r *http.Request, err error) error {
	code, retry := http.StatusServiceUnavailable, 10*time.Second
	var we *lxc.WakeError
	if errors.As(err, &we) {
		if we.Timeout {
			code = http.StatusGatewayTimeout
		}
		if we.RetryAfter > 0 {
			retry = we.RetryAfter
		}
	}
	return h.unavailable(w, r, code, retry, h.failureText(err))
}

// failureText is what a visitor reads about a failed wake.
func (h *WakeHandler) failureText(err error) string {
	if h.ShowDetails {
		return "The service could not be started: " + err.Error()
	}
	var we *lxc.WakeError
	if errors.As(err, &we) {
		return we.PublicMessage()
	}
	return "The service could not be started."
}

// wantsPage tells whether a request to a sleeping guest gets the loading
// page rather than being held: a browser navigating (mode auto), or any
// request but a stream (mode page: a websocket or event stream cannot
// show a page; held, it connects once the guest is ready).
func wantsPage(r *http.Request, mode string) bool {
	switch mode {
	case "hold":
		return false
	case "page":
		return !isStream(r)
	}
	return isNavigation(r)
}

// isNavigation reports whether a browser is loading a page: GET or HEAD,
// not a stream, and Sec-Fetch-Mode navigate or HTML accepted.
func isNavigation(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	if isStream(r) {
		return false
	}
	if mode := r.Header.Get("Sec-Fetch-Mode"); mode != "" {
		return mode == "navigate"
	}
	return strings.Contains(r.Header.Get("Accept"), "text/html")
}

// isStream reports whether a request opens a long-lived exchange: a
// websocket, whether an HTTP/1.1 upgrade or an extended CONNECT over
// HTTP/2 or HTTP/3 (RFC 8441, RFC 9220: Go's HTTP/2 server gives it the
// :protocol pseudo-header, quic-go puts the protocol in r.Proto), any
// other CONNECT tunnel, or an event stream. Streams are never shown the
// loading page (they are held), count as streams in flight, and are
// watched by stream_idle_timeout.
func isStream(r *http.Request) bool {
	return r.Method == http.MethodConnect || r.Header.Get("Upgrade") != "" ||
		strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

// Interface guards.
var (
	_ caddy.Provisioner           = (*WakeHandler)(nil)
	_ caddy.Validator             = (*WakeHandler)(nil)
	_ caddy.CleanerUpper          = (*WakeHandler)(nil)
	_ caddyhttp.MiddlewareHandler = (*WakeHandler)(nil)
)
