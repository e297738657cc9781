package api

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// IdentityConfig says what one PVE identity (user@realm, or a token
// user@realm!name) may do: PVE roles on ACL paths when the API does not
// impersonate, the Kubernetes user and groups it acts as when it does.
type IdentityConfig struct {
	// ID is user@realm or user@realm!tokenname.
	ID string `json:"id"`
	// Roles grants PVE roles on ACL paths (propagating, as PVE's default).
	Roles []GrantConfig `json:"roles,omitempty"`
	// KubeUser is the Kubernetes user to impersonate (default "pve:" + the
	// user id, so that RBAC subjects read like PVE users).
	KubeUser string `json:"kube_user,omitempty"`
	// KubeGroups are the Kubernetes groups to impersonate.
	KubeGroups []string `json:"kube_groups,omitempty"`
}

// GrantConfig is one ACL entry: a role on a path such as /, /vms/100,
// /pool/<namespace>, /storage/<name> or /nodes/<name>.
type GrantConfig struct {
	// Path is the PVE ACL path the role applies to, and below it: /,
	// /vms/<vmid>, /pool/<pool>, /storage/<storage> or /nodes/<node>.
	Path string `json:"path"`
	// Role is a PVE built-in role (Administrator, PVEVMAdmin, PVEAuditor...).
	Role string `json:"role"`
}

// defaultKubeUserPrefix names impersonated users after their PVE id.
const defaultKubeUserPrefix = "pve:"

// permissions decides what an authenticated identity may do. Without
// impersonation it applies PVE's role table to the configured grants;
// with it, Kubernetes decides: writes are the impersonated calls
// themselves, and cached reads are filtered by access reviews.
type permissions struct {
	impersonate bool
	byID        map[string]IdentityConfig
	defaultRole string
	// allAdmin short-cuts the common configuration where every identity is
	// Administrator on /.
	allAdmin bool
}

func newPermissions(impersonate bool, ids []IdentityConfig, defaultRole string) (*permissions, error) {
	if defaultRole == "" {
		defaultRole = "Administrator"
	}
	if _, ok := translate.Roles[defaultRole]; !ok {
		return nil, fmt.Errorf("default_role: unknown role %q", defaultRole)
	}
	p := &permissions{impersonate: impersonate, byID: map[string]IdentityConfig{}, defaultRole: defaultRole}
	p.allAdmin = !impersonate && defaultRole == "Administrator"
	for _, id := range ids {
		if !validIdentityID(id.ID) {
			return nil, fmt.Errorf("identity %q: want user@realm or user@realm!token", id.ID)
		}
		if _, dup := p.byID[id.ID]; dup {
			return nil, fmt.Errorf("identity %q configured twice", id.ID)
		}
		for _, g := range id.Roles {
			if _, ok := translate.Roles[g.Role]; !ok {
				return nil, fmt.Errorf("identity %q: unknown role %q", id.ID, g.Role)
			}
			if !validACLPath(g.Path) {
				return nil, fmt.Errorf("identity %q: bad ACL path %q (want /, /vms/<id>, /pool/<name>, /storage/<name> or /nodes/<name>)", id.ID, g.Path)
			}
			if g.Role != "Administrator" || g.Path != "/" {
				p.allAdmin = false
			}
		}
		if len(id.Roles) == 0 && defaultRole != "Administrator" {
			p.allAdmin = false
		}
		p.byID[id.ID] = id
	}
	return p, nil
}

func validIdentityID(s string) bool {
	user, realm, ok := strings.Cut(s, "@")
	if !ok || user == "" || realm == "" {
		return false
	}
	if r, tok, isTok := strings.Cut(realm, "!"); isTok && (r == "" || tok == "") {
		return false
	}
	return !strings.ContainsAny(s, " \t\r\n")
}

func validACLPath(p string) bool {
	if p == "/" {
		return true
	}
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	if !strings.HasPrefix(p, "/") || len(parts) != 2 || parts[1] == "" {
		return false
	}
	switch parts[0] {
	case "vms":
		_, err := strconv.Atoi(parts[1])
		return err == nil
	case "pool", "storage", "nodes":
		return true
	}
	return false
}

