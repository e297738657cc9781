package api

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// FuzzAuthenticate throws arbitrary Authorization, Cookie and
// CSRFPreventionToken headers (several of each, separated by '\n') at the
// authenticator. Whatever it accepts must be backed by a real credential:
// the token's secret or the one valid ticket (and, on writes, its CSRF
// token) the fuzzer was given; everything else is a 401.
func FuzzAuthenticate(f *testing.F) {
	const secret = "5f0c1a2e-3b4d-4c5e-8f90-a1b2c3d4e5f6"
	a := newAuthenticator([]byte("fuzz-auth-key"))
	a.tokens["root@pam!ci"] = secret
	a.users["alice@pve"] = "pw"
	now := time.Unix(1_700_000_000, 0)
	a.now = func() time.Time { return now }
	ticket, csrf := translate.SignTicket(a.ticketKey, "alice@pve", now.Add(-time.Minute)), translate.CSRFToken(a.csrfKey, "alice@pve", now.Add(-time.Minute))
	sig := ticket[strings.LastIndex(ticket, ":")+1:]
	seeds := [][4]string{
		{"GET", "PVEAPIToken=root@pam!ci=" + secret, "", ""},
		{"GET", "PVEAPIToken root@pam%21ci%3D" + secret, "", ""},
		{"POST", "", "PVEAuthCookie=" + url.QueryEscape(ticket), csrf},
		{"PUT", "PVEAuthCookie=" + ticket, "", csrf},
		{"GET", "", "PVEAuthCookie=" + ticket + "; PVEAuthCookie=PVE:root@pam:00000000::x", ""},
		{"GET", "PVEAPIToken=root@pam!ci=" + secret + "\nPVEAPIToken=root@pam!ci=x", "", ""},
		{"DELETE", "PVEAuthCookie=" + ticket, "PVEAuthCookie=" + ticket, csrf + "\n" + csrf},
		{"GET", "PVEAPIToken=ROOT@pam!ci=" + secret, "pveauthcookie=" + ticket, ""},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, method, authz, cookie, csrfHeader string) {
		r := &http.Request{Method: method, URL: &url.URL{Path: "/api2/json/nodes"}, Header: http.Header{}}
		for name, v := range map[string]string{"Authorization": authz, "Cookie": cookie, "CSRFPreventionToken": csrfHeader} {
			if v != "" {
				r.Header[name] = strings.Split(v, "\n")
			}
		}
		id, e := a.authenticate(r)
		if e != nil {
			if e.Code != http.StatusUnauthorized || e.Message == "" {
				t.Fatalf("refusal %d %q", e.Code, e.Message)
			}
			return
		}
		seen := uriUnescape(authz + cookie)
		switch {
		case id.TokenID != "":
			if id.TokenID != "root@pam!ci" || id.UserID != "root@pam" || !strings.Contains(seen, secret) {
				t.Fatalf("accepted %+v from %q", id, authz)
			}
		case id.ViaTicket:
			if id.UserID != "alice@pve" || !strings.Contains(strings.ReplaceAll(seen, `"`, ""), sig) {
				t.Fatalf("accepted %+v from %q %q", id, authz, cookie)
			}
			if method != http.MethodGet && method != http.MethodHead && !strings.Contains(csrfHeader, csrf) {
				t.Fatalf("write %s accepted with CSRF %q", method, csrfHeader)
			}
		default:
			t.Fatalf("accepted %+v without any credential", id)
		}
	})
}

// FuzzAuthValue checks authValue against the regular expression of
// pveproxy's extract_auth_value that it spells out.
func FuzzAuthValue(f *testing.F) {
	res := map[string]*regexp.Regexp{
		"PVEAuthCookie": regexp.MustCompile(`(?:^|\s)PVEAuthCookie(?:=| )([^;]*)`),
		"PVEAPIToken":   regexp.MustCompile(`(?:^|\s)PVEAPIToken(?:=| )([^;]*)`),
	}
	for _, s := range []string{
		"PVEAPIToken=root@pam!ci=secret", "PVEAPIToken root@pam%21ci%3Dx", "xPVEAPIToken=a PVEAPIToken=b;c",
		"PVEAPITokenPVEAPIToken=a", "Bearer x\tPVEAuthCookie=t;PVEAPIToken=y", "PVEAPIToken", "PVEAPIToken=", " PVEAuthCookie t",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		for key, re := range res {
			want, wantOK := "", false
			if m := re.FindStringSubmatch(header); m != nil {
				want, wantOK = uriUnescape(m[1]), true
			}
			if got, ok := authValue(header, key); got != want || ok != wantOK {
				t.Fatalf("authValue(%q, %s) = %q, %v; the regexp says %q, %v", header, key, got, ok, want, wantOK)
			}
		}
	})
}
