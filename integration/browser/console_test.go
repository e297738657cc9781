package browser

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testbrowser"
	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
	"github.com/caddy-proxmox/caddy-proxmox/kubevirtsim"
)

const (
	consoleUser     = "root@pam"
	consolePassword = "browser-test-password"
	consoleTokenID  = "root@pam!browser"
	consoleSecret   = "6d1b2c3e-browser-test-token"
	consoleVMID     = "100" // the simulated cluster's debian-12, which runs
)

// consoleEnv is ./caddy serving proxmox_api on the simulated KubeVirt
// cluster, with noVNC, xterm.js and the console pages (web/) on the same
// origin, as pveproxy serves /novnc/ and /xtermjs/ beside the API.
type consoleEnv struct {
	base string // https://localhost:port
	node string // the node VM 100 runs on
}

func newConsoleEnv(t *testing.T) *consoleEnv {
	t.Helper()
	testbrowser.Chromium(t) // before starting anything: skip or fail at once
	mods := webModules(t)
	dir := t.TempDir()
	port := testcaddy.FreePort(t)
	cfg := testcaddy.Globals(dir) + fmt.Sprintf(`
https://localhost:%d {
	bind 127.0.0.1
	tls internal
	handle_path /novnc/* {
		root * %s/@novnc/novnc
		file_server
	}
	handle_path /xtermjs/* {
		root * %s/@xterm
		file_server
	}
	handle_path /console/* {
		root * %s
		file_server
	}
	handle {
		proxmox_api {
			simulate
			user %s %s
			token %s %s
			auth_failure_delay 0s
		}
	}
}
`, port, mods, mods, harnessDir(), consoleUser, consolePassword, consoleTokenID, consoleSecret)
	p := startCaddy(t, dir, cfg, fmt.Sprintf("127.0.0.1:%d", port))
	e := &consoleEnv{base: fmt.Sprintf("https://localhost:%d", port)}
	api := &testcaddy.PVE{T: t, Base: e.base, C: testcaddy.Client(), Auth: testcaddy.TokenAuth(consoleTokenID, consoleSecret)}
	// The simulated VM starts with the cluster (1.5 s).
	deadline := time.Now().Add(60 * time.Second)
	for e.node == "" {
		ans, err := api.Send("GET", "/cluster/resources", url.Values{"type": {"vm"}})
		if err == nil && ans.Code == 200 {
			var vms []struct {
				VMID   json.Number `json:"vmid"`
				Node   string      `json:"node"`
				Status string      `json:"status"`
			}
			if json.Unmarshal(ans.Data, &vms) == nil {
				for _, vm := range vms {
					if vm.VMID.String() == consoleVMID && vm.Status == "running" {
						e.node = vm.Node
					}
				}
			}
		}
		if e.node != "" {
			break
		}
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("VM %s not running on the simulated cluster (last answer: %v %v); log:\n%s", consoleVMID, ans.Status, err, p.Output())
		}
		time.Sleep(200 * time.Millisecond)
	}
	return e
}

// open starts a browser, logs in through the login page as a person does
// and goes on to a console page (novnc.html or xtermjs.html) with PVE's
// query for VM 100.
func (e *consoleEnv) open(t *testing.T, page string, opts testbrowser.Options) context.Context {
	t.Helper()
	ctx := testbrowser.New(t, opts)
	q := url.Values{"console": {"kvm"}, "node": {e.node}, "vmid": {consoleVMID}}
	if page == "novnc.html" {
		q.Set("novnc", "1")
	} else {
		q.Set("xtermjs", "1")
	}
	next := "/console/" + page + "?" + q.Encode()
	if err := chromedp.Do(ctx,
		chromedp.Navigate(e.base+"/console/login.html?"+url.Values{"next": {next}}.Encode()),
		chromedp.SendKeys(chromedp.CSS("#username"), consoleUser),
		chromedp.SendKeys(chromedp.CSS("#password"), consolePassword),
		chromedp.Click(chromedp.CSS("#submit")),
	); err != nil {
		t.Fatalf("login: %v", err)
	}
	status := `document.getElementById("status")`
	testbrowser.Poll(t, ctx, 30*time.Second, "the console to connect or fail",
		status+`?.textContent === "Connected" || `+status+`?.className === "error"`, "")
	if got, err := chromedp.Run(ctx, chromedp.Evaluate[string](status+`.textContent`)); err != nil || got != "Connected" {
		t.Fatalf("console did not connect: %q %v", got, err)
	}
	return ctx
}

