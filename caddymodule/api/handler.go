// Package api is the Proxmox VE API on KubeVirt, as Caddy modules: the
// http.handlers.proxmox_api handler (its Caddyfile directive, provisioning
// and the /api2/json HTTP surface) and the `caddy proxmox-api` command.
// Everything it asks of the cluster goes through package kube.
package api

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/prom"
)

func init() {
	caddy.RegisterModule(APIHandler{})
}

// APIHandler serves the Proxmox VE REST API (/api2/json/...) translated
// live onto KubeVirt. Requests outside /api2/json go to the next handler.
type APIHandler struct {
	// Simulate serves an embedded in-memory KubeVirt cluster instead of a
	// real one (for trying things out and for tests).
	Simulate bool `json:"simulate,omitempty"`
	// SimulateVMs adds this many VMs to the simulated cluster (each with a
	// disk, a NIC and cloud-init; every other one running), for load tests
	// and demos at scale.
	SimulateVMs int `json:"simulate_vms,omitempty"`
	// Kubeconfig is the kubeconfig path; empty means the standard loading
	// rules ($KUBECONFIG, ~/.kube/config), then the in-cluster config.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// Context selects a kubeconfig context.
	Context string `json:"context,omitempty"`
	// Namespaces limits the served namespaces (PVE pools); empty = all.
	Namespaces []string `json:"namespaces,omitempty"`
	// TaskNamespace holds task records; default: the first served
	// namespace, else the pod's namespace, else "default".
	TaskNamespace string `json:"task_namespace,omitempty"`
	// DefaultPool is the namespace of VMs created without pool=.
	DefaultPool string `json:"default_pool,omitempty"`
	// Tokens are PVE API tokens (Authorization: PVEAPIToken=id=secret).
	Tokens []TokenConfig `json:"tokens,omitempty"`
	// Users may log in with POST /access/ticket.
	Users []UserConfig `json:"users,omitempty"`
	// TicketKey signs tickets and CSRF tokens. Give every replica the same
	// key; without one a random key is used and tickets die with the process.
	TicketKey string `json:"ticket_key,omitempty"`
	// TrustCaddyAuth accepts users authenticated by a Caddy handler in
	// front (basic_auth, forward_auth...); users without a realm get this one.
	TrustCaddyAuth string `json:"trust_caddy_auth,omitempty"`
	// InsecureNoAuth serves without any authentication. Never set it on a
	// reachable address.
	InsecureNoAuth bool `json:"insecure_no_auth,omitempty"`
	// Impersonate makes every Kubernetes call made for a request
	// impersonate the caller's Kubernetes identity (see Identities), so that
	// Kubernetes RBAC decides what each caller may see and do. The plugin's
	// own account then needs the `impersonate` verb.
	Impersonate bool `json:"impersonate,omitempty"`
	// Identities say what each PVE identity may do: PVE roles on ACL paths
	// (without impersonation) or the Kubernetes user and groups it acts as
	// (with it).
	Identities []IdentityConfig `json:"identities,omitempty"`
	// DefaultRole is the PVE role on / of identities without grants of
	// their own, when not impersonating (default Administrator).
	DefaultRole string `json:"default_role,omitempty"`
	// AuthFailureDelay delays 401 answers like pveproxy (3 s by default).
	AuthFailureDelay *caddy.Duration `json:"auth_failure_delay,omitempty"`
	// StaleReads is how long reads are still answered from the caches once
	// they stop following the cluster (kube-apiserver unreachable, or a
	// watch failing), so that a restart of kube-apiserver goes unnoticed;
	// writes are refused at once. After it, reads answer 503 too until
	// the caches follow again. Default 30 s; 0 answers 503 at once.
	StaleReads *caddy.Duration `json:"stale_reads,omitempty"`
	// SyncTimeout bounds the initial cache sync at provisioning (30 s).
	SyncTimeout caddy.Duration `json:"sync_timeout,omitempty"`
	// ClusterName is reported by /cluster/status and the login answer.
	ClusterName string `json:"cluster_name,omitempty"`
	// Prometheus, when set, supplies KubeVirt's and node_exporter's
	// metrics and the rrddata history.
	Prometheus *PrometheusConfig `json:"prometheus,omitempty"`
	// LocalStorage is the directory storage that keeps ISO images, disk
	// images to import and snippets as claims (PVE's "local").
	LocalStorage LocalStorageConfig `json:"local_storage,omitzero"`
	// UploadProxy is where uploads go (CDI's cdi-uploadproxy); default:
	// found in the cluster.
	UploadProxy *UploadProxyConfig `json:"cdi_upload_proxy,omitempty"`

	cluster *kube.Cluster
	history *prom.History // nil without Prometheus
	auth    *authenticator
	perms   *permissions
	router  *router
	rows    *guestRows // vmRows of cluster, once provisioned
	logger  *zap.Logger
	metrics *apiMetrics
	delay   time.Duration
}

