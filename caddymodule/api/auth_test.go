package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

func testAuth() *authenticator {
	a := newAuthenticator([]byte("test-key"))
	a.tokens["root@pam!ci"] = "5f0c1a2e-3b4d"
	a.users["alice@pve"] = "s3cret"
	return a
}

func TestAuthenticate(t *testing.T) {
	a := testAuth()
	ticket, csrf := a.issue("alice@pve")
	other := newAuthenticator([]byte("other-key"))
	forged, _ := other.issue("alice@pve")
	old := testAuth()
	old.now = func() time.Time { return time.Now().Add(-3 * time.Hour) }
	expired, _ := old.issue("alice@pve")

	cases := []struct {
		name    string
		method  string
		set     func(r *http.Request)
		wantID  string
		wantErr string
	}{
		{"no credentials", "GET", func(r *http.Request) {}, "", "No ticket"},
		{"token", "POST", func(r *http.Request) { r.Header.Set("Authorization", "PVEAPIToken=root@pam!ci=5f0c1a2e-3b4d") }, "root@pam!ci", ""},
		{"token with space form", "GET", func(r *http.Request) { r.Header.Set("Authorization", "PVEAPIToken root@pam!ci=5f0c1a2e-3b4d") }, "root@pam!ci", ""},
		{"token wrong secret", "GET", func(r *http.Request) { r.Header.Set("Authorization", "PVEAPIToken=root@pam!ci=nope") }, "", "Authentication failed!"},
		{"unknown token", "GET", func(r *http.Request) { r.Header.Set("Authorization", "PVEAPIToken=x@pam!y=5f0c1a2e-3b4d") }, "", "Authentication failed!"},
		{"cookie ticket GET", "GET", func(r *http.Request) { r.AddCookie(&http.Cookie{Name: "PVEAuthCookie", Value: ticket}) }, "alice@pve", ""},
		{"header ticket GET (Telmate)", "GET", func(r *http.Request) { r.Header.Set("Authorization", "PVEAuthCookie="+ticket) }, "alice@pve", ""},
		{"ticket write without CSRF", "POST", func(r *http.Request) { r.AddCookie(&http.Cookie{Name: "PVEAuthCookie", Value: ticket}) }, "", "invalid csrf token"},
		{"ticket write with CSRF", "POST", func(r *http.Request) {
			r.AddCookie(&http.Cookie{Name: "PVEAuthCookie", Value: ticket})
			r.Header.Set("CSRFPreventionToken", csrf)
		}, "alice@pve", ""},
		{"ticket with another user's CSRF", "PUT", func(r *http.Request) {
			r.AddCookie(&http.Cookie{Name: "PVEAuthCookie", Value: ticket})
			_, c := a.issue("bob@pve")
			r.Header.Set("CSRFPreventionToken", c)
		}, "", "invalid csrf token"},
		{"forged ticket", "GET", func(r *http.Request) { r.AddCookie(&http.Cookie{Name: "PVEAuthCookie", Value: forged}) }, "", "Authentication failed!"},
		{"expired ticket", "GET", func(r *http.Request) { r.AddCookie(&http.Cookie{Name: "PVEAuthCookie", Value: expired}) }, "", "Authentication failed!"},
		{"url-escaped cookie", "GET", func(r *http.Request) {
			r.Header.Set("Cookie", "PVEAuthCookie="+strings.ReplaceAll(ticket, ":", "%3A"))
		}, "alice@pve", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(c.method, "/api2/json/version", nil)
			c.set(r)
			id, e := a.authenticate(r)
			if c.wantErr != "" {
				if e == nil || e.Code != http.StatusUnauthorized || !strings.Contains(e.Message, c.wantErr) {
					t.Fatalf("want 401 %q, got %v (%+v)", c.wantErr, e, id)
				}
				return
			}
			if e != nil {
				t.Fatalf("unexpected error %v", e)
			}
			if id.ID() != c.wantID {
				t.Fatalf("identity %q, want %q", id.ID(), c.wantID)
			}
		})
	}
}

func TestCheckPassword(t *testing.T) {
	a := testAuth()
	if !a.checkPassword("alice@pve", "s3cret") || a.checkPassword("alice@pve", "S3cret") || a.checkPassword("bob@pve", "s3cret") {
		t.Fatal("password check")
	}
	ticket, _ := a.issue("alice@pve")
	if !a.checkPassword("alice@pve", ticket) {
		t.Fatal("a valid ticket must renew")
	}
	if a.checkPassword("root@pam", ticket) {
		t.Fatal("a ticket must not log in another user")
	}
	delete(a.users, "alice@pve")
	if a.checkPassword("alice@pve", ticket) {
		t.Fatal("removing the user must revoke renewal")
	}
}

func TestUriUnescape(t *testing.T) {
	for in, want := range map[string]string{"a%3Ab": "a:b", "a+b": "a+b", "%zz": "%zz", "%4": "%4", "%41%42": "AB"} {
		if got := uriUnescape(in); got != want {
			t.Errorf("uriUnescape(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestAuthFailureDelay: failures wait like pveproxy (a lower bound only:
// the machine may be slow, never fast).
func TestAuthFailureDelay(t *testing.T) {
	h := &APIHandler{delay: 300 * time.Millisecond, logger: zap.NewNop()}
	r := httptest.NewRequest("GET", "/api2/json/nodes", nil)
	w := httptest.NewRecorder()
	start := time.Now()
	h.failAuth(w, r, newError(http.StatusUnauthorized, "No ticket"))
	if d := time.Since(start); d < 300*time.Millisecond || w.Code != 401 {
		t.Fatalf("answered %d after %v", w.Code, d)
	}
}
