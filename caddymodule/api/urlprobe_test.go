package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestRefusedKind(t *testing.T) {
	for _, c := range []struct{ ip, kind string }{
		{"127.0.0.1", "loopback"},
		{"127.8.9.10", "loopback"},
		{"::1", "loopback"},
		{"::ffff:127.0.0.1", "loopback"},
		{"0.0.0.0", "unspecified"},
		{"::", "unspecified"},
		{"169.254.169.254", "link-local"},
		{"fe80::1", "link-local"},
		{"224.0.0.1", "link-local"}, // link-local multicast
		{"239.1.2.3", "multicast"},
		{"10.0.0.1", ""}, // private networks (a local mirror) are allowed
		{"192.168.1.10", ""},
		{"fd00::1", ""},
		{"93.184.216.34", ""},
	} {
		if got := refusedKind(net.ParseIP(c.ip)); got != c.kind {
			t.Errorf("refusedKind(%s) = %q, want %q", c.ip, got, c.kind)
		}
	}
}

// Names are checked on the address dialled: localhost resolves to loopback.
func TestProbeRefusesNamesOfLoopback(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	_, err := probeURL(context.Background(), "http://localhost:"+port+"/x.iso", true, 2*time.Second)
	var refused *refusedAddrError
	if !errors.As(err, &refused) || refused.kind != "loopback" {
		t.Fatalf("probe of localhost: %v", err)
	}
	for _, raw := range []string{"http://[::ffff:127.0.0.1]/x.iso", "gopher://mirror.example/x.iso", "http:///x.iso"} {
		if _, err := checkProbeURL(raw); err == nil {
			t.Errorf("checkProbeURL(%s) allowed", raw)
		}
	}
}