// TokenConfig is one API token.
type TokenConfig struct {
	// ID is user@realm!name.
	ID string `json:"id"`
	// Secret is the token's secret (a UUID on PVE); placeholders such as
	// {env.PVE_TOKEN} are expanded. It is never logged.
	Secret string `json:"secret"`
}

// UserConfig is one user who can log in with a password.
type UserConfig struct {
	// ID is user@realm.
	ID string `json:"id"`
	// Password is checked by POST /access/ticket; placeholders are
	// expanded. It is never logged.
	Password string `json:"password"`
}

// CaddyModule returns the Caddy module information.
func (APIHandler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.proxmox_api",
		New: func() caddy.Module { return new(APIHandler) },
	}
}

// Provision connects to the cluster (or starts the simulator) and builds
// the authenticator and routes.
func (h *APIHandler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	// Caddy validates after provisioning; check first so that a config
	// without auth never connects to a cluster at all.
	if err := h.Validate(); err != nil {
		return err
	}
	repl := caddy.NewReplacer()
	key := []byte(repl.ReplaceKnown(h.TicketKey, ""))
	if len(key) == 0 {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return fmt.Errorf("generating a ticket key: %w", err)
		}
		if len(h.Users) > 0 {
			h.logger.Info("no ticket_key set: tickets are valid on this instance only and end with it")
		}
	}
	h.auth = newAuthenticator(key)
	h.auth.noAuth = h.InsecureNoAuth
	h.auth.caddyRealm = h.TrustCaddyAuth
	for _, t := range h.Tokens {
		h.auth.tokens[t.ID] = repl.ReplaceKnown(t.Secret, "")
	}
	for _, u := range h.Users {
		h.auth.users[u.ID] = repl.ReplaceKnown(u.Password, "")
	}
	perms, err := newPermissions(h.Impersonate, h.Identities, h.DefaultRole)
	if err != nil {
		return fmt.Errorf("proxmox_api: %w", err)
	}
	h.perms = perms
	h.delay = 3 * time.Second
	if h.AuthFailureDelay != nil {
		h.delay = time.Duration(*h.AuthFailureDelay)
	}
	if h.SyncTimeout == 0 {
		h.SyncTimeout = caddy.Duration(30 * time.Second)
	}
	if h.ClusterName == "" {
		h.ClusterName = "kubevirt"
	}
	if h.InsecureNoAuth {
		h.logger.Warn("proxmox_api serves WITHOUT authentication (insecure_no_auth): anyone who reaches it controls the VMs")
	}
	m, err := newAPIMetrics(ctx.GetMetricsRegistry())
	if err != nil {
		return err
	}
	h.metrics = m
	b, err := h.connect(ctx, h.logger)
	if err != nil {
		return err
	}
	h.cluster, h.history = b.cluster, b.history
	h.rows = h.vmRows(h.cluster)
	h.router = h.routes()
	return nil
}

// Validate refuses configurations that would serve an open API by accident
// or that cannot work.
func (h *APIHandler) Validate() error {
	if !h.InsecureNoAuth && len(h.Tokens) == 0 && len(h.Users) == 0 && h.TrustCaddyAuth == "" {
		return errors.New("proxmox_api: no authentication configured: add a token, a user or trust_caddy_auth (or set insecure_no_auth to serve an open API on purpose)")
	}
	if h.SimulateVMs < 0 || h.SimulateVMs > 100000 || (h.SimulateVMs > 0 && !h.Simulate) {
		return errors.New("proxmox_api: simulate_vms needs simulate and a count from 0 to 100000")
	}
	if h.StaleReads != nil && *h.StaleReads < 0 {
		return errors.New("proxmox_api: stale_reads cannot be negative")
	}
	if h.Simulate && h.Kubeconfig != "" {
		return errors.New("proxmox_api: simulate and kubeconfig are exclusive")
	}
	if h.Simulate && h.Impersonate {
		return errors.New("proxmox_api: impersonate needs a real cluster (simulated clusters have no RBAC to decide)")
	}
	if h.Prometheus != nil {
		if err := h.Prometheus.validate(); err != nil {
			return err
		}
	}
	if err := h.LocalStorage.validate(); err != nil {
		return err
	}
	if err := h.UploadProxy.validate(); err != nil {
		return err
	}
	for _, t := range h.Tokens {
		user, name, ok := strings.Cut(t.ID, "!")
		if !ok || !strings.Contains(user, "@") || name == "" {
			return fmt.Errorf("proxmox_api: token id %q must look like user@realm!name", t.ID)
		}
		if t.Secret == "" {
			return fmt.Errorf("proxmox_api: token %q has an empty secret", t.ID)
		}
	}
	for _, u := range h.Users {
		if !strings.Contains(u.ID, "@") {
			return fmt.Errorf("proxmox_api: user %q must look like user@realm", u.ID)
		}
		if u.Password == "" {
			return fmt.Errorf("proxmox_api: user %q has an empty password", u.ID)
		}
	}
	return nil
}

