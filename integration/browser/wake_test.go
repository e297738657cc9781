package browser

import (
	"context"
	"flag"
	"fmt"
	"html"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testbrowser"
	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
	"github.com/caddy-proxmox/caddy-proxmox/pvesim"
)

var updateScreenshot = flag.Bool("update-screenshot", false, "rewrite docs/wake-loading.png from TestWakeLoadingPage")

var guestSeq atomic.Int32

// wakeEnv is a pvesim cluster with one LXC guest, "web", behind a
// proxmox_wake site of a ./caddy process.
type wakeEnv struct {
	sim  *pvesim.Sim
	base string // the site, as a visitor types it
	// served counts how often the guest served the visitor's page
	// (/docs/page).
	served *atomic.Int32
}

// guestSite is the woken guest's own web page: what the visitor came for.
func guestSite(served *atomic.Int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/docs/page" { // the visitor's page, not the wake's probes
			served.Add(1)
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!DOCTYPE html><html><head><title>web: home</title></head>
<body><h1>Welcome to web</h1><p>You asked for <span id="path">%s</span>.</p></body></html>`, html.EscapeString(r.URL.RequestURI()))
	})
}

// newWakeEnv starts the simulator and ./caddy. The start task and the
// boot take long enough for a person (and the test) to watch the page.
func newWakeEnv(t *testing.T, start, boot time.Duration, backoff string) *wakeEnv {
	t.Helper()
	testbrowser.Chromium(t) // before starting anything: skip or fail at once
	sim := pvesim.New(pvesim.Options{TaskDelay: 50 * time.Millisecond})
	guestPort := testcaddy.FreePort(t)
	served := new(atomic.Int32)
	// 127.78.0.0/16 is this package's: the demo cluster serves on
	// 127.0.0.2-4 and integration/wake on 127.77.0.0/16.
	n := guestSeq.Add(1)
	ip := fmt.Sprintf("127.78.%d.%d", n/250, 2+n%250)
	if err := sim.AddGuest(pvesim.GuestSpec{VMID: 100, Name: "web", IP: ip, Port: guestPort,
		StartDelay: start, BootDelay: boot, Handler: guestSite(served)}); err != nil {
		t.Fatal(err)
	}
	apiURL, err := sim.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	dir := t.TempDir()
	port := testcaddy.FreePort(t)
	cfg := fmt.Sprintf(`{
	admin off
	storage file_system %s
	skip_install_trust
	servers {
		protocols h1
	}
	proxmox {
		cluster lab {
			url %s
			token_id %s
			token_secret %s
			poll_interval 200ms
			request_timeout 5s
		}
	}
}

http://127.0.0.1:%d {
	bind 127.0.0.1
	proxmox_wake lab/web {
		port %d
		idle_timeout 5m
		wake_timeout 30s
		hold_timeout 30s
		retry_backoff %s
		task_poll_interval 50ms
		probe_interval 100ms
	}
	reverse_proxy {
		dynamic proxmox
	}
}
`, dir, apiURL, sim.TokenID(), sim.TokenSecret(), port, guestPort, backoff)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	startCaddy(t, dir, cfg, addr)
	return &wakeEnv{sim: sim, base: "http://" + addr, served: served}
}

// pageView is what a visitor sees of the page at one moment.
type pageView struct {
	Href    string   `json:"href"`
	Title   string   `json:"title"`
	H1      string   `json:"h1"`
	Msg     string   `json:"msg"`
	Retry   string   `json:"retry"`  // the countdown to the next try after a failure
	Failed  bool     `json:"failed"` // the loading page's error look
	Bar     int      `json:"bar"`    // progress bar, percent of its track as drawn
	Log     []string `json:"log"`
	Path    string   `json:"path"` // the guest page's echo of the request
	Text    string   `json:"text"`
	History int      `json:"history"`
}

const readView = `(() => {
	const text = s => { const e = document.querySelector(s); return e ? e.textContent.trim() : "" };
	const bar = document.getElementById("bar");
	let pct = -1;
	if (bar) {
		const track = bar.parentElement.getBoundingClientRect().width;
		pct = track ? Math.round(100 * bar.getBoundingClientRect().width / track) : -1;
	}
	return {
		href: location.href, title: document.title, h1: text("h1"), msg: text("#msg"), retry: text("#retry"),
		failed: !!document.querySelector("main.err"), bar: pct,
		log: Array.from(document.querySelectorAll("#log li"), li => li.textContent),
		path: text("#path"), text: document.body ? document.body.innerText : "",
		history: history.length,
	};
})()`

// watch reads the page every 30ms until done says so or d passes, and
// returns every view read. Reads that meet a page being replaced fail
// and are skipped: the browser is mid-navigation.
func watch(t *testing.T, ctx context.Context, d time.Duration, what string, done func(pageView) bool, each func(pageView)) []pageView {
	t.Helper()
	var views []pageView
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if v, err := chromedp.Run(ctx, chromedp.Evaluate[pageView](readView)); err == nil {
			views = append(views, v)
			if each != nil {
				each(v)
			}
			if done(v) {
				return views
			}
		} else if ctx.Err() != nil {
			t.Fatalf("browser gone while waiting for %s: %v", what, err)
		}
		time.Sleep(30 * time.Millisecond)
	}
	last := "(nothing read)"
	if len(views) > 0 {
		last = fmt.Sprintf("%+v", views[len(views)-1])
	}
	t.Fatalf("timed out after %s waiting for %s; last view: %s", d, what, last)
	return nil
}

// A visitor opens a sleeping site: the loading page renders at once, its
// progress follows the start live (the event stream) and, with no reload
// by the visitor, the browser ends on the guest's own page at the URL
// that was typed.
func TestWakeLoadingPage(t *testing.T) {
	e := newWakeEnv(t, 1500*time.Millisecond, 1500*time.Millisecond, "1s")
	ctx := testbrowser.New(t, testbrowser.Options{Width: 760, Height: 480})
	target := e.base + "/docs/page?tab=2"
	if err := chromedp.Do(ctx, chromedp.Navigate(target)); err != nil {
		t.Fatal(err)
	}
	shot := false
	views := watch(t, ctx, 30*time.Second, "the guest's page", func(v pageView) bool { return v.Path != "" }, func(v pageView) {
		// The screenshot for the README: the page mid-way, with a few
		// steps in its log, once the bar's transition (0.3s) has ended.
		if *updateScreenshot && !shot && strings.HasPrefix(v.Msg, "Waiting for the service") && len(v.Log) >= 5 {
			shot = true
			time.Sleep(500 * time.Millisecond)
			saveScreenshot(t, ctx, filepath.Join(repoRoot(), "docs", "wake-loading.png"))
		}
	})
	if *updateScreenshot && !shot {
		t.Error("-update-screenshot: the page never showed the service check; docs/wake-loading.png not rewritten")
	}

	first := views[0]
	if first.Title != "Starting web…" || first.H1 != "Starting web…" || first.Href != target {
		t.Fatalf("first view is not the loading page for web at %s: %+v", target, first)
	}
	var loading []pageView
	for _, v := range views {
		if v.H1 == "Starting web…" {
			loading = append(loading, v)
		}
	}
	// Live progress: the status line and the bar change while the page
	// stays, and the log lists the steps in order.
	var msgs []string
	bars := map[int]bool{}
	for _, v := range loading {
		if len(msgs) == 0 || msgs[len(msgs)-1] != v.Msg {
			msgs = append(msgs, v.Msg)
		}
		bars[v.Bar] = true
	}
	wantInOrder(t, "status line", msgs, "Starting the guest", "Waiting for the service")
	if len(bars) < 3 || loading[0].Bar >= loading[len(loading)-1].Bar {
		t.Errorf("progress bar did not grow: %d distinct widths, %d%% -> %d%%", len(bars), loading[0].Bar, loading[len(loading)-1].Bar)
	}
	lastLog := loading[len(loading)-1].Log
	wantInOrder(t, "progress log", lastLog, "starting: Waking up web", "start_task: Starting the guest", "task_ok: ", "address: ", "probing: Waiting for the service")
	for _, v := range loading {
		if v.Failed {
			t.Fatalf("loading page turned to its error look: %+v", v)
		}
	}
	// The readiness checks are one line of the log that counts up, check
	// by check (the boot takes about fifteen of them).
	seen := map[int]bool{}
	prev := 0
	for _, v := range loading {
		var lines []string
		for _, l := range v.Log {
			if strings.Contains(l, "probing: ") {
				lines = append(lines, l)
			}
		}
		if len(lines) > 1 {
			t.Fatalf("the checks take %d lines of the log: %q", len(lines), lines)
		}
		var n int
		if len(lines) == 1 {
			if _, err := fmt.Sscanf(lines[0][strings.Index(lines[0], "(check "):], "(check %d)", &n); err != nil {
				t.Fatalf("probing line %q: %v", lines[0], err)
			}
		}
		if n < prev {
			t.Fatalf("the check count went back from %d to %d", prev, n)
		}
		prev, seen[n] = n, true
	}
	if !seen[4] && !seen[5] && !seen[6] && !seen[7] && !seen[8] && !seen[9] {
		t.Errorf("the log skipped checks 4 to 9: saw %v", slices.Sorted(maps.Keys(seen)))
	}

	// The hand-over: the guest's page, at the typed URL, in place of the
	// loading page (Back leaves the site instead of showing it again).
	last := views[len(views)-1]
	if last.H1 != "Welcome to web" || last.Title != "web: home" || last.Path != "/docs/page?tab=2" || last.Href != target {
		t.Fatalf("after the wake: %+v", last)
	}
	if last.History != first.History {
		t.Errorf("history grew from %d to %d entries; the loading page should have replaced itself", first.History, last.History)
	}
	// The guest was asked for its page once: the hand-over loaded it a
	// single time (the loading page replaced itself, so no script of it is
	// left that could load it again).
	if n := e.served.Load(); n != 1 {
		t.Fatalf("the guest served %d pages for one visit, want 1", n)
	}
}

// Without JavaScript the loading page still gets the visitor to the site:
// it refreshes itself (a meta refresh inside noscript) until the guest
// answers, and says so.
func TestWakeLoadingPageWithoutJavaScript(t *testing.T) {
	e := newWakeEnv(t, 1500*time.Millisecond, 500*time.Millisecond, "1s")
	ctx := testbrowser.New(t, testbrowser.Options{})
	if _, err := chromedp.Call(ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
		t.Fatal(err)
	}
	target := e.base + "/no-js"
	if err := chromedp.Do(ctx, chromedp.Navigate(target)); err != nil {
		t.Fatal(err)
	}
	views := watch(t, ctx, 30*time.Second, "the guest's page", func(v pageView) bool { return v.Path != "" }, nil)
	first := views[0]
	if first.H1 != "Starting web…" || !strings.Contains(first.Text, "This page reloads by itself every 2 seconds.") || len(first.Log) != 0 {
		t.Fatalf("first view without JavaScript: %+v", first)
	}
	if last := views[len(views)-1]; last.H1 != "Welcome to web" || last.Path != "/no-js" || last.Href != target {
		t.Fatalf("after the wake: %+v", last)
	}
}

// A guest that cannot start: the open loading page turns to its error
// look with a public explanation (never the cluster's error text); a
// reload during the back-off shows the error page, which retries on its
// own and shows the site once the cause is gone.
func TestWakeFailurePage(t *testing.T) {
	// The back-off is long enough that the reload below lands within it
	// on a loaded machine too (with 3 s, a slow reload met the next try).
	e := newWakeEnv(t, 100*time.Millisecond, 0, "8s 8s")
	e.sim.FailStarts(100, "startup for container '100' failed")
	ctx := testbrowser.New(t, testbrowser.Options{})
	target := e.base + "/app"
	if err := chromedp.Do(ctx, chromedp.Navigate(target)); err != nil {
		t.Fatal(err)
	}
	views := watch(t, ctx, 10*time.Second, "the failure on the open page", func(v pageView) bool { return v.Failed }, nil)
	// It counts down to the next try (the 8s back-off), a second at a
	// time.
	counts := watch(t, ctx, 5*time.Second, "the countdown to the next try", func(v pageView) bool { return v.Retry == "Trying again in 7 s" }, nil)
	var secs []string
	for _, v := range counts {
		if len(secs) == 0 || secs[len(secs)-1] != v.Retry {
			secs = append(secs, v.Retry)
		}
	}
	wantInOrder(t, "countdown", secs, "Trying again in 8 s", "Trying again in 7 s")
	// The page that was open says so in its heading and tab title too, not
	// only in its status line: it may wait minutes for the next try.
	live := views[len(views)-1]
	if live.H1 != "web could not be started" || live.Title != "Could not start web" || live.Msg != "The guest could not be started." ||
		!slices.ContainsFunc(live.Log, func(l string) bool { return strings.Contains(l, "error: The guest could not be started.") }) {
		t.Fatalf("open page after the failure: %+v", live)
	}
	// The visitor reloads during the back-off.
	if err := chromedp.Do(ctx, chromedp.Reload()); err != nil {
		t.Fatal(err)
	}
	v, err := chromedp.Run(ctx, chromedp.Evaluate[pageView](readView))
	if err != nil {
		t.Fatal(err)
	}
	if v.H1 != "web could not be started" || v.Title != "Could not start web" || !v.Failed || !strings.HasPrefix(v.Msg, "The last start failed; next try in") || v.Href != target {
		t.Fatalf("error page: %+v", v)
	}
	if !strings.HasPrefix(v.Retry, "Trying again in ") {
		t.Fatalf("error page without a countdown: %+v", v)
	}
	for _, v := range append(views, v) {
		if strings.Contains(v.Text, "startup for container") || strings.Contains(v.Text, "pve1") {
			t.Fatalf("the cluster's error text is shown to visitors: %+v", v)
		}
	}
	// The cause goes away; the visitor does nothing.
	e.sim.ClearFaults()
	views = watch(t, ctx, 20*time.Second, "the guest's page after the failure", func(v pageView) bool { return v.Path != "" }, nil)
	if last := views[len(views)-1]; last.Path != "/app" || last.Href != target {
		t.Fatalf("after recovery: %+v", last)
	}
}

// wantInOrder checks that each of wants is part of some item of got, in
// that order.
func wantInOrder(t *testing.T, what string, got []string, wants ...string) {
	t.Helper()
	i := 0
	for _, g := range got {
		if i < len(wants) && strings.Contains(g, wants[i]) {
			i++
		}
	}
	if i < len(wants) {
		t.Errorf("%s lacks %q (in this order after %q):\n%s", what, wants[i], wants[:i], strings.Join(got, "\n"))
	}
}

// saveScreenshot writes the viewport as a PNG.
func saveScreenshot(t *testing.T, ctx context.Context, path string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes)", path, len(png))
}