// config returns the identity's own entry: a token's, else its user's.
func (p *permissions) config(id identity) (IdentityConfig, bool) {
	if id.TokenID != "" {
		if c, ok := p.byID[id.TokenID]; ok {
			return c, true
		}
	}
	c, ok := p.byID[id.UserID]
	return c, ok
}

// kubeIdentity is the Kubernetes identity a PVE identity acts as.
func (p *permissions) kubeIdentity(id identity) kube.Identity {
	c, _ := p.config(id)
	user := c.KubeUser
	if user == "" {
		user = defaultKubeUserPrefix + id.UserID
	}
	return kube.Identity{User: user, Groups: c.KubeGroups}
}

// grants are the identity's ACL entries (its default role on / when it
// has none of its own).
func (p *permissions) grants(id identity) []GrantConfig {
	if c, ok := p.config(id); ok && len(c.Roles) > 0 {
		return c.Roles
	}
	return []GrantConfig{{Path: "/", Role: p.defaultRole}}
}

// covers tells whether a grant on path g reaches path; pool is a pool
// whose grants reach it too (a VM's pool, a pool a storage is member of),
// "" for none. Grants propagate down the tree (/pool/a reaches the pool
// a/b), and a pool's grants reach its members, as PVE's do.
func covers(g, path, pool string) bool {
	switch {
	case g == "/", g == path, strings.HasPrefix(path, g+"/"):
		return true
	case pool != "" && strings.HasPrefix(g, "/pool/") && (strings.HasPrefix(path, "/vms/") || strings.HasPrefix(path, "/storage/")):
		return translate.PoolWithin(pool, g[len("/pool/"):])
	}
	return false
}

// roleHas tells whether a built-in role holds a privilege.
var roleHas = func() map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for role, privs := range translate.Roles {
		out[role] = map[string]bool{}
		for _, p := range privs {
			out[role][p] = true
		}
	}
	return out
}()

// granted tells whether one of the grants gives priv on path (or, for a
// member of pool, on the pool); it runs for every row of a list, so it
// allocates nothing.
func granted(grants []GrantConfig, path, pool, priv string) bool {
	for _, g := range grants {
		if roleHas[g.Role][priv] && covers(g.Path, path, pool) {
			return true
		}
	}
	return false
}

// grantedOn is granted for the caller, with the grants of the pools a
// storage is member of reaching it.
func (h *APIHandler) grantedOn(q *request, path, pool, priv string) bool {
	grants := h.perms.grants(q.id)
	if granted(grants, path, pool, priv) {
		return true
	}
	if name, ok := strings.CutPrefix(path, "/storage/"); ok && pool == "" && poolGrants(grants) {
		for _, r := range q.c.PoolRecords() {
			if r.HasStorage(name) && granted(grants, path, r.ID, priv) {
				return true
			}
		}
	}
	return false
}

// poolGrants tells whether any grant is on a pool.
func poolGrants(grants []GrantConfig) bool {
	for _, g := range grants {
		if strings.HasPrefix(g.Path, "/pool/") {
			return true
		}
	}
	return false
}

// decide tells whether the caller holds priv on path; ns is the
// namespace the path lives in ("" for cluster-wide paths), pool the pool
// whose grants reach it (see covers). fresh asks the apiserver now instead
// of reusing a recent review, for checks in front of a write. An access
// review that fails counts as a refusal and is returned so that endpoints
// can answer 503.
func (h *APIHandler) decide(q *request, path, ns, pool, priv string, fresh bool) (bool, error) {
	p := h.perms
	if h.auth.noAuth || p.allAdmin {
		return true, nil
	}
	if !p.impersonate {
		return h.grantedOn(q, path, pool, priv), nil
	}
	// Under impersonation a pool grants nothing by itself: a VM's rights
	// are those of its namespace, whatever pool it is in.
	a := kube.PrivilegeAccess(priv, ns, q.c.HasVirtAPI(q.ctx()))
	if id, ok := strings.CutPrefix(path, "/pool/"); ok && a.Group == translate.GroupPVE {
		return h.decidePool(q, a, id, ns, fresh)
	}
	return h.review(q, a, fresh)
}

