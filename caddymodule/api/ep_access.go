package api

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

func (h *APIHandler) getAccessIndex(q *request) (any, *apiError) {
	return subdirs("acl", "domains", "groups", "permissions", "roles", "ticket", "users"), nil
}

func (h *APIHandler) getTicket(q *request) (any, *apiError) { return nil, nil }

func (h *APIHandler) getDomains(q *request) (any, *apiError) {
	return h.realms(), nil
}

// realms are PVE's two built-in realms, plus the realm of users a Caddy
// authentication handler signs in (trust_caddy_auth), shown as PVE shows
// an external single sign-on realm.
func (h *APIHandler) realms() []map[string]any {
	out := []map[string]any{
		{"realm": "pam", "type": "pam", "comment": "Linux PAM standard authentication"},
		{"realm": "pve", "type": "pve", "comment": "Proxmox VE authentication server", "default": 1},
	}
	if r := h.auth.caddyRealm; r != "" && r != "pam" && r != "pve" {
		out = append(out, map[string]any{"realm": r, "type": "openid", "comment": "Signed in by Caddy"})
	}
	return out
}

// getDomain is one realm's configuration, for callers who may audit
// /access (PVE: Realm.Allocate or Sys.Audit on /access/realm/<realm>).
func (h *APIHandler) getDomain(q *request) (any, *apiError) {
	realm := q.pathValue("realm")
	if !h.seesAccess(q) {
		return nil, permErr(check{path: "/access/realm/" + realm, privs: []string{"Realm.Allocate", "Sys.Audit"}})
	}
	for _, r := range h.realms() {
		if r["realm"] != realm {
			continue
		}
		out := map[string]any{}
		for k, v := range r {
			if k != "realm" {
				out[k] = v
			}
		}
		sum := sha1.Sum([]byte(fmt.Sprint(r)))
		out["digest"] = hex.EncodeToString(sum[:])
		return out, nil
	}
	return nil, newError(http.StatusInternalServerError, "domain '%s' does not exist", realm)
}

// postTicket logs a user in (or renews a ticket posted as the password).
func (h *APIHandler) postTicket(q *request) (any, *apiError) {
	user, _, e := q.p.str("username")
	if e != nil {
		return nil, e
	}
	password, _, e := q.p.str("password")
	if e != nil {
		return nil, e
	}
	if user == "" {
		return nil, paramErr("username", "property is missing and it is not optional")
	}
	if realm, ok := q.p["realm"]; ok && realm != "" && !strings.Contains(user, "@") {
		user += "@" + realm
	}
	ok := h.auth.noAuth || h.auth.checkPassword(user, password)
	if !ok || (!h.auth.noAuth && !h.auth.knownUser(user)) {
		e := newError(http.StatusUnauthorized, "authentication failure")
		e.authFailed = true
		return nil, e
	}
	if h.auth.noAuth && !strings.Contains(user, "@") {
		user += "@pam"
	}
	ticket, csrf := h.auth.issue(user)
	q.id = identity{UserID: user, ViaTicket: true}
	if e := h.actAs(q); e != nil {
		return nil, e
	}
	return map[string]any{
		"username":            user,
		"ticket":              ticket,
		"CSRFPreventionToken": csrf,
		"clustername":         h.ClusterName,
		"cap":                 h.loginCapabilities(q),
	}, nil
}

// capabilities is the login answer's cap object: the caller's
// privileges anywhere, grouped as PVE groups them.
func capabilities(perms map[string]map[string]int) map[string]map[string]int {
	groupOf := func(p string) string {
		switch {
		case strings.HasPrefix(p, "VM."):
			return "vms"
		case strings.HasPrefix(p, "Datastore."):
			return "storage"
		case strings.HasPrefix(p, "User."), strings.HasPrefix(p, "Group."), strings.HasPrefix(p, "Permissions."), strings.HasPrefix(p, "Realm."):
			return "access"
		case strings.HasPrefix(p, "SDN."):
			return "sdn"
		case strings.HasPrefix(p, "Mapping."):
			return "mapping"
		case strings.HasPrefix(p, "Sys."):
			return "nodes"
		}
		return "dc"
	}
	out := map[string]map[string]int{"vms": {}, "storage": {}, "access": {}, "nodes": {}, "dc": {}, "sdn": {}, "mapping": {}}
	for _, privs := range perms {
		for p := range privs {
			out[groupOf(p)][p] = 1
		}
	}
	return out
}

