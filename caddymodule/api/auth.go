package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// identity is who a request acts as.
type identity struct {
	// UserID is user@realm.
	UserID string
	// TokenID is user@realm!name for API-token requests.
	TokenID string
	// ViaTicket is set for cookie/ticket auth, which needs a CSRF token on
	// writes.
	ViaTicket bool
}

// ID is the id PVE records in task UPIDs: the token id or the user id.
func (id identity) ID() string {
	if id.TokenID != "" {
		return id.TokenID
	}
	return id.UserID
}

// authenticator checks credentials: API tokens, tickets from
// POST /access/ticket, and users authenticated by a Caddy handler in front.
type authenticator struct {
	tokens     map[string]string // token id -> secret
	users      map[string]string // user id -> password
	ticketKey  []byte
	csrfKey    []byte
	caddyRealm string // "" = do not trust Caddy authentication
	noAuth     bool
	now        func() time.Time
}

func newAuthenticator(key []byte) *authenticator {
	return &authenticator{
		tokens:    map[string]string{},
		users:     map[string]string{},
		ticketKey: subkey(key, "pve-ticket"),
		csrfKey:   subkey(key, "pve-csrf"),
		now:       time.Now,
	}
}

// subkey separates the ticket and CSRF keys, so that one kind of token can
// never be replayed as the other.
func subkey(key []byte, purpose string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(purpose))
	return m.Sum(nil)
}

// authValue is pveproxy's extract_auth_value, the regular expression
// /(?:^|\s)KEY(?:=| )([^;]*)/ written out: it runs on every request, and
// the regexp cost more than the rest of authenticating.
func authValue(header, key string) (string, bool) {
	for from := 0; ; {
		i := strings.Index(header[from:], key)
		if i < 0 {
			return "", false
		}
		i += from
		end := i + len(key)
		if (i == 0 || isAuthSpace(header[i-1])) && end < len(header) && (header[end] == '=' || header[end] == ' ') {
			v := header[end+1:]
			if j := strings.IndexByte(v, ';'); j >= 0 {
				v = v[:j]
			}
			return uriUnescape(v), true
		}
		from = i + 1
	}
}

// isAuthSpace is \s of Go's regular expressions.
func isAuthSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r'
}

// uriUnescape decodes %XX only; '+' stays '+', as in Perl's uri_unescape.
func uriUnescape(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isHex(c byte) bool {
	return ('0' <= c && c <= '9') || ('a' <= c && c <= 'f') || ('A' <= c && c <= 'F')
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

// authenticate returns the caller's identity, or a 401 like pveproxy's.
func (a *authenticator) authenticate(r *http.Request) (identity, *apiError) {
	if a.noAuth {
		return identity{UserID: "root@pam"}, nil
	}
	ticket, authz, ok := credentials(r)
	if !ok {
		return identity{}, newError(http.StatusUnauthorized, "Authentication failed!")
	}
	if ticket != "" {
		user, _, err := translate.VerifyTicket(a.ticketKey, ticket, a.now(), translate.TicketLifetime)
		if err != nil || !a.knownUser(user) {
			return identity{}, newError(http.StatusUnauthorized, "Authentication failed!")
		}
		id := identity{UserID: user, ViaTicket: true}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if !translate.VerifyCSRF(a.csrfKey, user, r.Header.Get("CSRFPreventionToken"), a.now()) {
				return identity{}, newError(http.StatusUnauthorized, "Permission denied - invalid csrf token")
			}
		}
		return id, nil
	}
	if v, ok := authValue(authz, "PVEAPIToken"); ok {
		tokenID, secret, ok := cutLast(v, "=")
		if !ok || !a.checkToken(tokenID, secret) {
			return identity{}, newError(http.StatusUnauthorized, "Authentication failed!")
		}
		user, _, _ := strings.Cut(tokenID, "!")
		return identity{UserID: user, TokenID: tokenID}, nil
	}
	if a.caddyRealm != "" {
		if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
			if user, _ := repl.GetString("http.auth.user.id"); user != "" {
				if !strings.Contains(user, "@") {
					user += "@" + a.caddyRealm
				}
				return identity{UserID: user}, nil
			}
		}
	}
	return identity{}, newError(http.StatusUnauthorized, "No ticket")
}

// credentials returns the request's ticket (cookie first, then the
// Authorization header, as pveproxy looks them up) and its Authorization
// header. Requests whose credentials are ambiguous are refused (ok false)
// rather than resolved by a rule a proxy in front might apply differently:
// several Authorization headers, several different PVEAuthCookie cookies,
// or a cookie and a header ticket that disagree.
func credentials(r *http.Request) (ticket, authz string, ok bool) {
	if len(r.Header.Values("Authorization")) > 1 {
		return "", "", false
	}
	authz = r.Header.Get("Authorization")
	for _, c := range r.CookiesNamed("PVEAuthCookie") {
		v := uriUnescape(c.Value)
		if ticket != "" && v != ticket {
			return "", "", false
		}
		ticket = v
	}
	if v, found := authValue(authz, "PVEAuthCookie"); found {
		if ticket != "" && v != ticket {
			return "", "", false
		}
		ticket = v
	}
	return ticket, authz, true
}

func cutLast(s, sep string) (string, string, bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return "", "", false
	}
	return s[:i], s[i+len(sep):], true
}

// checkToken compares in constant time; an unknown token id still costs
// one comparison so that timing does not reveal which ids exist.
func (a *authenticator) checkToken(id, secret string) bool {
	want, ok := a.tokens[id]
	if !ok {
		want = "\x00unknown-token"
	}
	eq := subtle.ConstantTimeCompare([]byte(want), []byte(secret)) == 1
	return ok && eq
}

// checkPassword verifies a login; a valid ticket of the same user is also
// accepted as the password, which is how PVE clients renew tickets.
func (a *authenticator) checkPassword(user, password string) bool {
	if strings.HasPrefix(password, "PVE:") {
		u, _, err := translate.VerifyTicket(a.ticketKey, password, a.now(), translate.TicketLifetime)
		return err == nil && u == user && a.knownUser(user)
	}
	want, ok := a.users[user]
	if !ok {
		want = "\x00unknown-user"
	}
	eq := subtle.ConstantTimeCompare([]byte(want), []byte(password)) == 1
	return ok && eq
}

// knownUser tells whether a ticket's user may still log in: removing a user
// from the config revokes their tickets.
func (a *authenticator) knownUser(user string) bool {
	_, ok := a.users[user]
	return ok
}

// issue returns a fresh ticket and CSRF token for user.
func (a *authenticator) issue(user string) (ticket, csrf string) {
	now := a.now()
	return translate.SignTicket(a.ticketKey, user, now), translate.CSRFToken(a.csrfKey, user, now)
}