// decidePool decides a Pool.* privilege under impersonation: the verb on
// the plugin's pools resource named after the pool, or a pool it is nested
// in (RBAC's resource names match exactly, PVE's pool grants reach the
// pools below); Pool.Audit also to whoever may list the VMs of the
// namespace that is the pool.
func (h *APIHandler) decidePool(q *request, a kube.Access, id, ns string, fresh bool) (bool, error) {
	for {
		a.Name = id
		if ok, err := h.review(q, a, fresh); ok || err != nil {
			return ok, err
		}
		parent, nested := translate.PoolParent(id)
		if !nested {
			break
		}
		id = parent
	}
	if a.Verb == translate.PrivilegeRule("Pool.Audit", false).Verb && ns != "" {
		return h.review(q, kube.PrivilegeAccess("VM.Audit", ns, false), fresh)
	}
	return false, nil
}

// review asks Kubernetes whether the caller may do a.
func (h *APIHandler) review(q *request, a kube.Access, fresh bool) (bool, error) {
	if fresh && !q.reviewed[a] {
		// In front of a write only the apiserver's answer of this moment
		// counts, never a remembered one; the write itself is then made as
		// the caller, so Kubernetes decides twice. Privileges that map to
		// the same access (every VM.Config.* is a VM patch) ask once.
		if q.reviewed == nil {
			q.reviewed = map[kube.Access]bool{}
		}
		q.reviewed[a] = true
		return q.c.CanINow(q.ctx(), a)
	}
	return q.c.CanI(q.ctx(), a)
}

// sees is decide for filtering lists: a failed review hides the row (and is
// logged), it never shows it.
func (h *APIHandler) sees(q *request, path, ns, pool, priv string) bool {
	ok, err := h.decide(q, path, ns, pool, priv, false)
	if err != nil {
		h.logger.Warn("access review failed; hiding the row", zap.String("user", q.id.ID()), zap.String("path", path), zap.Error(err))
	}
	return ok
}

// seesVM tells whether the caller may audit a VM.
func (h *APIHandler) seesVM(q *request, g kube.Guest) bool {
	return h.sees(q, vmPath(g), g.Namespace(), h.guestPool(q.c, g), "VM.Audit")
}

// vmPath is a VM's ACL path.
func vmPath(g kube.Guest) string { return "/vms/" + strconv.Itoa(g.VMID) }

// check is one permission an endpoint needs: one of privs on path (which
// lives in namespace ns and is reached by the grants of pool, see
// decide).
type check struct {
	path, ns, pool string
	privs          []string
}

// vmCheck is the check a refused write is reported against: the last one
// on a VM (the new VM of a clone), else the last.
func vmCheck(checks []check) check {
	for i := len(checks) - 1; i >= 0; i-- {
		if strings.HasPrefix(checks[i].path, "/vms/") {
			return checks[i]
		}
	}
	return checks[len(checks)-1]
}

// permErr is PVE's refusal: 403 with the path and privilege checked.
func permErr(c check) *apiError {
	return newError(http.StatusForbidden, "Permission check failed (%s, %s)", c.path, strings.Join(c.privs, "|"))
}

// noPool is PVE's answer to a create or clone into a pool that does not
// exist: a permission exception (403), which clients such as bpg do not
// retry the way they retry a 500.
func noPool(pool string) *apiError {
	return newError(http.StatusForbidden, "Permission check failed (pool '%s' does not exist)", pool)
}

// authorize runs an endpoint's checks before it touches anything. Writes
// are checked against the apiserver's current answer; reads may reuse a
// review a few seconds old, as they are served from the cache anyway.
func (h *APIHandler) authorize(q *request, checks []check) *apiError {
	fresh := q.r.Method != http.MethodGet && q.r.Method != http.MethodHead
	for _, c := range checks {
		granted := false
		for _, priv := range c.privs {
			ok, err := h.decide(q, c.path, c.ns, c.pool, priv, fresh)
			if err != nil && !errors.Is(err, kube.ErrNoIdentity) {
				return kubeError(err)
			}
			if ok {
				granted = true
				break
			}
		}
		if !granted {
			return permErr(c)
		}
	}
	return nil
}

// needFunc returns what a route requires of the caller (route.needs). The
// checks mirror the permissions blocks of PVE's API schema; a VM that
// does not exist is left to the endpoint, which answers PVE's
// "does not exist".
type needFunc func(h *APIHandler, q *request) []check

