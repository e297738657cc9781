package wake

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/caddy-proxmox/caddy-proxmox/pvesim"
)

// A template that tries to make the page cacheable and a 200: the
// handler's status, Cache-Control and Retry-After win.
const testPage = `<!DOCTYPE html>
<meta http-equiv="Cache-Control" content="max-age=3600">
<title>{{.Name}}</title>
<p id="v1">name={{.Name}} state={{.State}} error={{.Error}} events={{.EventsPath}} retry={{.Refresh}}/{{.RetryAfter}} progress={{.Progress}}</p>
<p id="msg">{{.Message}}</p>
`

// page <file>: browsers get the site's own loading and error page, with
// the guest's name, state, events path and retry time; the status code,
// no-store and Retry-After stay the handler's. The file is read with the
// config: a reload shows an edited page, a broken template fails the
// load.
func TestPageTemplate(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100, Name: "web", StartDelay: time.Second}, pvesim.GuestSpec{VMID: 101, Name: "wiki"})
	e.sim.FailStarts(101, "startup for container '101' failed")
	file := filepath.Join(e.dir, "wake.html")
	if err := os.WriteFile(file, []byte(testPage), 0o600); err != nil {
		t.Fatal(err)
	}
	sites := func(extra string) []string {
		return []string{
			e.wakeSite("100", "page "+file+"\n\t\tevents_path /_wake"+extra),
			e.site("g101.test", "101", "page "+file, ""),
		}
	}
	e.start(sites("")...)
	e.waitPolls(2) // the names are known
	nav := []string{"Accept: text/html", "Sec-Fetch-Mode: navigate"}
	a := e.get("/", nav...)
	if a.code != 503 || a.header.Get("Cache-Control") != "no-store" || a.header.Get("Retry-After") != "2" ||
		a.header.Get("X-Proxmox-Wake") != "loading" || !strings.HasPrefix(a.header.Get("Content-Type"), "text/html") {
		t.Fatalf("loading page: %d %v", a.code, a.header)
	}
	if !strings.Contains(a.body, `<p id="v1">name=web state=starting error=false events=/_wake retry=2/2 progress=5</p>`) ||
		!strings.Contains(a.body, "Waking up…") || strings.Contains(a.body, "EventSource") {
		t.Fatalf("loading page body:\n%s", a.body)
	}
	// The failed wake (an API client waited for it), then a browser.
	if a := e.get("/", "Host: g101.test", "Accept: application/json"); !strings.Contains(a.body, `"error":`) {
		t.Fatalf("API answer: %s", a.body)
	}
	a = e.get("/", append(nav, "Host: g101.test")...)
	if a.code != 503 || a.header.Get("Cache-Control") != "no-store" || a.header.Get("Retry-After") != "1" ||
		!strings.Contains(a.body, `name=wiki state=failed error=true events=/.well-known/proxmox-wake/events retry=1/1 progress=100`) ||
		!strings.Contains(a.body, "The last start failed; next try in") || strings.Contains(a.body, "startup for container") {
		t.Fatalf("error page: %d %v\n%q", a.code, a.header, a.body)
	}

	// An edited page is read by the next config.
	if err := os.WriteFile(file, []byte(strings.Replace(testPage, `id="v1"`, `id="v2"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	e.reload(sites("\n\t\tshow_details")...)
	if a := e.get("/", append(nav, "Host: g101.test")...); !strings.Contains(a.body, `<p id="v2">name=wiki`) {
		t.Fatalf("page not reloaded:\n%s", a.body)
	}

	// A broken template fails the config load, saying what is wrong; the
	// running config stays.
	for tmpl, want := range map[string]string{
		"{{.Nope}}":         `can't evaluate field Nope`,
		"{{if .Error}}oops": `unexpected EOF`,
	} {
		if err := os.WriteFile(file, []byte(tmpl), 0o600); err != nil {
			t.Fatal(err)
		}
		js, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(e.globals("")+strings.Join(sites(""), "\n")), nil)
		if err != nil {
			t.Fatal(err)
		}
		err = validateJSON(js)
		if err == nil || !strings.Contains(err.Error(), "page "+file) || !strings.Contains(err.Error(), want) {
			t.Fatalf("template %q: %v", tmpl, err)
		}
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	js, _, _ := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(e.globals("")+strings.Join(sites(""), "\n")), nil)
	if err := validateJSON(js); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("missing page: %v", err)
	}
	if a := e.get("/", append(nav, "Host: g101.test")...); !strings.Contains(a.body, `<p id="v2">name=wiki`) {
		t.Fatalf("running config lost its page:\n%s", a.body)
	}
}

// use_handle_errors: the handler's error answers go to the site's
// handle_errors, with {http.proxmox_wake.*} placeholders, the status
// code and the handler's Retry-After and no-store; the loading page
// stays the handler's. Without it, handle_errors does not see them.
func TestHandleErrorsPlaceholders(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100, Name: "web"}, pvesim.GuestSpec{VMID: 101, Name: "wiki", StartDelay: time.Second})
	e.sim.FailStarts(100, "startup for container '100' failed")
	handleErrors := `handle_errors {
		respond "{err.status_code} state={http.proxmox_wake.state} guest={http.proxmox_wake.guest} error={http.proxmox_wake.error} retry={http.proxmox_wake.retry_after}"
	}`
	e.start(
		e.site("127.0.0.1", "100", "use_handle_errors", handleErrors),
		e.site("g101.test", "101", "use_handle_errors\n\t\thold_timeout 200ms", handleErrors),
		e.site("plain.test", "100", "", handleErrors),
	)
	e.waitPolls(2)
	a := e.get("/api")
	if a.code != 503 || a.body != "503 state=failed guest=web error=The guest could not be started. retry=1" ||
		a.header.Get("Retry-After") != "1" || a.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("failed wake through handle_errors: %d %v %q", a.code, a.header, a.body)
	}
	// A browser during the back-off: the error page goes there too.
	a = e.get("/", "Accept: text/html", "Sec-Fetch-Mode: navigate")
	if a.code != 503 || !strings.HasPrefix(a.body, "503 state=failed guest=web error=The last start failed; next try in") {
		t.Fatalf("error page through handle_errors: %d %q", a.code, a.body)
	}
	// A hold that times out while the guest starts.
	a = e.get("/api", "Host: g101.test")
	if a.code != 503 || !strings.HasPrefix(a.body, "503 state=starting guest=wiki error=The service is starting") {
		t.Fatalf("hold timeout through handle_errors: %d %q", a.code, a.body)
	}
	// The loading page is no error.
	a = e.get("/", "Host: g101.test", "Accept: text/html", "Sec-Fetch-Mode: navigate")
	if a.code != 503 || !strings.Contains(a.body, "EventSource") || a.header.Get("X-Proxmox-Wake") != "loading" {
		t.Fatalf("loading page: %d %q", a.code, a.body)
	}
	// Without use_handle_errors the handler answers itself.
	a = e.get("/api", "Host: plain.test")
	if a.code != 503 || !strings.Contains(a.body, `"error":"The last start failed; next try in`) {
		t.Fatalf("without use_handle_errors: %d %q", a.code, a.body)
	}
}
