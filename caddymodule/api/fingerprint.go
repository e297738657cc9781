package api

import (
	"crypto/sha256"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2/modules/caddytls"
)

// servedFingerprint is the SHA-256 fingerprint of the certificate Caddy
// serves for the request's server name, written the way PVE writes node
// fingerprints (AB:CD:...). Every "node" of this API is reached through
// this server, so clients that pin a node's certificate (bpg's nodes data
// source reads it) pin the one they are talking to. Plain HTTP has none.
func servedFingerprint(r *http.Request) string {
	if r.TLS == nil {
		return ""
	}
	name := r.TLS.ServerName
	if name == "" {
		name = r.Host
		if h, _, err := net.SplitHostPort(r.Host); err == nil {
			name = h
		}
	}
	for _, c := range caddytls.AllMatchingCertificates(strings.ToLower(name)) {
		if len(c.Certificate.Certificate) == 0 {
			continue
		}
		sum := sha256.Sum256(c.Certificate.Certificate[0])
		return strings.ReplaceAll(fmt.Sprintf("% X", sum[:]), " ", ":")
	}
	return ""
}
