package kube

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	kjson "sigs.k8s.io/json"
)

// listJSON lists resource (a CRD's, which kube-apiserver serves only as
// JSON) in ns ("" = all) through rc and decodes the answer into a new L
// with the decoder client-go's own JSON serializer uses. The typed
// clients' List decodes it twice over: the serializer first reads the
// whole answer with encoding/json to find its apiVersion and kind, which
// a typed list does not need. At 10,000 VMs that pass was a fifth of the
// plugin's CPU at start (bench/scale BenchmarkStart profiles). Errors are
// client-go's own (rest.Result), so that the reflector still tells an
// expired resourceVersion from a failure. Fake clientsets (simulated
// clusters, tests) have no REST client: typed, the typed client's List,
// serves them.
func listJSON[T any, L interface {
	*T
	runtime.Object
}](ctx context.Context, rc rest.Interface, resource, ns string, o metav1.ListOptions, typed func(context.Context, metav1.ListOptions) (L, error)) (runtime.Object, error) {
	if r, ok := rc.(*rest.RESTClient); !ok || r == nil {
		return typed(ctx, o)
	}
	var timeout time.Duration
	if o.TimeoutSeconds != nil {
		timeout = time.Duration(*o.TimeoutSeconds) * time.Second
	}
	res := rc.Get().NamespaceIfScoped(ns, ns != "").Resource(resource).
		VersionedParams(&o, metav1.ParameterCodec).Timeout(timeout).Do(ctx)
	// Error, not Raw's error: it reads the Status kube-apiserver answered
	// (410 Expired...), as Into does.
	if err := res.Error(); err != nil {
		return nil, err
	}
	raw, _ := res.Raw()
	out := L(new(T))
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, out); err != nil {
		return nil, fmt.Errorf("decoding the list of %s: %w", resource, err)
	}
	// As the typed clients' decoder leaves it.
	out.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	return out, nil
}
