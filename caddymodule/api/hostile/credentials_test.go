package hostile_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// credCase is one row of the credentials matrix: a raw request and the
// answer PVE gives it.
type credCase struct {
	group, name string
	req         string
	code        int
	reason      string // expected reason phrase; "" = any
	note        string
}

// login posts the user's password and returns the ticket and CSRF token.
func (s *server) login(form url.Values) (ticket, csrf string, a answer) {
	a = s.raw(request("POST", "/api2/json/access/ticket", nil, form.Encode()))
	var env struct {
		Data struct {
			Ticket string `json:"ticket"`
			CSRF   string `json:"CSRFPreventionToken"`
		} `json:"data"`
	}
	_ = json.Unmarshal(a.body, &env)
	return env.Data.Ticket, env.Data.CSRF, a
}

// TestCredentialsMatrix: forged, expired, tampered and replayed tickets,
// wrong CSRF tokens and token secrets, header injection, case and encoding
// tricks are all refused with PVE's 401 after the configured failure
// delay, while the same requests with the real credentials succeed. It
// logs the matrix as a table.
func TestCredentialsMatrix(t *testing.T) {
	s := start(t, keyA, "")
	ticket, csrf, a := s.login(url.Values{"username": {user}, "password": {password}})
	if a.code != 200 || ticket == "" {
		t.Fatalf("login: %s %s", a.status, a.body)
	}
	now := time.Now()
	tk, ck := subkey(keyA, "pve-ticket"), subkey(keyA, "pve-csrf")
	forge := func(u string, at time.Time) string { return url.QueryEscape(translate.SignTicket(tk, u, at)) }
	otherKey := url.QueryEscape(translate.SignTicket(subkey(keyB, "pve-ticket"), user, now))
	parts := strings.Split(ticket, ":")
	tamperedUser := strings.Join([]string{parts[0], "root@pam", parts[2], parts[3], parts[4]}, ":")
	tamperedTime := strings.Join([]string{parts[0], parts[1], fmt.Sprintf("%08X", now.Add(time.Hour).Unix()), parts[3], parts[4]}, ":")
	esc := url.QueryEscape(ticket)
	bearer := func(v string) []string { return []string{"Authorization: " + v} }
	cookie := func(v string) []string { return []string{"Cookie: PVEAuthCookie=" + v} }
	tokenAuth := "PVEAPIToken=" + tokenID + "=" + tokenSecret
	get := func(h []string) string { return request("GET", vmPath, h, "") }
	put := func(h []string) string { return request("PUT", vmPath, h, "bogus=1") }
	loginReq := func(u, p string) string {
		return request("POST", "/api2/json/access/ticket", nil, url.Values{"username": {u}, "password": {p}}.Encode())
	}
	const (
		failed  = "Authentication failed!"
		noTkt   = "No ticket"
		badCSRF = "Permission denied - invalid csrf token"
		badLgn  = "authentication failure"
		param   = "Parameter verification failed."
	)
	cases := []credCase{
		// Controls: the real credentials get through, so every refusal
		// below is about the trick, not a broken server.
		{"control", "token", get(bearer(tokenAuth)), 200, "", ""},
		{"control", "ticket cookie", get(cookie(esc)), 200, "", ""},
		{"control", "ticket in Authorization: PVEAuthCookie=", get(bearer("PVEAuthCookie=" + esc)), 200, "", ""},
		{"control", "same ticket in cookie and header", get(append(cookie(esc), bearer("PVEAuthCookie="+esc)...)), 200, "", ""},
		{"control", "ticket issued 2h-60s ago", get(cookie(forge(user, now.Add(-2*time.Hour+time.Minute)))), 200, "", ""},
		{"control", "ticket issued 4 min ahead (PVE's 5 min skew grace)", get(cookie(forge(user, now.Add(4*time.Minute)))), 200, "", ""},
		{"control", "write: ticket + CSRF", put(append(cookie(esc), "CSRFPreventionToken: "+csrf)), 400, param, "authenticated; refused for bogus=1"},
		{"control", "write: token (no CSRF needed)", put(bearer(tokenAuth)), 400, param, "authenticated; refused for bogus=1"},
		{"control", "token with %-encoded '!' and '=' and the real secret", get(bearer("PVEAPIToken=root@pam%21ci%3D" + tokenSecret)), 200, "", "accepted like PVE: the value is uri_unescape'd before the split; it carries the real secret"},
		{"control", "real token followed by spaces", get([]string{"Authorization: " + tokenAuth + "   "}), 200, "", "accepted: whitespace around a header value is not part of it (RFC 9110 5.5), Caddy strips it"},

		{"ticket", "no credentials", get(nil), 401, noTkt, ""},
		{"ticket", "forged: signed with another key", get(cookie(otherKey)), 401, failed, ""},
		{"ticket", "tampered: user swapped to root@pam", get(cookie(url.QueryEscape(tamperedUser))), 401, failed, ""},
		{"ticket", "tampered: time moved", get(cookie(url.QueryEscape(tamperedTime))), 401, failed, ""},
		{"ticket", "tampered: signature cut", get(cookie(url.QueryEscape(ticket[:len(ticket)-4]))), 401, failed, ""},
		{"ticket", "tampered: signature without base64 padding", get(cookie(url.QueryEscape(strings.TrimRight(ticket, "=")))), 401, failed, ""},
		{"ticket", "expired: issued 2h ago", get(cookie(forge(user, now.Add(-2*time.Hour)))), 401, failed, ""},
		{"ticket", "expired: issued 2h + 5 min grace ago", get(cookie(forge(user, now.Add(-2*time.Hour-5*time.Minute)))), 401, failed, ""},
		{"ticket", "expired: issued a day ago", get(cookie(forge(user, now.Add(-24*time.Hour)))), 401, failed, ""},
		{"ticket", "not yet valid: issued 6 min ahead", get(cookie(forge(user, now.Add(6*time.Minute)))), 401, failed, ""},
		{"ticket", "correctly signed, user not configured (bob@pve)", get(cookie(forge("bob@pve", now))), 401, failed, ""},
		{"ticket", "correctly signed, realm case (alice@PVE)", get(cookie(forge("alice@PVE", now))), 401, failed, ""},
		{"ticket", "correctly signed, user case (Alice@pve)", get(cookie(forge("Alice@pve", now))), 401, failed, ""},
		{"ticket", "correctly signed, homoglyph user (Cyrillic а)", get(cookie(forge("\u0430lice@pve", now))), 401, failed, ""},
		{"ticket", "correctly signed, fullwidth ＠", get(cookie(forge("alice\uff20pve", now))), 401, failed, ""},
		{"ticket", "correctly signed, user + NUL", get(cookie(forge(user+"\x00", now))), 401, failed, ""},
		{"ticket", "correctly signed, user + trailing space", get(cookie(forge(user+" ", now))), 401, failed, ""},
		{"ticket", "PVE:user:password (corral style)", get(cookie("PVE:alice@pve:s3cret")), 401, failed, ""},
		{"ticket", "ticket sent as an API token", get(bearer("PVEAPIToken=" + ticket)), 401, failed, ""},
		{"ticket", "CRLF %-encoded after the ticket", get(cookie(esc + "%0D%0ASet-Cookie:%20x=1")), 401, failed, ""},

		{"csrf", "write: ticket, no CSRF", put(cookie(esc)), 401, badCSRF, ""},
		{"csrf", "write: CSRF of another user", put(append(cookie(esc), "CSRFPreventionToken: "+translate.CSRFToken(ck, "bob@pve", now))), 401, badCSRF, ""},
		{"csrf", "write: CSRF issued 2h + 1 min ago", put(append(cookie(esc), "CSRFPreventionToken: "+translate.CSRFToken(ck, user, now.Add(-2*time.Hour-time.Minute)))), 401, badCSRF, ""},
		{"csrf", "write: CSRF signed with another key", put(append(cookie(esc), "CSRFPreventionToken: "+translate.CSRFToken(subkey(keyB, "pve-csrf"), user, now))), 401, badCSRF, ""},
		{"csrf", "write: the ticket as CSRF", put(append(cookie(esc), "CSRFPreventionToken: "+ticket)), 401, badCSRF, ""},
		{"csrf", "write: CSRF with lower-case hex time", put(append(cookie(esc), "CSRFPreventionToken: "+strings.ToLower(csrf[:8])+csrf[8:])), 401, badCSRF, ""},
		{"csrf", "write: CSRF without a ticket", put([]string{"CSRFPreventionToken: " + csrf}), 401, noTkt, ""},

		{"token", "wrong secret", get(bearer("PVEAPIToken=" + tokenID + "=0d7c3c1e-0000-4c33-9d2a-3f1f5e6a7b8c")), 401, failed, ""},
		{"token", "secret upper-cased", get(bearer("PVEAPIToken=" + tokenID + "=" + strings.ToUpper(tokenSecret))), 401, failed, ""},
		{"token", "real secret, unknown token id", get(bearer("PVEAPIToken=root@pam!other=" + tokenSecret)), 401, failed, ""},
		{"token", "no secret", get(bearer("PVEAPIToken=" + tokenID)), 401, failed, ""},
		{"token", "scheme lower-case (pveapitoken=)", get(bearer("pveapitoken=" + tokenID + "=" + tokenSecret)), 401, noTkt, ""},
		{"token", "scheme upper-case (PVEAPITOKEN=)", get(bearer("PVEAPITOKEN=" + tokenID + "=" + tokenSecret)), 401, noTkt, ""},
		{"token", "user case (ROOT@pam!ci)", get(bearer("PVEAPIToken=ROOT@pam!ci=" + tokenSecret)), 401, failed, ""},
		{"token", "realm case (root@PAM!ci)", get(bearer("PVEAPIToken=root@PAM!ci=" + tokenSecret)), 401, failed, ""},
		{"token", "token name case (root@pam!CI)", get(bearer("PVEAPIToken=root@pam!CI=" + tokenSecret)), 401, failed, ""},
		{"token", "homoglyph id (Cyrillic о in root)", get(bearer("PVEAPIToken=r\u043e\u043et@pam!ci=" + tokenSecret)), 401, failed, ""},
		{"token", "%-encoded separators, wrong secret", get(bearer("PVEAPIToken=root@pam%21ci%3Dnope")), 401, failed, ""},
		{"token", "secret + %00", get(bearer(tokenAuth + "%00")), 401, failed, ""},
		{"token", "secret + %0D%0A", get(bearer(tokenAuth + "%0D%0A")), 401, failed, ""},
		{"token", "secret + %20 (encoded trailing space)", get(bearer(tokenAuth + "%20")), 401, failed, ""},
		{"token", "space before '=' (id 'root@pam!ci ')", get(bearer("PVEAPIToken=" + tokenID + " =" + tokenSecret)), 401, failed, ""},
		{"token", "space after '=' (secret ' ...')", get(bearer("PVEAPIToken=" + tokenID + "= " + tokenSecret)), 401, failed, ""},
		{"token", "wrong token; then the real one after ';'", get(bearer("PVEAPIToken=" + tokenID + "=nope; " + tokenAuth)), 401, failed, ""},
		{"token", "Basic auth with the token id and secret", get(bearer("Basic " + basic(tokenID, tokenSecret))), 401, noTkt, ""},
		{"token", "Bearer <secret>", get(bearer("Bearer " + tokenSecret)), 401, noTkt, ""},

		{"injection", "LF-injected second Authorization (wrong, then real)", get([]string{"Authorization: PVEAPIToken=" + tokenID + "=nope\nAuthorization: " + tokenAuth}), 401, failed, "two headers: ambiguous, refused"},
		{"injection", "duplicate Authorization (real, then forged)", get([]string{"Authorization: " + tokenAuth, "Authorization: PVEAPIToken=" + tokenID + "=nope"}), 401, failed, ""},
		{"injection", "duplicate Authorization (forged, then real)", get([]string{"Authorization: PVEAPIToken=" + tokenID + "=nope", "Authorization: " + tokenAuth}), 401, failed, ""},
		{"injection", "duplicate Authorization, both real", get([]string{"Authorization: " + tokenAuth, "Authorization: " + tokenAuth}), 401, failed, "strict: a proxy may pick either"},
		{"injection", "two PVEAuthCookie (real; forged)", get([]string{"Cookie: PVEAuthCookie=" + esc + "; PVEAuthCookie=" + otherKey}), 401, failed, ""},
		{"injection", "two PVEAuthCookie (forged; real)", get([]string{"Cookie: PVEAuthCookie=" + otherKey + "; PVEAuthCookie=" + esc}), 401, failed, ""},
		{"injection", "two Cookie headers (real, forged)", get([]string{"Cookie: PVEAuthCookie=" + esc, "Cookie: PVEAuthCookie=" + otherKey}), 401, failed, ""},
		{"injection", "cookie real, header ticket forged", get(append(cookie(esc), bearer("PVEAuthCookie="+otherKey)...)), 401, failed, ""},
		{"injection", "cookie forged, header ticket real", get(append(cookie(otherKey), bearer("PVEAuthCookie="+esc)...)), 401, failed, ""},
		{"injection", "cookie forged, real token", get(append(cookie(otherKey), bearer(tokenAuth)...)), 401, failed, "the ticket is checked first, as in pveproxy"},
		{"injection", "obs-fold: secret on a continuation line", get([]string{"Authorization: PVEAPIToken=" + tokenID + "=\r\n " + tokenSecret}), 401, failed, "the line is unfolded with a space into the secret"},
		{"injection", "bare CR inside the value", get([]string{"Authorization: " + tokenAuth + "\rX-Evil: 1"}), 400, "", "refused by the HTTP parser"},
		{"injection", "raw NUL inside the value", get([]string{"Authorization: " + tokenAuth + "\x00"}), 400, "", "refused by the HTTP parser"},
		{"injection", "raw NUL inside the cookie", get([]string{"Cookie: PVEAuthCookie=" + esc + "\x00"}), 400, "", "refused by the HTTP parser"},

		{"login", "wrong password", loginReq(user, "S3cret"), 401, badLgn, ""},
		{"login", "user case (ALICE@pve)", loginReq("ALICE@pve", password), 401, badLgn, ""},
		{"login", "realm case (alice@PVE)", loginReq("alice@PVE", password), 401, badLgn, ""},
		{"login", "homoglyph user (Cyrillic а)", loginReq("\u0430lice@pve", password), 401, badLgn, ""},
		{"login", "user + trailing space", loginReq(user+" ", password), 401, badLgn, ""},
		{"login", "user + NUL", loginReq(user+"\x00", password), 400, param, "NUL separates repeated values: refused as a repeated parameter before any credential check"},
		{"login", "password + NUL", loginReq(user, password+"\x00"), 400, param, "same"},
		{"login", "renewal with an expired ticket", loginReq(user, translate.SignTicket(tk, user, now.Add(-3*time.Hour))), 401, badLgn, ""},
		{"login", "renewal with another user's ticket", loginReq("bob@pve", ticket), 401, badLgn, ""},
		{"login", "renewal with a ticket of another key", loginReq(user, translate.SignTicket(subkey(keyB, "pve-ticket"), user, now)), 401, badLgn, ""},
	}
	results := make([]answer, len(cases))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, c := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i] = s.raw(c.req)
		}()
	}
	wg.Wait()
	var table strings.Builder
	fmt.Fprintf(&table, "\n| group | case | expected | got | failure delay ≥ %s |\n|---|---|---|---|---|\n", failDelay)
	for i, c := range cases {
		got := results[i]
		want := fmt.Sprint(c.code)
		if c.reason != "" {
			want += " " + c.reason
		}
		delay := "n/a"
		if got.code == 401 {
			delay = "yes"
			if got.elapsed < failDelay {
				delay = fmt.Sprintf("NO (%s)", got.elapsed.Round(time.Millisecond))
			}
		}
		gotS := got.status
		if got.err != nil {
			gotS = "error: " + got.err.Error()
		}
		note := ""
		if c.note != "" {
			note = " — " + c.note
		}
		fmt.Fprintf(&table, "| %s | %s | %s | %s%s | %s |\n", c.group, c.name, want, gotS, note, delay)
		switch {
		case got.err != nil:
			t.Errorf("%s/%s: %v", c.group, c.name, got.err)
		case got.code != c.code || (c.reason != "" && got.status != want):
			t.Errorf("%s/%s: got %q, want %q (%s)", c.group, c.name, got.status, want, got.body)
		case got.code == 401 && got.elapsed < failDelay:
			t.Errorf("%s/%s: 401 after %s, before the %s failure delay", c.group, c.name, got.elapsed, failDelay)
		case got.code == 401 && !pveShaped(got.body):
			t.Errorf("%s/%s: 401 body not PVE-shaped: %q", c.group, c.name, got.body)
		}
	}
	t.Log(table.String())
}

