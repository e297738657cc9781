package kube

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Access is one Kubernetes permission: a verb on a resource (and
// subresource) of an API group, in a namespace or cluster-wide (""), on
// one object by name or ("") on any.
type Access struct {
	Namespace   string
	Group       string
	Resource    string
	Subresource string
	Verb        string
	Name        string
}

// accessTTL is how long an answer of an access review is reused. Reviews
// only filter cached reads and describe permissions; every write is
// decided by Kubernetes on the impersonated call itself, so a stale
// answer can never grant a write.
const accessTTL = 10 * time.Second

// maxAccessEntries bounds the review cache; past it the cache starts over.
const maxAccessEntries = 16384

type accessEntry struct {
	allowed bool
	expires time.Time
}

// accessCache remembers access review answers per identity.
type accessCache struct {
	mu sync.Mutex
	m  map[string]accessEntry
}

// ErrNoIdentity is returned by access reviews on a context that carries no
// impersonated identity: the plugin's own rights are not the caller's.
var ErrNoIdentity = errors.New("access review without an impersonated identity")

// CanI asks the apiserver whether the identity ctx carries may perform a
// (a SelfSubjectAccessReview sent while impersonating it), reusing answers
// for a few seconds.
func (c *Cluster) CanI(ctx context.Context, a Access) (bool, error) {
	return c.canI(ctx, a, true)
}

// CanINow is CanI without the cache: the apiserver's answer at this
// moment, for checks in front of a write (a right granted or revoked a
// second ago counts).
func (c *Cluster) CanINow(ctx context.Context, a Access) (bool, error) {
	return c.canI(ctx, a, false)
}

func (c *Cluster) canI(ctx context.Context, a Access, cached bool) (bool, error) {
	act, ok := ctx.Value(identityKey{}).(actingAs)
	if !ok {
		return false, ErrNoIdentity
	}
	k := act.key + "\x01" + a.Namespace + "\x01" + a.Group + "\x01" + a.Resource + "\x01" + a.Subresource + "\x01" + a.Verb + "\x01" + a.Name
	now := time.Now()
	c.access.mu.Lock()
	e, hit := c.access.m[k]
	c.access.mu.Unlock()
	if cached && hit && now.Before(e.expires) {
		return e.allowed, nil
	}
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: a.Namespace, Group: a.Group, Resource: a.Resource, Subresource: a.Subresource, Verb: a.Verb, Name: a.Name,
		},
	}}
	out, err := act.cl.kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("access review for %s: %w", act.id.User, err)
	}
	c.access.mu.Lock()
	if c.access.m == nil || len(c.access.m) >= maxAccessEntries {
		c.access.m = map[string]accessEntry{}
	}
	c.access.m[k] = accessEntry{allowed: out.Status.Allowed, expires: now.Add(accessTTL)}
	c.access.mu.Unlock()
	return out.Status.Allowed, nil
}