// loginCapabilities is the caller's cap at login. Under impersonation it
// takes access reviews, so while the cluster is down (login still works
// then) the answer has none rather than waiting for every review to fail.
func (h *APIHandler) loginCapabilities(q *request) map[string]map[string]int {
	if h.perms.impersonate && q.c.Healthy() != nil {
		return capabilities(nil)
	}
	return capabilities(h.permissionsOf(q, ""))
}

// knownUsers lists every user id the config knows: login users, token
// owners, and users named only by an identity block (those a Caddy auth
// handler signs in, whose grants an admin still wants to see).
func (h *APIHandler) knownUsers() []string {
	set := map[string]bool{}
	for u := range h.auth.users {
		set[u] = true
	}
	for t := range h.auth.tokens {
		u, _, _ := strings.Cut(t, "!")
		set[u] = true
	}
	for id := range h.perms.byID {
		u, _, _ := strings.Cut(id, "!")
		set[u] = true
	}
	var out []string
	for u := range set {
		out = append(out, u)
	}
	sort.Strings(out)
	return out
}

func (h *APIHandler) userRow(u string, full bool) map[string]any {
	row := map[string]any{"userid": u, "enable": 1, "expire": 0, "realm-type": realmOf(u)}
	if full {
		var tokens []map[string]any
		for t := range h.auth.tokens {
			owner, name, _ := strings.Cut(t, "!")
			if owner == u {
				tokens = append(tokens, map[string]any{"tokenid": name, "privsep": 0, "expire": 0})
			}
		}
		sort.Slice(tokens, func(i, j int) bool { return tokens[i]["tokenid"].(string) < tokens[j]["tokenid"].(string) })
		if tokens == nil {
			tokens = []map[string]any{}
		}
		row["tokens"] = tokens
	}
	return row
}

func realmOf(u string) string {
	_, realm, _ := strings.Cut(u, "@")
	return realm
}