// TestTicketReplayAfterRotation: a ticket (and its CSRF token) issued
// under ticket_key A keeps working across a reload with the same key and
// is refused, with the failure delay, once the config is reloaded with
// ticket_key B; logging in again under B works.
func TestTicketReplayAfterRotation(t *testing.T) {
	s := start(t, keyA, "")
	ticket, csrf, a := s.login(url.Values{"username": {user}, "password": {password}})
	if a.code != 200 {
		t.Fatalf("login: %s", a.status)
	}
	esc := url.QueryEscape(ticket)
	read := func(tk string) answer {
		return s.raw(request("GET", vmPath, []string{"Cookie: PVEAuthCookie=" + tk}, ""))
	}
	write := func(tk, cs string) answer {
		return s.raw(request("PUT", vmPath, []string{"Cookie: PVEAuthCookie=" + tk, "CSRFPreventionToken: " + cs}, "bogus=1"))
	}
	if got := read(esc); got.code != 200 {
		t.Fatalf("fresh ticket: %s", got.status)
	}
	s.reload(keyA, "")
	if got := read(esc); got.code != 200 {
		t.Fatalf("after a reload with the same key: %s", got.status)
	}
	s.reload(keyB, "")
	rows := []struct {
		name string
		got  answer
		want string
	}{
		{"read with the key-A ticket", read(esc), "401 Authentication failed!"},
		{"write with the key-A ticket and CSRF", write(esc, csrf), "401 Authentication failed!"},
		{"renewal with the key-A ticket as password", s.raw(request("POST", "/api2/json/access/ticket", nil, url.Values{"username": {user}, "password": {ticket}}.Encode())), "401 authentication failure"},
	}
	for _, r := range rows {
		t.Logf("| rotation | %s | %s | %s | elapsed %s |", r.name, r.want, r.got.status, r.got.elapsed.Round(time.Millisecond))
		if r.got.status != r.want || r.got.elapsed < failDelay || !pveShaped(r.got.body) {
			t.Errorf("%s: got %q after %s, want %q after >= %s", r.name, r.got.status, r.got.elapsed, r.want, failDelay)
		}
	}
	ticketB, csrfB, a := s.login(url.Values{"username": {user}, "password": {password}})
	if a.code != 200 {
		t.Fatalf("login under key B: %s", a.status)
	}
	if got := read(url.QueryEscape(ticketB)); got.code != 200 {
		t.Fatalf("key-B ticket: %s", got.status)
	}
	if got := write(url.QueryEscape(ticketB), csrf); got.code != 401 {
		t.Fatalf("key-B ticket with the key-A CSRF token: %s", got.status)
	}
	if got := write(url.QueryEscape(ticketB), csrfB); got.code != 400 {
		t.Fatalf("key-B ticket and CSRF on a bad write: %s, want 400", got.status)
	}
}
