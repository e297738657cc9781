package testenv

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

// KubeVirt as virt-operator installs it. The manifests come from
// KubeVirtManifestFile, which build-binaries.sh prints with KubeVirt's own
// install strategy (tools/kubevirt/manifests); nothing of them is written
// by hand here.
const (
	// KubeVirtVersion is the KubeVirt release whose virt-api and manifests
	// the test cluster runs (kubevirt= in build-binaries.sh).
	KubeVirtVersion = "v1.8.0"
	// KubeVirtNamespace is KubeVirt's install namespace, which is also
	// where virt-api out of a pod assumes it lives.
	KubeVirtNamespace = "kubevirt"
	// KubeVirtManifestFile is the name of the generated manifests in the
	// binaries folder.
	KubeVirtManifestFile = "kubevirt.yaml"
	// CDIManifestFile holds what CDI's operator installs, generated from
	// CDI's own operator code (build-binaries.sh, tools/cdi/manifests).
	CDIManifestFile = "cdi.yaml"
	// KubeVirtCRName is the name of the KubeVirt custom resource.
	KubeVirtCRName = "kubevirt"

	// Service accounts of KubeVirt's components (components.*ServiceAccountName).
	// KubeVirt's webhooks let only these change a VMI's spec or its
	// reserved labels.
	VirtAPIServiceAccount        = "kubevirt-apiserver"
	VirtControllerServiceAccount = "kubevirt-controller"
	VirtHandlerServiceAccount    = "kubevirt-handler"
)

// kubevirtManifests holds the generated objects, sorted by when testenv
// installs them.
type kubevirtManifests struct {
	// crds: the CustomResourceDefinitions, KubeVirt's and CDI's.
	crds []*unstructured.Unstructured
	// base: the namespace, service accounts and RBAC, installed with or
	// without virt-api.
	base []*unstructured.Unstructured
	// virtAPI: what routes to virt-api (its Service, APIServices and
	// webhook configurations), installed once it serves.
	virtAPI []*unstructured.Unstructured
	// cdiAPI: what routes to CDI's API server (the same kinds), installed
	// only with the real controllers, once it serves.
	cdiAPI []*unstructured.Unstructured
	// after: objects virt-operator creates once virt-api admits them (the
	// common instancetypes and preferences).
	after []*unstructured.Unstructured
}

// loadKubeVirtManifests reads KubeVirtManifestFile and CDIManifestFile
// from the binaries folder.
func loadKubeVirtManifests(binDir string) (*kubevirtManifests, error) {
	m := &kubevirtManifests{}
	for _, name := range []string{KubeVirtManifestFile, CDIManifestFile} {
		path := filepath.Join(binDir, name)
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("testenv: generated manifests: %w (run build-binaries.sh)", err)
		}
		objs, err := decodeYAML(b)
		if err != nil {
			return nil, fmt.Errorf("testenv: %s: %w", path, err)
		}
		api := &m.virtAPI
		if name == CDIManifestFile {
			api = &m.cdiAPI
		}
		for _, o := range objs {
			switch o.GetKind() {
			case "CustomResourceDefinition":
				m.crds = append(m.crds, o)
			case "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
				"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
				m.base = append(m.base, o)
			case "Service", "APIService", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration":
				*api = append(*api, o)
			case "VirtualMachineClusterInstancetype", "VirtualMachineClusterPreference":
				m.after = append(m.after, o)
			default:
				return nil, fmt.Errorf("testenv: %s: unexpected %s %s", path, o.GetKind(), o.GetName())
			}
		}
	}
	if len(m.crds) == 0 || len(m.virtAPI) == 0 || len(m.cdiAPI) == 0 {
		return nil, fmt.Errorf("testenv: %s and %s hold no CRDs, no virt-api or no CDI API objects (rebuild them with build-binaries.sh)",
			KubeVirtManifestFile, CDIManifestFile)
	}
	return m, nil
}

func decodeYAML(b []byte) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(obj) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
}

