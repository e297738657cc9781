package api

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func TestErrorReasonPhrase(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e := paramErr("vmid", "VM 100 already exists")
		if r.URL.Path == "/missing" {
			e = missingVM("pve1", 100)
		}
		writeError(w, r, e)
	}))
	defer srv.Close()

	res, err := http.Get(srv.URL + "/missing")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 500 || res.Status != "500 Configuration file 'nodes/pve1/qemu-server/100.conf' does not exist" {
		t.Fatalf("status line %q", res.Status)
	}
	var env map[string]any
	if err := json.Unmarshal(body, &env); err != nil {
		t.Fatal(err)
	}
	if _, ok := env["data"]; !ok || env["data"] != nil {
		t.Fatalf("data must be null: %s", body)
	}
	if env["message"] != "Configuration file 'nodes/pve1/qemu-server/100.conf' does not exist\n" {
		t.Fatalf("message %q", env["message"])
	}
	if ct := res.Header.Get("Content-Type"); ct != contentType {
		t.Fatalf("content type %q", ct)
	}

	res, err = http.Get(srv.URL + "/taken")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if res.Status != "400 Parameter verification failed." || !strings.Contains(string(body), `"errors":{"vmid":"VM 100 already exists\n"}`) {
		t.Fatalf("%q %s", res.Status, body)
	}
}

func TestReasonPhraseCannotInjectHeaders(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, newError(500, "bad\r\nSet-Cookie: x=1\r\n\r\nHTTP/1.1 200 OK"))
	}))
	defer srv.Close()
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != "500 bad" || res.Header.Get("Set-Cookie") != "" {
		t.Fatalf("status %q headers %v", res.Status, res.Header)
	}
}

// TestErrorStatusReachesCaddysRecorder: Caddy's access log and metrics
// read the status from the recorders wrapping the handler's writer; an
// answer written on the hijacked connection must still reach them, with
// its reason phrase on the wire.
func TestErrorStatusReachesCaddysRecorder(t *testing.T) {
	recorded := make(chan int, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := caddyhttp.NewResponseRecorder(w, nil, nil)
		writeError(rec, r, newError(http.StatusForbidden, "Permission check failed (/vms/100, VM.Audit)"))
		recorded <- rec.Status()
	}))
	defer srv.Close()
	res, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.Status != "403 Permission check failed (/vms/100, VM.Audit)" {
		t.Fatalf("status line %q", res.Status)
	}
	if got := <-recorded; got != http.StatusForbidden {
		t.Fatalf("Caddy's recorder saw status %d, want 403", got)
	}
}
