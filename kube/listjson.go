package kube

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	netutils "k8s.io/utils/net"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// listJSON lists resource (a CRD's, which kube-apiserver serves only as
// JSON) in ns ("" = all) through rc and decodes the answer into a new L
// with listDecoding. The typed clients' List decodes it twice over: the
// serializer first reads the whole answer with encoding/json to find its
// apiVersion and kind, which a typed list does not need. At 10,000 VMs
// that pass was a fifth of the plugin's CPU at start (bench/scale
// BenchmarkStart profiles). Errors are
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
	if err := json.Unmarshal(raw, out, listDecoding); err != nil {
		return nil, fmt.Errorf("decoding the list of %s: %w", resource, err)
	}
	// As the typed clients' decoder leaves it.
	out.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	return out, nil
}

// listDecoding decodes lists with the JSON v2 decoder (the Go team's
// go-json-experiment, encoding/json/v2 to be), about twice as fast on
// VM and instance lists as the encoding/json fork client-go uses
// (BenchmarkListDecode). Like client-go's it matches names case
// sensitively; like it, it takes duplicate names and invalid UTF-8
// rather than fail a whole list on one odd object. The listed types
// hold no interface values (TestListTypesHoldNoInterfaces), so numbers
// decode as client-go's would.
var listDecoding = json.JoinOptions(
	jsontext.AllowDuplicateNames(true),
	jsontext.AllowInvalidUTF8(true),
	json.WithUnmarshalers(json.JoinUnmarshalers(
		json.UnmarshalFromFunc(decodeInstanceSpec),
		json.UnmarshalFromFunc(decodeTime),
	)),
)

// instanceSpecFields is VirtualMachineInstanceSpec without its methods.
type instanceSpecFields kubevirtv1.VirtualMachineInstanceSpec

// decodeInstanceSpec decodes what KubeVirt's own
// VirtualMachineInstanceSpec.UnmarshalJSON decodes, in the stream. Its
// method reads the spec again with encoding/json, which was half of the
// decoding of every VM and instance.
func decodeInstanceSpec(d *jsontext.Decoder, spec *kubevirtv1.VirtualMachineInstanceSpec) error {
	if err := json.UnmarshalDecode(d, (*instanceSpecFields)(spec)); err != nil {
		return err
	}
	if spec.DNSConfig != nil {
		canonicalNameservers(spec.DNSConfig.Nameservers)
	}
	return nil
}

// canonicalNameservers writes each address that parses in its canonical
// form, as KubeVirt's method does (TestDecodeInstanceSpecAsKubeVirt).
func canonicalNameservers(ns []string) {
	for i, a := range ns {
		if ip := netutils.ParseIPSloppy(a); ip != nil {
			ns[i] = ip.String()
		}
	}
}

// decodeTime decodes a metav1.Time as its own UnmarshalJSON does (null is
// the zero time, else an RFC 3339 string, in local time), without that
// method's second pass over the value with encoding/json: a VM carries a
// dozen times (managed fields, conditions), and that pass was a twentieth
// of the plugin's CPU at start.
func decodeTime(d *jsontext.Decoder, t *metav1.Time) error {
	if d.PeekKind() == 'n' {
		_, err := d.ReadToken()
		t.Time = time.Time{}
		return err
	}
	var s string
	if err := json.UnmarshalDecode(d, &s); err != nil {
		return err
	}
	parsed, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return err
	}
	t.Time = parsed.Local()
	return nil
}