func (h *APIHandler) getUsers(q *request) (any, *apiError) {
	full, e := q.p.boolean("full", false)
	if e != nil {
		return nil, e
	}
	users := h.knownUsers()
	if h.auth.noAuth || h.auth.caddyRealm != "" {
		// The caller is a user the config does not list; show them too, as
		// PVE always lists the user asking.
		if !contains(users, q.id.UserID) {
			users = append(users, q.id.UserID)
		}
	}
	if !h.seesAccess(q) {
		// Without rights on /access PVE shows the caller only.
		users = []string{q.id.UserID}
	}
	out := []map[string]any{}
	for _, u := range users {
		out = append(out, h.userRow(u, full))
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (h *APIHandler) getUser(q *request) (any, *apiError) {
	u := q.pathValue("userid")
	if u != q.id.UserID && !h.seesAccess(q) {
		return nil, permErr(check{path: "/access/users/" + u, privs: []string{"User.Modify", "Sys.Audit"}})
	}
	if !contains(h.knownUsers(), u) && u != q.id.UserID {
		return nil, newError(http.StatusInternalServerError, "no such user ('%s')", u)
	}
	return h.userRow(u, true), nil
}

// getGroups lists the configured Kubernetes groups as PVE groups, with
// their members; callers without rights on /access see their own only.
func (h *APIHandler) getGroups(q *request) (any, *apiError) {
	members := map[string][]string{}
	for _, id := range h.Identities {
		for _, g := range id.KubeGroups {
			members[g] = append(members[g], id.ID)
		}
	}
	all := h.seesAccess(q)
	mine, _ := h.perms.config(q.id)
	var names []string
	for g := range members {
		if all || contains(mine.KubeGroups, g) {
			names = append(names, g)
		}
	}
	sort.Strings(names)
	out := []map[string]any{}
	for _, g := range names {
		sort.Strings(members[g])
		out = append(out, map[string]any{"groupid": g, "users": strings.Join(members[g], ",")})
	}
	return out, nil
}

// getGroup is one group with its members, for its members and callers
// who may audit /access.
func (h *APIHandler) getGroup(q *request) (any, *apiError) {
	group := q.pathValue("groupid")
	var members []string
	for _, id := range h.Identities {
		if slices.Contains(id.KubeGroups, group) {
			members = append(members, id.ID)
		}
	}
	mine, _ := h.perms.config(q.id)
	if !h.seesAccess(q) && !slices.Contains(mine.KubeGroups, group) {
		return nil, permErr(check{path: "/access/groups/" + group, privs: []string{"Sys.Audit", "Group.Allocate"}})
	}
	if members == nil {
		return nil, newError(http.StatusInternalServerError, "group '%s' does not exist", group)
	}
	sort.Strings(members)
	return map[string]any{"comment": "Kubernetes group", "members": members}, nil
}

func (h *APIHandler) getRoles(q *request) (any, *apiError) {
	var names []string
	for r := range translate.Roles {
		names = append(names, r)
	}
	sort.Strings(names)
	out := []map[string]any{}
	for _, r := range names {
		out = append(out, map[string]any{"roleid": r, "privs": strings.Join(translate.Roles[r], ","), "special": 1})
	}
	return out, nil
}

func (h *APIHandler) getRole(q *request) (any, *apiError) {
	privs, ok := translate.Roles[q.pathValue("roleid")]
	if !ok {
		return nil, newError(http.StatusInternalServerError, "role '%s' does not exist", q.pathValue("roleid"))
	}
	out := map[string]int{}
	for _, p := range privs {
		out[p] = 1
	}
	return out, nil
}

// getACL lists the configured grants (the caller's own without rights on
// /access). With impersonation the rules live in Kubernetes RBAC, which
// has no PVE ACL form: the list is empty and /access/permissions tells
// each caller what they hold.
func (h *APIHandler) getACL(q *request) (any, *apiError) {
	out := []map[string]any{}
	if h.perms.impersonate {
		return out, nil
	}
	all := h.seesAccess(q)
	for _, u := range h.knownIdentities() {
		if !all && u != q.id.UserID && u != q.id.TokenID {
			continue
		}
		typ := "user"
		if strings.Contains(u, "!") {
			typ = "token"
		}
		for _, g := range h.perms.grants(identity{UserID: u}) {
			out = append(out, map[string]any{"path": g.Path, "ugid": u, "type": typ, "roleid": g.Role, "propagate": 1})
		}
	}
	return out, nil
}

// knownIdentities are the users of the config plus tokens with grants of
// their own.
func (h *APIHandler) knownIdentities() []string {
	out := h.knownUsers()
	for id, c := range h.perms.byID {
		if strings.Contains(id, "!") && len(c.Roles) > 0 {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// getPermissions answers for the caller, or for userid= when the caller
// may audit accounts, on every path or only path=.
func (h *APIHandler) getPermissions(q *request) (any, *apiError) {
	if u := q.p["userid"]; u != "" && u != q.id.UserID && u != q.id.TokenID {
		if !h.seesAccess(q) {
			return nil, permErr(check{path: "/access", privs: []string{"Sys.Audit"}})
		}
		other := *q
		other.id = identity{UserID: u}
		if user, _, isTok := strings.Cut(u, "!"); isTok {
			other.id = identity{UserID: user, TokenID: u}
		}
		if e := h.actAs(&other); e != nil {
			return nil, e
		}
		q = &other
	}
	return h.permissionsOf(q, q.p["path"]), nil
}

func (h *APIHandler) emptyList(q *request) (any, *apiError) { return []any{}, nil }
