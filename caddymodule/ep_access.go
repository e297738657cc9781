package caddymodule

import (
	"net/http"
	"sort"
	"strings"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// pveVersion is the PVE release reported to clients: 8.x, because 9.x
// switches Telmate to HA rules this server does not have.
const (
	pveVersion = "8.4.1"
	pveRelease = "8.4"
	pveRepoID  = "c4dd1e9b"
)

func subdirs(names ...string) []map[string]string {
	out := make([]map[string]string, len(names))
	for i, n := range names {
		out[i] = map[string]string{"subdir": n}
	}
	return out
}

func (h *APIHandler) getRoot(q *request) (any, *apiError) {
	return subdirs("access", "cluster", "nodes", "pools", "storage", "version"), nil
}

func (h *APIHandler) getVersion(q *request) (any, *apiError) {
	return map[string]any{"version": pveVersion, "release": pveRelease, "repoid": pveRepoID, "console": "xtermjs"}, nil
}

func (h *APIHandler) getAccessIndex(q *request) (any, *apiError) {
	return subdirs("acl", "domains", "groups", "permissions", "roles", "ticket", "users"), nil
}

func (h *APIHandler) getTicket(q *request) (any, *apiError) { return nil, nil }

func (h *APIHandler) getDomains(q *request) (any, *apiError) {
	return []map[string]any{
		{"realm": "pam", "type": "pam", "comment": "Linux PAM standard authentication"},
		{"realm": "pve", "type": "pve", "comment": "Proxmox VE authentication server", "default": 1},
	}, nil
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
		h.failAuth(q.w, q.r, newError(http.StatusUnauthorized, "authentication failure"))
		return nil, errWritten
	}
	if h.auth.noAuth && !strings.Contains(user, "@") {
		user += "@pam"
	}
	ticket, csrf := h.auth.issue(user)
	return map[string]any{
		"username":            user,
		"ticket":              ticket,
		"CSRFPreventionToken": csrf,
		"clustername":         h.ClusterName,
		"cap":                 capabilities(),
	}, nil
}

// capabilities is the login answer's cap object, grouped as PVE groups
// privileges; every configured identity is an administrator for now.
func capabilities() map[string]map[string]int {
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
	for _, p := range translate.Roles["Administrator"] {
		out[groupOf(p)][p] = 1
	}
	return out
}

// knownUsers lists every user id the config knows: login users and token
// owners.
func (h *APIHandler) knownUsers() []string {
	set := map[string]bool{}
	for u := range h.auth.users {
		set[u] = true
	}
	for t := range h.auth.tokens {
		u, _, _ := strings.Cut(t, "!")
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
	u := q.r.PathValue("userid")
	if !contains(h.knownUsers(), u) && u != q.id.UserID {
		return nil, newError(http.StatusInternalServerError, "no such user ('%s')", u)
	}
	return h.userRow(u, true), nil
}

func (h *APIHandler) getGroups(q *request) (any, *apiError) { return []any{}, nil }

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
	privs, ok := translate.Roles[q.r.PathValue("roleid")]
	if !ok {
		return nil, newError(http.StatusInternalServerError, "role '%s' does not exist", q.r.PathValue("roleid"))
	}
	out := map[string]int{}
	for _, p := range privs {
		out[p] = 1
	}
	return out, nil
}

func (h *APIHandler) getACL(q *request) (any, *apiError) {
	out := []map[string]any{}
	for _, u := range h.knownUsers() {
		out = append(out, map[string]any{"path": "/", "ugid": u, "type": "user", "roleid": "Administrator", "propagate": 1})
	}
	return out, nil
}

// getPermissions answers for the caller (or userid=), on every path or
// only path=. Every configured identity holds Administrator on /.
func (h *APIHandler) getPermissions(q *request) (any, *apiError) {
	path := q.p["path"]
	privs := map[string]int{}
	for _, p := range translate.Roles["Administrator"] {
		privs[p] = 1
	}
	if path == "" {
		path = "/"
	}
	return map[string]map[string]int{path: privs}, nil
}

func (h *APIHandler) emptyList(q *request) (any, *apiError) { return []any{}, nil }
