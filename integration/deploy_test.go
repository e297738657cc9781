package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"kubevirt.io/client-go/containerizeddataimporter"
	"kubevirt.io/client-go/kubevirt"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

const deployFile = "../deploy/caddy-proxmox.yaml"

func deployObjects(t *testing.T) []*unstructured.Unstructured {
	return deployObjectsOf(t, deployFile)
}

// deployObjectsOf reads the objects of a manifest of deploy/.
func deployObjectsOf(t *testing.T, file string) []*unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if len(m) > 0 {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
	return out
}

// TestDeployManifests applies deploy/ to the real apiserver (everything
// validated by a server-side dry run, the RBAC objects for real), then
// proves the ServiceAccount's rights are enough to run the plugin — its
// caches sync as that account — and no more than asked for.
func TestDeployManifests(t *testing.T) {
	ctx := context.Background()
	objs := deployObjects(t)
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(env.Kube.Discovery()))
	kinds := map[string]bool{}
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		kinds[gvk.Kind] = true
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %v", gvk, err)
		}
		ri := dyn.Resource(m.Resource)
		var client dynamic.ResourceInterface = ri
		if ns := o.GetNamespace(); ns != "" {
			client = ri.Namespace(ns)
		}
		real := map[string]bool{"Namespace": true, "ServiceAccount": true, "ClusterRole": true, "ClusterRoleBinding": true, "Role": true, "RoleBinding": true}[gvk.Kind]
		opts := metav1.CreateOptions{}
		if !real {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		if _, err := client.Create(ctx, o, opts); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("%s %s: %v", gvk.Kind, o.GetName(), err)
		}
		if gvk.Kind == "ConfigMap" {
			cf, _, _ := unstructured.NestedString(o.Object, "data", "Caddyfile")
			if _, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cf), nil); err != nil {
				t.Fatalf("the shipped Caddyfile does not adapt: %v", err)
			}
		}
	}
	for _, k := range []string{"Deployment", "Service", "ServiceAccount", "ClusterRole", "ConfigMap"} {
		if !kinds[k] {
			t.Fatalf("deploy/ lacks a %s", k)
		}
	}
	var replicas any
	for _, o := range objs {
		if o.GetKind() == "Deployment" {
			replicas, _, _ = unstructured.NestedFieldNoCopy(o.Object, "spec", "replicas")
		}
	}
	if fmt.Sprint(replicas) != "2" {
		t.Fatalf("replicas %v, want 2", replicas)
	}

	sa := "system:serviceaccount:caddy-proxmox:caddy-proxmox"
	cfg := env.ImpersonatingConfig(sa, "system:serviceaccounts", "system:serviceaccounts:caddy-proxmox", "system:authenticated")
	kc := kubernetes.NewForConfigOrDie(cfg)
	allowed := func(verb, group, resource, sub, ns string) bool {
		r, err := kc.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: verb, Group: group, Resource: resource, Subresource: sub, Namespace: ns,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return r.Status.Allowed
	}
	for _, c := range []struct {
		verb, group, resource, sub, ns string
		want                           bool
	}{
		{"list", "kubevirt.io", "virtualmachines", "", "", true},
		{"patch", "kubevirt.io", "virtualmachines", "", "default", true},
		{"update", "subresources.kubevirt.io", "virtualmachines", "start", "default", true},
		{"get", "subresources.kubevirt.io", "virtualmachineinstances", "vnc", "default", true},
		{"create", "", "configmaps", "", "caddy-proxmox", true},
		{"impersonate", "", "users", "", "", true},
		{"delete", "", "namespaces", "", "", true},
		{"create", "", "namespaces", "", "", false},
		{"update", "", "configmaps", "", "caddy-proxmox", true},
		{"list", "cdi.kubevirt.io", "datavolumes", "", "default", true},
		{"watch", "cdi.kubevirt.io", "datavolumes", "", "", true},
		{"create", "cdi.kubevirt.io", "datavolumes", "", "default", true},
		{"delete", "cdi.kubevirt.io", "datavolumes", "", "default", true},
		{"create", "", "configmaps", "", "default", false},
		{"delete", "", "nodes", "", "", false},
		{"delete", "", "persistentvolumeclaims", "", "default", false},
		{"create", "rbac.authorization.k8s.io", "clusterroles", "", "", false},
		{"create", "", "pods", "", "default", false},
	} {
		if got := allowed(c.verb, c.group, c.resource, c.sub, c.ns); got != c.want {
			t.Errorf("%s %s/%s/%s in %q: allowed=%v, want %v", c.verb, c.group, c.resource, c.sub, c.ns, got, c.want)
		}
	}

	// The plugin's caches sync as the ServiceAccount.
	kv := kubevirt.NewForConfigOrDie(cfg)
	c := kube.New(kc, kv, cfg, kube.Options{TaskNamespace: "caddy-proxmox", SyncTimeout: 30 * time.Second,
		CDI: containerizeddataimporter.NewForConfigOrDie(cfg)})
	if err := c.Start(ctx); err != nil {
		t.Fatalf("caches do not sync with the shipped rights: %v", err)
	}
	defer c.Stop()
	if !c.HasCDI() {
		t.Fatal("DataVolumes are not watched (ISO downloads need them)")
	}
	if len(c.Nodes()) == 0 || !strings.Contains(strings.Join(c.Namespaces(), ","), "default") {
		t.Fatalf("nodes %v namespaces %v", c.Nodes(), c.Namespaces())
	}
	// And keep pools there.
	pool := fmt.Sprintf("deploy-probe/%d", time.Now().UnixNano())
	if err := c.CreatePoolRecord(ctx, translate.PoolRecord{ID: pool}); err != nil {
		t.Fatalf("creating a pool as the ServiceAccount: %v", err)
	}
	if err := c.UpdatePoolRecord(ctx, pool, func(r *translate.PoolRecord) bool { r.Comment = "probe"; return true }); err != nil {
		t.Fatalf("updating a pool as the ServiceAccount: %v", err)
	}
	if err := c.DeletePoolRecord(ctx, pool); err != nil {
		t.Fatalf("deleting a pool as the ServiceAccount: %v", err)
	}
	// And it can record a task in its namespace.
	if _, err := kc.CoreV1().ConfigMaps("caddy-proxmox").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-"}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatal(err)
	}
	// And claim console tickets there, and sweep expired claims.
	// The claim is still valid while it is used twice: an expired one may
	// be swept in between (a claim starts a background sweep), which would
	// make the second use look like the first.
	ticket := fmt.Sprintf("deploy-probe-%d", time.Now().UnixNano())
	expiry := time.Now().Add(2 * time.Second)
	if first, err := c.ConsoleClaims.Claim(ctx, ticket, expiry); err != nil || !first {
		t.Fatalf("claiming a console ticket as the ServiceAccount: %v %v", first, err)
	}
	if first, err := c.ConsoleClaims.Claim(ctx, ticket, expiry); err != nil || first {
		t.Fatalf("second claim as the ServiceAccount: %v %v", first, err)
	}
	time.Sleep(time.Until(expiry) + 10*time.Millisecond)
	// (A claim may start a background sweep that gets there first.)
	if _, err := c.ConsoleClaims.Collect(ctx); err != nil {
		t.Fatalf("sweeping claims as the ServiceAccount: %v", err)
	}
	if l, err := kc.CoreV1().ConfigMaps("caddy-proxmox").List(ctx, metav1.ListOptions{LabelSelector: "pve.caddy-proxmox.io/console-claim"}); err != nil || len(l.Items) != 0 {
		t.Fatalf("expired claims left after sweeping as the ServiceAccount: %v, %v", l, err)
	}
}
