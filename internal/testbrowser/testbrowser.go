// Package testbrowser runs Debian's headless Chromium for browser tests and
// drives it over the DevTools protocol with chromedp. Each test gets its own
// browser process with a fresh profile, so tests never share cookies,
// storage or caches.
package testbrowser

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// EnvChromium names the environment variable that points at the browser
// binary; without it Debian's /usr/bin/chromium is used.
const EnvChromium = "CADDY_PROXMOX_CHROMIUM"

// Chromium returns the browser binary. When it is missing the test is
// skipped, except under CI, where test.sh installs Debian's chromium and
// a missing browser is a failure.
func Chromium(t testing.TB) string {
	t.Helper()
	p := os.Getenv(EnvChromium)
	if p == "" {
		p = "/usr/bin/chromium"
	}
	path, err := exec.LookPath(p)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no browser at %s (%v): test.sh installs Debian's chromium", p, err)
		}
		t.Skipf("no browser at %s (%v): install Debian's chromium or run ./test.sh", p, err)
	}
	return path
}

// Options tune a browser.
type Options struct {
	// Width and Height are the window size (1024x768).
	Width, Height int
	// Timeout bounds everything the test does in the browser (2 minutes).
	Timeout time.Duration
}

// New starts a headless Chromium with a fresh profile and returns a
// context for chromedp actions in its first tab. The browser ends with
// the test. Page console messages and uncaught exceptions go to the test
// log, so a failing page explains itself.
func New(t testing.TB, opts Options) context.Context {
	t.Helper()
	bin := Chromium(t)
	if opts.Width == 0 {
		opts.Width, opts.Height = 1024, 768
	}
	if opts.Timeout == 0 {
		opts.Timeout = 2 * time.Minute
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(bin),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless,
		chromedp.NoSandbox, // tests run as root
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		// Nothing but loopback is reachable here: without these Chromium
		// keeps dialling Google's services, which this machine refuses.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		// Caddy's internal CA is not installed in the test's trust store.
		chromedp.IgnoreCertErrors,
		chromedp.WindowSize(opts.Width, opts.Height),
	)
	logs := &pageLog{t: t}
	ctx, cancelCtx := chromedp.NewContext(alloc, chromedp.WithErrorf(logs.browserErrorf), chromedp.WithListener(logs.event))
	ctx, cancelTimeout := context.WithTimeout(ctx, opts.Timeout)
	t.Cleanup(func() {
		logs.stop()
		cancelTimeout()
		cancelCtx()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	return ctx
}

// pageLog forwards what the page prints to the test log until the test
// ends (t.Logf after the end panics).
type pageLog struct {
	t       testing.TB
	mu      sync.Mutex
	stopped bool
}

func (l *pageLog) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.stopped {
		l.t.Logf(format, args...)
	}
}

func (l *pageLog) stop() {
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
}

func (l *pageLog) browserErrorf(format string, args ...any) {
	l.logf("chromedp: "+format, args...)
}

func (l *pageLog) event(ev any) {
	switch e := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		var parts []string
		for _, a := range e.Args {
			if a.Value != nil {
				parts = append(parts, string(a.Value))
			} else {
				parts = append(parts, a.Description)
			}
		}
		l.logf("page console.%s: %s", e.Type, strings.Join(parts, " "))
	case *runtime.EventExceptionThrown:
		d := e.ExceptionDetails
		msg := d.Text
		if d.Exception != nil && d.Exception.Description != "" {
			msg = d.Exception.Description
		}
		l.logf("page exception: %s (%s:%d)", msg, d.URL, d.LineNumber)
	}
}

// Poll evaluates expr in the page every interval until it returns true,
// and fails the test with what the page showed if that takes longer than
// d. describe, if not empty, is an expression whose value explains the
// failure (typically the visible text).
func Poll(t testing.TB, ctx context.Context, d time.Duration, what, expr, describe string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			t.Fatalf("timed out after %s waiting for %s (last error: %v)\npage: %s", d, what, err, Describe(ctx, describe))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Describe evaluates expr (or, when empty, the page's URL and visible
// text) for a failure message.
func Describe(ctx context.Context, expr string) string {
	if expr == "" {
		expr = `location.href + "\n" + (document.body ? document.body.innerText : "(no body)")`
	}
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		return fmt.Sprintf("(cannot read the page: %v)", err)
	}
	return s
}

// Type presses the keys of text on the focused element as a keyboard
// does: one keyDown that carries the text, then keyUp. chromedp's
// SendKeys and KeyEvent send the text as a separate "char" event after a
// keyDown without text, which pages that handle keydown themselves
// (xterm.js) receive as two key presses; a real key press never does that.
func Type(text string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		for _, r := range text {
			var down, up *input.DispatchKeyEventParams
			var chars []string
			for _, ev := range kb.Encode(r) {
				switch ev.Type {
				case kb.KeyDown:
					down = ev
				case kb.KeyUp:
					up = ev
				case kb.KeyChar:
					chars = append(chars, ev.Text)
				}
			}
			if down == nil || up == nil {
				return fmt.Errorf("no key for %q", r)
			}
			down.Text = strings.Join(chars, "")
			down.UnmodifiedText = down.Text
			for _, ev := range []*input.DispatchKeyEventParams{down, up} {
				if _, err := cdp.Call(ctx, t, input.DispatchKeyEvent, *ev); err != nil {
					return err
				}
			}
		}
		return nil
	})
}