func vmNeeds(privs ...string) needFunc {
	return func(h *APIHandler, q *request) []check {
		g, ok := pathGuest(q)
		if !ok {
			return nil
		}
		return []check{{path: vmPath(g), ns: g.Namespace(), pool: h.guestPool(q.c, g), privs: privs}}
	}
}

// pathGuest is the VM the path's {vmid} names, if it exists.
func pathGuest(q *request) (kube.Guest, bool) {
	v := q.pathVM()
	return v.g, v.idErr == nil && v.err == nil
}

func nodeNeeds(privs ...string) needFunc {
	return func(h *APIHandler, q *request) []check {
		return []check{{path: "/nodes/" + q.pathValue("node"), privs: privs}}
	}
}

func storageNeeds(privs ...string) needFunc {
	return func(h *APIHandler, q *request) []check {
		return []check{{path: "/storage/" + q.pathValue("storage"), privs: privs}}
	}
}

// configNeeds asks for the privilege of every key set, deleted or
// reverted, as PVE does; an empty update needs any VM.Config.* right.
func configNeeds(h *APIHandler, q *request) []check {
	base := vmNeeds()(h, q)
	if base == nil {
		return nil
	}
	set := map[string]bool{}
	for k, v := range q.p {
		switch k {
		case "digest", "skiplock", "background_delay", "force", "node", "vmid":
			continue
		case "delete", "revert":
			for _, d := range splitKeyList(v) {
				set[translate.ConfigKeyPrivilege(d, "")] = true
			}
			continue
		}
		set[translate.ConfigKeyPrivilege(k, v)] = true
	}
	if len(set) == 0 {
		base[0].privs = []string{translate.PrivConfigDisk, translate.PrivConfigCDROM, translate.PrivConfigCPU, translate.PrivConfigMemory,
			translate.PrivConfigNetwork, translate.PrivConfigHWType, translate.PrivConfigOptions, translate.PrivConfigCloudinit}
		return base
	}
	privs := make([]string, 0, len(set))
	for p := range set {
		privs = append(privs, p)
	}
	sort.Strings(privs)
	out := make([]check, 0, len(privs))
	for _, p := range privs {
		out = append(out, check{path: base[0].path, ns: base[0].ns, pool: base[0].pool, privs: []string{p}})
	}
	return append(out, storageChecks(q, base[0].ns)...)
}

// unlinkNeeds is PVE's unlink: VM.Config.Disk, and (as the config update
// it is) the privilege of every key in idlist.
func unlinkNeeds(h *APIHandler, q *request) []check {
	base := vmNeeds(translate.PrivConfigDisk)(h, q)
	if base == nil {
		return nil
	}
	set := map[string]bool{}
	for _, k := range splitKeyList(q.p["idlist"]) {
		if p := translate.ConfigKeyPrivilege(k, ""); p != translate.PrivConfigDisk {
			set[p] = true
		}
	}
	for _, p := range slices.Sorted(maps.Keys(set)) {
		base = append(base, check{path: base[0].path, ns: base[0].ns, pool: base[0].pool, privs: []string{p}})
	}
	return base
}

// storageChecks asks for Datastore.AllocateSpace on every storage the
// request allocates new disks on, as PVE does, in the namespace the
// claims will live in.
func storageChecks(q *request, ns string) []check {
	seen := map[string]bool{}
	var out []check
	keys := make([]string, 0, len(q.p))
	for k := range q.p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if st, ok := translate.AllocatedStorage(k, q.p[k]); ok && !seen[st] {
			seen[st] = true
			out = append(out, check{path: "/storage/" + st, ns: ns, privs: []string{"Datastore.AllocateSpace"}})
		}
	}
	return out
}

// createNeeds: VM.Allocate on the new vmid or on the pool it joins, in
// the namespace it will live in.
func createNeeds(h *APIHandler, q *request) []check {
	id, err := translate.ParseVMID(q.p["vmid"])
	if err != nil {
		return nil
	}
	ns, _ := h.createNamespace(q)
	return append([]check{{path: "/vms/" + strconv.Itoa(id), ns: ns, pool: q.p["pool"], privs: []string{"VM.Allocate"}}}, storageChecks(q, ns)...)
}

