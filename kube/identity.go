package kube

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	cdiclient "kubevirt.io/client-go/containerizeddataimporter"
	"kubevirt.io/client-go/kubevirt"
)

// Identity is the Kubernetes user a request acts as. Calls made with a
// context carrying an Identity impersonate it, so that Kubernetes RBAC,
// not this plugin, decides what the caller may do.
type Identity struct {
	User   string
	Groups []string
}

// key identifies the identity in caches; groups are order-insensitive.
func (id Identity) key() string {
	g := append([]string(nil), id.Groups...)
	sort.Strings(g)
	return id.User + "\x00" + strings.Join(g, "\x00")
}

type identityKey struct{}

// actingAs is what a request context carries: the identity and its
// clients, built once when the request is authenticated.
type actingAs struct {
	id  Identity
	key string // id.key(), computed once: access reviews look it up per row
	cl  *clients
}

// WithIdentity returns a context whose Kubernetes calls impersonate id.
// It fails when the cluster cannot impersonate (no rest config), so that
// a request can never fall back to the plugin's own rights.
func (c *Cluster) WithIdentity(ctx context.Context, id Identity) (context.Context, error) {
	k := id.key()
	cl, err := c.clientsFor(id, k)
	if err != nil {
		return nil, err
	}
	return context.WithValue(ctx, identityKey{}, actingAs{id: id, key: k, cl: cl}), nil
}

// IdentityFrom returns the identity ctx carries, if any.
func IdentityFrom(ctx context.Context) (Identity, bool) {
	a, ok := ctx.Value(identityKey{}).(actingAs)
	return a.id, ok
}

// as returns the clients of the identity ctx carries (the caller, when
// the handler impersonates), or the plugin's own when it carries none.
// Every call made for a request goes through as(ctx); c.own is only for
// the plugin's bookkeeping (see Cluster.own).
func (c *Cluster) as(ctx context.Context) *clients {
	if a, ok := ctx.Value(identityKey{}).(actingAs); ok {
		return a.cl
	}
	return &c.own
}

// clients are the typed clients of one identity.
type clients struct {
	kube kubernetes.Interface
	kv   kubevirt.Interface
	cdi  cdiclient.Interface // nil without CDI
	cfg  *rest.Config        // nil for in-memory (simulated) clusters
}

// maxIdentityClients bounds the per-identity client cache; past it the
// cache starts over (clients are cheap to rebuild: client-go shares the
// underlying transport, impersonation is only a header wrapper).
const maxIdentityClients = 1024

// identityClients caches clients per impersonated identity.
type identityClients struct {
	mu sync.Mutex
	m  map[string]*clients
}

// ErrNoImpersonation is returned when a request asks for an identity on a
// cluster that has no rest config to impersonate with (simulated clusters).
var ErrNoImpersonation = fmt.Errorf("impersonation needs a real cluster connection (a kubeconfig or in-cluster config)")

// clientsFor returns (and caches under k, id's key) the clients
// impersonating id.
func (c *Cluster) clientsFor(id Identity, k string) (*clients, error) {
	if id.User == "" {
		return nil, fmt.Errorf("impersonation needs a user name")
	}
	if c.own.cfg == nil {
		return nil, ErrNoImpersonation
	}
	c.idClients.mu.Lock()
	defer c.idClients.mu.Unlock()
	if cl, ok := c.idClients.m[k]; ok {
		return cl, nil
	}
	cfg := rest.CopyConfig(c.own.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: id.User, Groups: append([]string(nil), id.Groups...)}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client for %s: %w", id.User, err)
	}
	kv, err := kubevirt.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubevirt client for %s: %w", id.User, err)
	}
	cdi, err := cdiclient.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("CDI client for %s: %w", id.User, err)
	}
	if c.idClients.m == nil || len(c.idClients.m) >= maxIdentityClients {
		c.idClients.m = map[string]*clients{}
	}
	cl := &clients{kube: kc, kv: kv, cdi: cdi, cfg: cfg}
	c.idClients.m[k] = cl
	return cl, nil
}