// routeToLoopback rewrites the objects that reach an API server of the
// environment (virt-api, CDI's API server) for one listening on
// 127.0.0.1:port with a serving certificate of caPEM:
//
//   - webhooks call https://127.0.0.1:port<path> (the operators point them
//     at a Service, which needs kube-proxy to reach);
//   - the Service becomes an ExternalName service for 127.0.0.1
//     and the APIServices name the real port: with ExternalName services
//     the aggregator dials externalName:port itself (ResolveCluster), while
//     EndpointSlices, which --enable-aggregator-routing would use, refuse
//     loopback addresses;
//   - webhooks and APIServices carry caBundle, which the operators fill in
//     from their own CAs.
func routeToLoopback(objs []*unstructured.Unstructured, port int, caPEM []byte) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, src := range objs {
		o := src.DeepCopy()
		var err error
		switch o.GetKind() {
		case "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration":
			err = rewriteWebhooks(o, port, caPEM)
		case "APIService":
			err = rewriteAPIService(o, port, caPEM)
		case "Service":
			o.Object["spec"] = map[string]any{"type": "ExternalName", "externalName": "127.0.0.1"}
		}
		if err != nil {
			return nil, fmt.Errorf("testenv: %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		out = append(out, o)
	}
	return out, nil
}

func rewriteWebhooks(o *unstructured.Unstructured, port int, caPEM []byte) error {
	hooks, _, err := unstructured.NestedSlice(o.Object, "webhooks")
	if err != nil {
		return err
	}
	for i, h := range hooks {
		hook := h.(map[string]any)
		path, _, _ := unstructured.NestedString(hook, "clientConfig", "service", "path")
		if path == "" {
			return fmt.Errorf("webhook %v has no service path", hook["name"])
		}
		hook["clientConfig"] = map[string]any{
			"url":      fmt.Sprintf("https://127.0.0.1:%d%s", port, path),
			"caBundle": caBundle(caPEM),
		}
		hooks[i] = hook
	}
	return unstructured.SetNestedSlice(o.Object, hooks, "webhooks")
}

func rewriteAPIService(o *unstructured.Unstructured, port int, caPEM []byte) error {
	if err := unstructured.SetNestedField(o.Object, int64(port), "spec", "service", "port"); err != nil {
		return err
	}
	if err := unstructured.SetNestedField(o.Object, caBundle(caPEM), "spec", "caBundle"); err != nil {
		return err
	}
	unstructured.RemoveNestedField(o.Object, "spec", "insecureSkipTLSVerify")
	return nil
}

// caBundle is the JSON form of a []byte field (base64).
func caBundle(pem []byte) string { return base64.StdEncoding.EncodeToString(pem) }

// kinds maps the kinds testenv installs to their REST resource (no
// discovery needed); namespaced tells whether the resource is namespaced.
var kinds = map[string]struct {
	gvr        schema.GroupVersionResource
	namespaced bool
}{
	"CustomResourceDefinition":          {crdGVR, false},
	"Namespace":                         {schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, false},
	"ServiceAccount":                    {schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}, true},
	"Service":                           {schema.GroupVersionResource{Version: "v1", Resource: "services"}, true},
	"ConfigMap":                         {schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, true},
	"ClusterRole":                       {rbacGVR("clusterroles"), false},
	"ClusterRoleBinding":                {rbacGVR("clusterrolebindings"), false},
	"Role":                              {rbacGVR("roles"), true},
	"RoleBinding":                       {rbacGVR("rolebindings"), true},
	"ValidatingWebhookConfiguration":    {admissionGVR("validatingwebhookconfigurations"), false},
	"MutatingWebhookConfiguration":      {admissionGVR("mutatingwebhookconfigurations"), false},
	"ValidatingAdmissionPolicy":         {admissionGVR("validatingadmissionpolicies"), false},
	"ValidatingAdmissionPolicyBinding":  {admissionGVR("validatingadmissionpolicybindings"), false},
	"APIService":                        {apiServiceGVR, false},
	"VirtualMachineClusterInstancetype": {instancetypeGVR("virtualmachineclusterinstancetypes"), false},
	"VirtualMachineClusterPreference":   {instancetypeGVR("virtualmachineclusterpreferences"), false},
	"KubeVirt":                          {kubevirtGVR, true},
}

var (
	apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	kubevirtGVR   = schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "kubevirts"}
)

func rbacGVR(r string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: r}
}

func admissionGVR(r string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: r}
}

func instancetypeGVR(r string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "instancetype.kubevirt.io", Version: "v1beta1", Resource: r}
}