// noVNC opens VM 100's display through vncproxy and vncwebsocket and
// draws the simulated framebuffer.
func TestNoVNCConsole(t *testing.T) {
	e := newConsoleEnv(t)
	ctx := e.open(t, "novnc.html", testbrowser.Options{})
	// ServerInit's desktop name, as noVNC reports it.
	testbrowser.Poll(t, ctx, 10*time.Second, "the desktop name", `document.getElementById("desktop").textContent === "`+kubevirtsim.SimDisplayName+`"`, "")
	// The screen: a canvas of the framebuffer's size that shows what the
	// simulator draws (the page around it is black, noVNC's own
	// background dark grey).
	want := image.Rect(0, 0, kubevirtsim.SimFramebufferWidth, kubevirtsim.SimFramebufferHeight)
	testbrowser.Poll(t, ctx, 10*time.Second, "a drawn framebuffer", fmt.Sprintf(
		`(() => { const c = document.querySelector("#screen canvas"); return !!c && c.width === %d && c.height === %d })()`, want.Dx(), want.Dy()), "")
	var img image.Image
	deadline := time.Now().Add(10 * time.Second)
	for {
		shot, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS("#screen canvas")))
		if err != nil {
			t.Fatalf("screenshot of the canvas: %v", err)
		}
		if img, err = png.Decode(bytes.NewReader(shot)); err != nil {
			t.Fatal(err)
		}
		bad := screenMismatch(img, want)
		if bad == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the canvas does not show the simulated screen: %s", bad)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// screenMismatch compares a screenshot of the canvas with the simulated
// screen and says where they differ ("" when they match).
func screenMismatch(img image.Image, want image.Rectangle) string {
	b := img.Bounds()
	if b.Dx() != want.Dx() || b.Dy() != want.Dy() {
		return fmt.Sprintf("screenshot is %dx%d, the framebuffer %dx%d", b.Dx(), b.Dy(), want.Dx(), want.Dy())
	}
	for y := 0; y < b.Dy(); y++ {
		for x := 0; x < b.Dx(); x++ {
			r, g, bl, _ := img.At(b.Min.X+x, b.Min.Y+y).RGBA()
			wr, wg, wb := kubevirtsim.SimScreenPixel(x, y)
			if !near(r>>8, wr) || !near(g>>8, wg) || !near(bl>>8, wb) {
				return fmt.Sprintf("pixel (%d,%d) is rgb(%d,%d,%d), want rgb(%d,%d,%d)", x, y, r>>8, g>>8, bl>>8, wr, wg, wb)
			}
		}
	}
	return ""
}

// near allows for colour management rounding in the screenshot.
func near(got uint32, want uint8) bool {
	d := int(got) - int(want)
	return d >= -2 && d <= 2
}

// xterm.js opens VM 100's serial console through termproxy and
// vncwebsocket: what is typed reaches the guest, whose echo appears in
// the terminal, also after the window (and so the terminal) is resized.
func TestXtermConsole(t *testing.T) {
	e := newConsoleEnv(t)
	ctx := e.open(t, "xtermjs.html", testbrowser.Options{Width: 900, Height: 600})
	rows := func() []string {
		text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector(".xterm-rows").innerText`))
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimRight(text, "\n\u00a0 "), "\n")
	}
	typeLine := func(s string) {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(".xterm-screen")), testbrowser.Type(s+kb.Enter)); err != nil {
			t.Fatalf("typing %q: %v", s, err)
		}
	}
	waitRows := func(what string, want ...string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			got := rows()
			if len(got) >= len(want) && equalTrimmed(got[:len(want)], want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("terminal after %s shows %q, want the lines %q", what, got, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	typeLine("uname -a")
	waitRows("the first line", "uname -a")
	// UTF-8: the input message counts bytes, not characters.
	typeLine("grüße, 世界")
	waitRows("a line with UTF-8", "uname -a", "grüße, 世界")

	// A smaller window: the terminal fits itself and sends its new size.
	rowCount := `document.querySelector(".xterm-rows").children.length`
	before, err := chromedp.Run(ctx, chromedp.Evaluate[int](rowCount))
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(500, 300)); err != nil {
		t.Fatal(err)
	}
	testbrowser.Poll(t, ctx, 10*time.Second, "the terminal to fit the smaller window",
		fmt.Sprintf(`%s < %d`, rowCount, before), `"rows " + `+rowCount+` + " in a window of " + innerWidth + "x" + innerHeight`)
	typeLine("after resize")
	waitRows("a resize", "uname -a", "grüße, 世界", "after resize")
	if got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("status").textContent`)); err != nil || got != "Connected" {
		t.Fatalf("status after the session: %q %v", got, err)
	}
}

// equalTrimmed compares terminal rows without their trailing blanks.
func equalTrimmed(got, want []string) bool {
	for i := range want {
		if strings.TrimRight(got[i], " \u00a0") != want[i] {
			return false
		}
	}
	return true
}
