package kube

import (
	stdjson "encoding/json"
	"reflect"
	"testing"

	"github.com/go-json-experiment/json"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	kjson "sigs.k8s.io/json"

	"github.com/caddy-proxmox/caddy-proxmox/internal/fleet"
)

// fleetLists are n fleet VMs, their instances and DataVolumes as
// kube-apiserver answers a list of each: with managed fields, and with
// DNS settings on some, which KubeVirt's decoding rewrites.
func fleetLists(t testing.TB, n int) map[string][]byte {
	objs, err := fleet.Objects(fleet.Spec{Namespace: "vms", N: n, FirstVMID: 1000, Nodes: []string{"kv-node-1", "kv-node-2"}})
	if err != nil {
		t.Fatal(err)
	}
	managed := []metav1.ManagedFieldsEntry{{Manager: "caddy-proxmox", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "kubevirt.io/v1",
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:annotations":{".":{},"f:a":{}}},"f:spec":{".":{},"f:runStrategy":{}}}`)},
		Time: &metav1.Time{Time: metav1.Now().Rfc3339Copy().Time}}}
	dns := &corev1.PodDNSConfig{Nameservers: []string{"010.000.000.053", "2001:DB8::1", "::ffff:192.0.2.1", "not an address", ""}}
	vms := kubevirtv1.VirtualMachineList{TypeMeta: metav1.TypeMeta{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachineList"}, ListMeta: metav1.ListMeta{ResourceVersion: "7"}}
	vmis := kubevirtv1.VirtualMachineInstanceList{TypeMeta: metav1.TypeMeta{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachineInstanceList"}}
	dvs := cdiv1.DataVolumeList{TypeMeta: metav1.TypeMeta{APIVersion: "cdi.kubevirt.io/v1beta1", Kind: "DataVolumeList"}}
	for i, o := range objs {
		o.(metav1.Object).SetManagedFields(managed)
		switch o := o.(type) {
		case *kubevirtv1.VirtualMachine:
			if i%3 == 0 {
				o.Spec.Template.Spec.DNSConfig = dns.DeepCopy()
			}
			vms.Items = append(vms.Items, *o)
		case *kubevirtv1.VirtualMachineInstance:
			o.Spec.DNSConfig = dns.DeepCopy()
			vmis.Items = append(vmis.Items, *o)
		case *cdiv1.DataVolume:
			dvs.Items = append(dvs.Items, *o)
		}
	}
	out := map[string][]byte{}
	for name, l := range map[string]runtime.Object{"virtualmachines": &vms, "virtualmachineinstances": &vmis, "datavolumes": &dvs} {
		b, err := stdjson.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = b
	}
	return out
}

func newList(resource string) runtime.Object {
	switch resource {
	case "virtualmachines":
		return &kubevirtv1.VirtualMachineList{}
	case "virtualmachineinstances":
		return &kubevirtv1.VirtualMachineInstanceList{}
	}
	return &cdiv1.DataVolumeList{}
}

// listDecoding reads every list listJSON serves as client-go's decoder
// does, KubeVirt's own UnmarshalJSON methods included.
func TestListDecodingAsClientGo(t *testing.T) {
	for resource, raw := range fleetLists(t, 30) {
		t.Run(resource, func(t *testing.T) {
			want, got := newList(resource), newList(resource)
			if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, want); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(raw, got, listDecoding); err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(want, got) {
				t.Fatalf("decoded differently:\nclient-go %+v\nours      %+v", want, got)
			}
		})
	}
}

// KubeVirt's method rewrites nameservers that parse; decodeInstanceSpec
// must do the same, and leave the rest of the spec as the method does.
func TestDecodeInstanceSpecAsKubeVirt(t *testing.T) {
	for _, doc := range []string{
		`{}`,
		`{"dnsConfig":{}}`,
		`{"dnsConfig":{"nameservers":["010.000.000.053","2001:DB8::1","::ffff:192.0.2.1","1.2.3","","x"],"searches":["a"]},"hostname":"h"}`,
		`{"dnsConfig":null,"subdomain":"s"}`,
	} {
		var want, got kubevirtv1.VirtualMachineInstanceSpec
		if err := want.UnmarshalJSON([]byte(doc)); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(doc), &got, listDecoding); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(want, got) {
			t.Errorf("%s: KubeVirt %+v, ours %+v", doc, want.DNSConfig, got.DNSConfig)
		}
	}
}

// client-go's decoder keeps integers in interface values as int64; the v2
// decoder would make them float64. No listed type may hold one, except
// inside a type that decodes itself.
func TestListTypesHoldNoInterfaces(t *testing.T) {
	unmarshaler := reflect.TypeFor[stdjson.Unmarshaler]()
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type, path string) []string
	walk = func(typ reflect.Type, path string) []string {
		if seen[typ] || reflect.PointerTo(typ).Implements(unmarshaler) && typ != reflect.TypeFor[kubevirtv1.VirtualMachineInstanceSpec]() {
			return nil
		}
		seen[typ] = true
		switch typ.Kind() {
		case reflect.Interface:
			return []string{path}
		case reflect.Pointer, reflect.Slice, reflect.Array:
			return walk(typ.Elem(), path+"[]")
		case reflect.Map:
			return append(walk(typ.Key(), path+"{key}"), walk(typ.Elem(), path+"{}")...)
		case reflect.Struct:
			var found []string
			for i := range typ.NumField() {
				if f := typ.Field(i); f.IsExported() && f.Tag.Get("json") != "-" {
					found = append(found, walk(f.Type, path+"."+f.Name)...)
				}
			}
			return found
		}
		return nil
	}
	for _, l := range []any{kubevirtv1.VirtualMachineList{}, kubevirtv1.VirtualMachineInstanceList{}, cdiv1.DataVolumeList{}} {
		if found := walk(reflect.TypeOf(l), reflect.TypeOf(l).Name()); len(found) > 0 {
			t.Errorf("interface values: %v", found)
		}
	}
}

// BenchmarkListDecode compares client-go's decoder with listDecoding on
// the lists of 1,000 fleet VMs (half running).
func BenchmarkListDecode(b *testing.B) {
	lists := fleetLists(b, 1000)
	for _, dec := range []struct {
		name   string
		decode func([]byte, any) error
	}{
		{"client-go", func(raw []byte, v any) error { return kjson.UnmarshalCaseSensitivePreserveInts(raw, v) }},
		{"listDecoding", func(raw []byte, v any) error { return json.Unmarshal(raw, v, listDecoding) }},
	} {
		b.Run(dec.name, func(b *testing.B) {
			var size int64
			for _, raw := range lists {
				size += int64(len(raw))
			}
			b.SetBytes(size)
			for b.Loop() {
				for resource, raw := range lists {
					if err := dec.decode(raw, newList(resource)); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// decodeTime takes what metav1.Time's own method takes, and refuses what
// it refuses.
func TestDecodeTimeAsMetav1(t *testing.T) {
	for _, doc := range []string{`null`, `"2025-06-01T12:00:00Z"`, `"2025-06-01T14:00:00+02:00"`, `"2025-06-01T12:00:00.5Z"`, `""`, `"yesterday"`, `42`, `{}`} {
		var want, got metav1.Time
		wantErr := want.UnmarshalJSON([]byte(doc))
		gotErr := json.Unmarshal([]byte(doc), &got, listDecoding)
		if (wantErr == nil) != (gotErr == nil) || !want.Equal(&got) || want.Location().String() != got.Location().String() {
			t.Errorf("%s: metav1 %v (%v), ours %v (%v)", doc, want, wantErr, got, gotErr)
		}
	}
	// Times behind pointers, null or not, as client-go's decoder leaves them.
	doc := []byte(`{"metadata":{"name":"a","creationTimestamp":"2025-06-01T12:00:00Z","deletionTimestamp":null,"managedFields":[{"manager":"m","time":"2025-06-01T12:00:01Z"},{"manager":"n","time":null}]}}`)
	var want, got kubevirtv1.VirtualMachine
	if err := kjson.UnmarshalCaseSensitivePreserveInts(doc, &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(doc, &got, listDecoding); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(want.ObjectMeta, got.ObjectMeta) {
		t.Errorf("metadata: client-go %+v, ours %+v", want.ObjectMeta, got.ObjectMeta)
	}
}