func resourceFor(dyn dynamic.Interface, obj *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	k, ok := kinds[obj.GetKind()]
	if !ok {
		return nil, fmt.Errorf("testenv: no resource known for %s", obj.GroupVersionKind())
	}
	if k.gvr.Group != obj.GroupVersionKind().Group {
		return nil, fmt.Errorf("testenv: %s is in group %q, not %q", obj.GetKind(), obj.GroupVersionKind().Group, k.gvr.Group)
	}
	if k.namespaced {
		return dyn.Resource(k.gvr).Namespace(obj.GetNamespace()), nil
	}
	return dyn.Resource(k.gvr), nil
}

// ensureKubeVirtCR creates the KubeVirt custom resource with the given
// feature gates and the status virt-operator gives it once it has
// installed everything: virt-api ignores a KubeVirt CR whose phase is empty
// (GetConfigFromKubeVirtCR) and takes the default architecture of VMs from
// its status.
func ensureKubeVirtCR(ctx context.Context, dyn dynamic.Interface, gates []string) error {
	gateList := make([]any, 0, len(gates))
	for _, g := range gates {
		gateList = append(gateList, g)
	}
	cr := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1",
		"kind":       "KubeVirt",
		"metadata":   map[string]any{"name": KubeVirtCRName, "namespace": KubeVirtNamespace},
		"spec": map[string]any{
			"configuration": map[string]any{
				"developerConfiguration": map[string]any{"featureGates": gateList},
			},
		},
	}}
	c := dyn.Resource(kubevirtGVR).Namespace(KubeVirtNamespace)
	created, err := c.Create(ctx, cr, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("testenv: create KubeVirt CR: %w", err)
	}
	status := map[string]any{
		"phase": "Deployed",
		// virt-operator records its own GOARCH (SetDefaultArchitecture);
		// the seeded nodes are amd64.
		"defaultArchitecture":     "amd64",
		"observedKubeVirtVersion": KubeVirtVersion,
		"targetKubeVirtVersion":   KubeVirtVersion,
		"operatorVersion":         KubeVirtVersion,
		"conditions": []any{
			map[string]any{"type": "Available", "status": "True", "reason": "AllComponentsReady", "message": "All components are ready."},
			map[string]any{"type": "Progressing", "status": "False", "reason": "AllComponentsReady", "message": "All components are ready."},
			map[string]any{"type": "Degraded", "status": "False", "reason": "AllComponentsReady", "message": "All components are ready."},
		},
	}
	if err := unstructured.SetNestedField(created.Object, status, "status"); err != nil {
		return err
	}
	if _, err := c.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("testenv: KubeVirt CR status: %w", err)
	}
	return nil
}

// SetFeatureGates replaces the feature gates of the KubeVirt CR
// (spec.configuration.developerConfiguration.featureGates). virt-api picks
// the change up through its informer within moments; use it only in
// tests that own their Env, since it changes KubeVirt for every test.
func (e *Env) SetFeatureGates(ctx context.Context, gates ...string) error {
	c := e.directDynamic.Resource(kubevirtGVR).Namespace(KubeVirtNamespace)
	cr, err := c.Get(ctx, KubeVirtCRName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	list := make([]any, 0, len(gates))
	for _, g := range gates {
		list = append(list, g)
	}
	if err := unstructured.SetNestedSlice(cr.Object, list, "spec", "configuration", "developerConfiguration", "featureGates"); err != nil {
		return err
	}
	_, err = c.Update(ctx, cr, metav1.UpdateOptions{})
	return err
}

// SetVMStateStorageClass sets the KubeVirt CR's vmStateStorageClass, the
// class of the claims holding VMs' persistent EFI/TPM state (KubeVirt's
// backend storage; the default class without it).
func (e *Env) SetVMStateStorageClass(ctx context.Context, class string) error {
	c := e.directDynamic.Resource(kubevirtGVR).Namespace(KubeVirtNamespace)
	cr, err := c.Get(ctx, KubeVirtCRName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if err := unstructured.SetNestedField(cr.Object, class, "spec", "configuration", "vmStateStorageClass"); err != nil {
		return err
	}
	_, err = c.Update(ctx, cr, metav1.UpdateOptions{})
	return err
}

// isWebhookDenial reports whether err is a denial by one of KubeVirt's
// admission webhooks.
func isWebhookDenial(err error) bool {
	return err != nil && strings.Contains(err.Error(), "admission webhook") && strings.Contains(err.Error(), "kubevirt.io")
}

// ignoreExists treats AlreadyExists as success.
func ignoreExists(err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
