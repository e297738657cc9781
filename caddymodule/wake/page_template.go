package wake

import (
	"bytes"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"os"
	"path/filepath"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
)

// loadPage reads and parses the page template, and runs it once on a
// loading and an error page so that a template that cannot render (a
// field that does not exist, a bad call) fails the config load, not a
// visitor's request.
func (h *WakeHandler) loadPage() error {
	h.page = nil
	if h.Page == "" {
		return nil
	}
	b, err := os.ReadFile(h.Page)
	if err != nil {
		return fmt.Errorf("proxmox_wake %s: page: %w", h.Guest, err)
	}
	t, err := template.New(filepath.Base(h.Page)).Parse(string(b))
	if err != nil {
		return fmt.Errorf("proxmox_wake %s: page %s: %w", h.Guest, h.Page, err)
	}
	for _, d := range []wakePageData{
		{Name: "web", State: "starting", Message: "Waking up…", EventsPath: h.EventsPath, Refresh: 2, RetryAfter: 2, Progress: 5},
		{Name: "web", State: "failed", Message: "The service could not be started.", EventsPath: h.EventsPath, Error: true, Refresh: 10, RetryAfter: 10, Progress: 100},
	} {
		if err := t.Execute(io.Discard, d); err != nil {
			return fmt.Errorf("proxmox_wake %s: page %s: %w", h.Guest, h.Page, err)
		}
	}
	h.page = t
	return nil
}

// renderPage renders the page template, or the built-in page when none
// is configured (or, should it fail after all, with an error logged).
func (h *WakeHandler) renderPage(buf *bytes.Buffer, data wakePageData) error {
	if h.page != nil {
		err := h.page.Execute(buf, data)
		if err == nil {
			return nil
		}
		h.logger.Error("page template failed; serving the built-in page", zap.String("page", h.Page), zap.Error(err))
		buf.Reset()
	}
	return wakePage.Execute(buf, data)
}

// Placeholders describing the guest on the handler's own answers, for
// handle_errors, log fields and the like.
const (
	phState      = "http.proxmox_wake.state"
	phGuest      = "http.proxmox_wake.guest"
	phError      = "http.proxmox_wake.error"
	phRetryAfter = "http.proxmox_wake.retry_after"
	phEventsPath = "http.proxmox_wake.events_path"
)

// setPlaceholders sets {http.proxmox_wake.state} (the guest's state:
// starting, failed, stopped…), {http.proxmox_wake.guest} (its public
// name), {http.proxmox_wake.error} (what visitors read about a failure;
// empty on the loading page), {http.proxmox_wake.retry_after} (seconds)
// and {http.proxmox_wake.events_path}.
func (h *WakeHandler) setPlaceholders(r *http.Request, errText string, retrySecs int) {
	repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if !ok {
		return
	}
	// A placeholder reference that has not resolved to a guest (the
	// cluster unreachable, or no poll yet) has no state or name to show.
	if h.guest != nil {
		repl.Set(phState, string(h.guest.State()))
		repl.Set(phGuest, h.publicName())
	}
	repl.Set(phError, errText)
	repl.Set(phRetryAfter, retrySecs)
	repl.Set(phEventsPath, h.EventsPath)
}

// publicName is the guest's PVE name, or the reference it was configured
// with until the poll knows the name.
func (h *WakeHandler) publicName() string {
	if n := h.guest.Info().Name; n != "" {
		return n
	}
	return h.guest.Ref()
}