// Cleanup releases this instance's hold on the shared cluster connection.
func (h *APIHandler) Cleanup() error {
	if h.cluster != nil {
		_, err := connections.Delete(h.key())
		return err
	}
	return nil
}

// ServeHTTP answers /api2/json/... and passes everything else on.
func (h *APIHandler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if r.URL.Path != "/api2/json" && !strings.HasPrefix(r.URL.Path, "/api2/json/") {
		return next.ServeHTTP(w, r)
	}
	defer func() {
		if v := recover(); v != nil {
			id := make([]byte, 4)
			_, _ = rand.Read(id)
			h.logger.Error("panic serving the API", zap.String("incident", hex.EncodeToString(id)), zap.Any("panic", v), zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.Stack("stack"))
			writeError(w, r, newError(http.StatusInternalServerError, "internal error (incident %s)", hex.EncodeToString(id)))
		}
	}()
	// Routing works on the escaped path, so that an escaped slash stays
	// inside its segment: bpg sends volume ids as content/local:iso%2Fx.iso.
	// Most paths are clean and have nothing escaped: they are used as they
	// are, and the request is not copied.
	esc := r.URL.EscapedPath()
	path, raw := r.URL.Path, r.URL.RawPath
	if !cleanPath(esc) || esc != path {
		raw = cleanAPIPath(esc)
		var err error
		if path, err = url.PathUnescape(raw); err != nil {
			path, raw = cleanAPIPath(r.URL.Path), ""
		}
		esc = (&url.URL{Path: path, RawPath: raw}).EscapedPath()
	}
	bound := !isUploadPath(path) && hasBody(r) // an upload's body streams for as long as it takes
	if path != r.URL.Path || raw != r.URL.RawPath || bound {
		// Only the URL (and a bounded body) change: the rest, headers above
		// all, is shared rather than cloned.
		r2 := r.WithContext(r.Context())
		u := *r.URL
		u.Path, u.RawPath = path, raw
		r2.URL = &u
		r = r2
		if bound {
			boundBody(w, r)
		}
	}
	if strings.Contains(path, "/./") || strings.Contains(path, "/../") || strings.HasSuffix(path, "/.") || strings.HasSuffix(path, "/..") {
		// No PVE path has dot segments; ServeMux would answer a redirect.
		h.notImplemented(w, r)
		return nil
	}
	rel, _ := strings.CutPrefix(esc, "/api2/json")
	if rel == "" {
		rel = "/"
	}
	q := &request{r: r, w: w}
	var rt *boundRoute
	if rel[0] == '/' { // not /api2/json%2F...
		rt = h.router.match(r.Method, rel, &q.path)
	}
	if rt == nil {
		h.notImplemented(w, r)
		return nil
	}
	h.serve(rt, q)
	return nil
}

// cleanAPIPath drops empty segments and a trailing slash, as pveproxy's
// path splitting does ("/nodes/" and "/nodes" are one endpoint).
func cleanAPIPath(p string) string {
	parts := strings.Split(p, "/")
	out := parts[:0]
	for _, s := range parts {
		if s != "" {
			out = append(out, s)
		}
	}
	return "/" + strings.Join(out, "/")
}

// cleanPath tells whether cleanAPIPath would return p as it is.
func cleanPath(p string) bool {
	return len(p) > 1 && p[0] == '/' && p[len(p)-1] != '/' && !strings.Contains(p, "//")
}

// Interface guards
var (
	_ caddy.Provisioner           = (*APIHandler)(nil)
	_ caddy.Validator             = (*APIHandler)(nil)
	_ caddy.CleanerUpper          = (*APIHandler)(nil)
	_ caddyhttp.MiddlewareHandler = (*APIHandler)(nil)
)
