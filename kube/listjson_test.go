package kube

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
	kvfake "kubevirt.io/client-go/kubevirt/fake"
	"kubevirt.io/client-go/kubevirt/scheme"
)

// listJSON asks what the typed client asks (path, list options), decodes
// what it decodes, and returns client-go's errors, which the reflector
// reads: an expired resourceVersion must stay one.
func TestListJSON(t *testing.T) {
	const vmList = `{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineList","metadata":{"resourceVersion":"42"},
"items":[{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","metadata":{"name":"a","namespace":"vms","resourceVersion":"41","labels":{"x":"1"}},
"spec":{"runStrategy":"Always","template":{"spec":{"domain":{"cpu":{"cores":2},"memory":{"guest":"1Gi"},"devices":{}}}}}}]}`
	const expired = `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (42)","reason":"Expired","code":410}`
	cases := []struct {
		name, ns, wantPath string
		code               int
		body               string
		check              func(t *testing.T, got *kubevirtv1.VirtualMachineList, err error)
	}{
		{"namespace", "vms", "/apis/kubevirt.io/v1/namespaces/vms/virtualmachines", 200, vmList, func(t *testing.T, got *kubevirtv1.VirtualMachineList, err error) {
			if err != nil {
				t.Fatal(err)
			}
			if got.ResourceVersion != "42" || len(got.Items) != 1 {
				t.Fatalf("list %+v", got.ListMeta)
			}
			vm := got.Items[0]
			if vm.Name != "a" || vm.Labels["x"] != "1" || vm.Spec.Template.Spec.Domain.CPU.Cores != 2 || vm.Spec.Template.Spec.Domain.Memory.Guest.String() != "1Gi" {
				t.Fatalf("item %+v", vm)
			}
			if rs, _ := vm.RunStrategy(); rs != kubevirtv1.RunStrategyAlways {
				t.Fatalf("run strategy %q", rs)
			}
			if !got.GetObjectKind().GroupVersionKind().Empty() {
				t.Fatalf("list kind %v kept; the typed client clears it", got.GetObjectKind().GroupVersionKind())
			}
		}},
		{"all namespaces", "", "/apis/kubevirt.io/v1/virtualmachines", 200, vmList, func(t *testing.T, got *kubevirtv1.VirtualMachineList, err error) {
			if err != nil || len(got.Items) != 1 {
				t.Fatalf("%v %v", got, err)
			}
		}},
		{"expired", "vms", "/apis/kubevirt.io/v1/namespaces/vms/virtualmachines", 410, expired, func(t *testing.T, _ *kubevirtv1.VirtualMachineList, err error) {
			if !apierrors.IsResourceExpired(err) {
				t.Fatalf("err %v (%T); want client-go's Expired", err, err)
			}
		}},
		{"garbage", "vms", "/apis/kubevirt.io/v1/namespaces/vms/virtualmachines", 200, `{"items":[{`, func(t *testing.T, _ *kubevirtv1.VirtualMachineList, err error) {
			if err == nil {
				t.Fatal("no error for a truncated answer")
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				q := r.URL.Query()
				if r.URL.Path != tc.wantPath || q.Get("resourceVersion") != "0" || q.Get("labelSelector") != "x=1" || q.Get("limit") != "500" {
					t.Errorf("asked %s", r.URL)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.code)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			rc, err := rest.RESTClientFor(&rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{
				GroupVersion: &schema.GroupVersion{Group: "kubevirt.io", Version: "v1"}, NegotiatedSerializer: scheme.Codecs.WithoutConversion(),
			}, APIPath: "/apis"})
			if err != nil {
				t.Fatal(err)
			}
			typed := func(context.Context, metav1.ListOptions) (*kubevirtv1.VirtualMachineList, error) {
				t.Fatal("the typed client was asked")
				return nil, nil
			}
			out, err := listJSON(context.Background(), rc, "virtualmachines", tc.ns, metav1.ListOptions{ResourceVersion: "0", LabelSelector: "x=1", Limit: 500}, typed)
			got, _ := out.(*kubevirtv1.VirtualMachineList)
			tc.check(t, got, err)
		})
	}
}

// A fake clientset has no REST client: its typed List answers.
func TestListJSONFake(t *testing.T) {
	kv := kvfake.NewSimpleClientset(&kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "vms"}})
	out, err := listJSON(context.Background(), kv.KubevirtV1().RESTClient(), "virtualmachines", "vms", metav1.ListOptions{}, kv.KubevirtV1().VirtualMachines("vms").List)
	if err != nil {
		t.Fatal(err)
	}
	if l := out.(*kubevirtv1.VirtualMachineList); len(l.Items) != 1 || l.Items[0].Name != "a" {
		t.Fatalf("%+v", l)
	}
}