// cloneNeeds: VM.Clone on the source and VM.Allocate on the new VM.
func cloneNeeds(h *APIHandler, q *request) []check {
	src := vmNeeds("VM.Clone")(h, q)
	if src == nil {
		return nil
	}
	id, err := translate.ParseVMID(q.p["newid"])
	if err != nil {
		return src
	}
	g, _ := pathGuest(q)
	ns, _ := h.cloneNamespace(q, g)
	out := append(src, check{path: "/vms/" + strconv.Itoa(id), ns: ns, pool: q.p["pool"], privs: []string{"VM.Allocate"}})
	if st := q.p["storage"]; st != "" {
		out = append(out, check{path: "/storage/" + st, ns: ns, privs: []string{"Datastore.AllocateSpace"}})
	}
	return out
}

// migrateNeeds: VM.Migrate, and for a targetstorage that maps storages
// VM.Config.Disk on the VM and Datastore.AllocateSpace on the targets, as
// qemu-server's migrate_vm checks.
func migrateNeeds(h *APIHandler, q *request) []check {
	out := vmNeeds("VM.Migrate")(h, q)
	ts := q.p["targetstorage"]
	if out == nil || ts == "" {
		return out
	}
	m, err := translate.ParseStorageMap(ts)
	if err != nil || m.Identity {
		return out
	}
	out = append(out, check{path: out[0].path, ns: out[0].ns, pool: out[0].pool, privs: []string{translate.PrivConfigDisk}})
	seen := map[string]bool{}
	targets := []string{m.Default}
	for _, t := range m.Entries {
		targets = append(targets, t)
	}
	sort.Strings(targets)
	for _, t := range targets {
		if t != "" && !seen[t] {
			seen[t] = true
			out = append(out, check{path: "/storage/" + t, ns: out[0].ns, privs: []string{"Datastore.AllocateSpace"}})
		}
	}
	return out
}

// cloneNamespace is the namespace a clone of g goes to: pool='s (see
// poolTarget), else g's.
func (h *APIHandler) cloneNamespace(q *request, g kube.Guest) (string, bool) {
	if p := q.p["pool"]; p != "" {
		return h.poolTarget(q.c, p, g.Namespace())
	}
	return g.Namespace(), true
}

// poolCheck is priv on pool id, which lives in the namespace of that name
// when that is the pool.
func (h *APIHandler) poolCheck(c *kube.Cluster, id, priv string) check {
	out := check{path: "/pool/" + id, privs: []string{priv}}
	if !strings.Contains(id, "/") && h.namespaceIsPool(c, id) {
		out.ns = id
	}
	return out
}

// poolNeeds: Pool.Allocate on the pool, as every PVE pool write asks.
func poolNeeds(h *APIHandler, q *request) []check {
	id := poolID(q)
	if id == "" {
		return nil // the endpoint answers the missing parameter
	}
	return []check{h.poolCheck(q.c, id, "Pool.Allocate")}
}

// poolAuditNeeds: Pool.Audit on the pool read by /pools/{poolid}.
func poolAuditNeeds(h *APIHandler, q *request) []check {
	return []check{h.poolCheck(q.c, q.pathValue("poolid"), "Pool.Audit")}
}

// poolUpdateNeeds: Pool.Allocate on the pool and, as PVE's
// check_perm_modify, Permissions.Modify or VM.Allocate on every VM listed
// (Permissions.Modify or Datastore.Allocate on every storage), so that a
// pool's owner cannot probe where VMs they may not touch live.
func poolUpdateNeeds(h *APIHandler, q *request) []check {
	out := poolNeeds(h, q)
	if out == nil {
		return nil
	}
	for _, s := range translate.SplitList(q.p["vms"]) {
		id, err := translate.ParseVMID(s)
		if err != nil {
			continue // the endpoint answers the bad list
		}
		c := check{path: "/vms/" + strconv.Itoa(id), privs: []string{"Permissions.Modify", "VM.Allocate"}}
		if g, err := q.c.Guest(id); err == nil {
			c.ns, c.pool = g.Namespace(), h.guestPool(q.c, g)
		}
		out = append(out, c)
	}
	for _, s := range translate.SplitList(q.p["storage"]) {
		if translate.ParseStorageID(s) == nil {
			out = append(out, check{path: "/storage/" + s, privs: []string{"Permissions.Modify", "Datastore.Allocate"}})
		}
	}
	return out
}

