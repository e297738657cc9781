package wake

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// Requests as Caddy's servers present them: websockets over HTTP/1.1,
// HTTP/2 (Go's server: CONNECT with the :protocol pseudo-header) and
// HTTP/3 (quic-go: CONNECT with the protocol in r.Proto) are streams
// everywhere: never the loading page, counted and watched as streams.
func TestStreamsAndPages(t *testing.T) {
	req := func(method string, major int, proto string, headers ...string) *http.Request {
		r := httptest.NewRequest(method, "http://app.example.com/chat", nil)
		r.ProtoMajor, r.Proto = major, proto
		for i := 0; i+1 < len(headers); i += 2 {
			r.Header.Set(headers[i], headers[i+1])
		}
		return r
	}
	for _, c := range []struct {
		name   string
		r      *http.Request
		stream bool
		// the page, per mode: auto, page, hold
		auto, page bool
	}{
		{"browser navigation", req("GET", 1, "HTTP/1.1", "Sec-Fetch-Mode", "navigate", "Accept", "text/html"), false, true, true},
		{"HTML accepted, no fetch metadata", req("GET", 1, "HTTP/1.1", "Accept", "text/html,*/*"), false, true, true},
		{"API call", req("GET", 1, "HTTP/1.1", "Accept", "application/json"), false, false, true},
		{"form post", req("POST", 2, "HTTP/2.0", "Accept", "text/html"), false, false, true},
		{"websocket over HTTP/1.1", req("GET", 1, "HTTP/1.1", "Upgrade", "websocket", "Connection", "Upgrade", "Accept", "text/html"), true, false, false},
		{"websocket over HTTP/2", req("CONNECT", 2, "HTTP/2.0", ":protocol", "websocket", "Sec-Websocket-Version", "13"), true, false, false},
		{"websocket over HTTP/3", req("CONNECT", 3, "websocket", "Sec-Websocket-Version", "13"), true, false, false},
		{"CONNECT tunnel", req("CONNECT", 1, "HTTP/1.1"), true, false, false},
		{"event stream", req("GET", 2, "HTTP/2.0", "Accept", "text/event-stream", "Sec-Fetch-Mode", "cors"), true, false, false},
		{"event stream navigated to", req("GET", 1, "HTTP/1.1", "Accept", "text/event-stream", "Sec-Fetch-Mode", "navigate"), true, false, false},
	} {
		if got := isStream(c.r); got != c.stream {
			t.Errorf("%s: stream %v, want %v", c.name, got, c.stream)
		}
		for mode, want := range map[string]bool{"": c.auto, "auto": c.auto, "page": c.page, "hold": false} {
			if got := wantsPage(c.r, mode); got != want {
				t.Errorf("%s, mode %q: page %v, want %v", c.name, mode, got, want)
			}
		}
	}
}