// networkChecks is PVE's condition on calls that make this host fetch a
// URL: Sys.Audit and Sys.Modify on /, or Sys.AccessNetwork on the node.
// With PVE roles the grants decide which of the two applies; under
// impersonation the first (Sys.Modify maps to cluster-admin rights).
func networkChecks(h *APIHandler, q *request) []check {
	node := "/nodes/" + q.pathValue("node")
	if !h.perms.impersonate && granted(h.perms.grants(q.id), node, "", "Sys.AccessNetwork") {
		return []check{{path: node, privs: []string{"Sys.AccessNetwork"}}}
	}
	return []check{{path: "/", privs: []string{"Sys.Audit"}}, {path: "/", privs: []string{"Sys.Modify"}}}
}

// queryURLNeeds: query-url-metadata makes the plugin itself fetch the URL.
func queryURLNeeds(h *APIHandler, q *request) []check { return networkChecks(h, q) }

// downloadNeeds: Datastore.AllocateTemplate on the storage, in the
// namespace downloads go to, and, with PVE roles, the network condition as
// PVE asks. Under impersonation Kubernetes decides on the DataVolume the
// download is (create datavolumes): whoever may create one can make CDI
// fetch any URL already, and the plugin's own size probe is guarded (see
// urlprobe.go).
func downloadNeeds(h *APIHandler, q *request) []check {
	st := check{path: "/storage/" + q.pathValue("storage"), ns: h.defaultNamespace(), privs: []string{"Datastore.AllocateTemplate"}}
	if h.perms.impersonate {
		return []check{st}
	}
	return append(networkChecks(h, q), st)
}

// uploadNeeds: Datastore.AllocateTemplate on the storage, in the namespace
// uploads go to, as PVE's upload asks (no network right: the plugin
// fetches nothing).
func uploadNeeds(h *APIHandler, q *request) []check {
	return []check{{path: "/storage/" + q.pathValue("storage"), ns: h.defaultNamespace(), privs: []string{"Datastore.AllocateTemplate"}}}
}

// volumeDeleteNeeds: Datastore.Allocate on the storage, in the namespace
// of the claim deleted.
func volumeDeleteNeeds(h *APIHandler, q *request) []check {
	ns := h.defaultNamespace()
	if _, content, file, e := h.fileVolumeOf(q); e == nil {
		if pvc, e := h.fileClaim(q, content, file); e == nil {
			ns = pvc.Namespace
		}
	}
	return []check{{path: "/storage/" + q.pathValue("storage"), ns: ns, privs: []string{"Datastore.Allocate"}}}
}

// mayTask tells whether the caller may read a task: their own, or any
// with Sys.Audit on its node, as PVE allows.
func (h *APIHandler) mayTask(q *request, t *kube.Task) bool {
	if h.auth.noAuth || h.perms.allAdmin {
		return true
	}
	return ownsTask(q, t) || h.seesNode(q, t.UPID.Node)
}

// ownsTask tells whether the caller started t (a user owns its tokens'
// tasks too).
func ownsTask(q *request, t *kube.Task) bool {
	owner := t.UPID.User
	return owner == q.id.ID() || owner == q.id.UserID || (q.id.TokenID == "" && strings.HasPrefix(owner, q.id.UserID+"!"))
}

// actAs puts the caller's Kubernetes identity on the request, when the
// API impersonates.
func (h *APIHandler) actAs(q *request) *apiError {
	if !h.perms.impersonate || h.auth.noAuth {
		return nil
	}
	ctx, err := q.c.WithIdentity(q.ctx(), h.perms.kubeIdentity(q.id))
	if err != nil {
		h.logger.Error("cannot act as the caller", zap.String("user", q.id.ID()), zap.Error(err))
		return newError(http.StatusInternalServerError, "cannot act as %s: %v", q.id.ID(), err)
	}
	q.context = ctx
	return nil
}
