package testenv

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// apply creates each object, or replaces it if it already exists.
func apply(ctx context.Context, dyn dynamic.Interface, objs []*unstructured.Unstructured) error {
	for _, obj := range objs {
		c, err := resourceFor(dyn, obj)
		if err != nil {
			return err
		}
		_, err = c.Create(ctx, obj, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			var cur *unstructured.Unstructured
			if cur, err = c.Get(ctx, obj.GetName(), metav1.GetOptions{}); err == nil {
				obj.SetResourceVersion(cur.GetResourceVersion())
				_, err = c.Update(ctx, obj, metav1.UpdateOptions{})
			}
		}
		if err != nil {
			return fmt.Errorf("testenv: apply %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	return nil
}

func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// waitCRDs waits until all crds are Established and served, and returns
// when the last of them leaves the 2 s window in which creates are delayed.
//
// kube-apiserver delays every create of a custom resource by 2 s while its
// CRD was established less than 2 s ago (an HA safeguard in
// apiextensions-apiserver). Start waits that window out so that tests do
// not pay it.
func waitCRDs(ctx context.Context, dyn dynamic.Interface, crds []*unstructured.Unstructured) (settled time.Time, err error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, crd := range crds {
		name := crd.GetName()
		group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
		plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
		versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		var version string
		if len(versions) > 0 {
			version, _, _ = unstructured.NestedString(versions[0].(map[string]any), "name")
		}
		for {
			cur, err := dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
			if since, ok := crdEstablished(cur); err == nil && ok {
				if t := since.Add(2*time.Second + 10*time.Millisecond); t.After(settled) {
					settled = t
				}
				// Established means the handler is installed; a list proves
				// that the resource is served.
				_, err = dyn.Resource(schema.GroupVersionResource{Group: group, Version: version, Resource: plural}).
					List(ctx, metav1.ListOptions{Limit: 1})
				if err == nil {
					break
				}
			}
			select {
			case <-ctx.Done():
				return settled, fmt.Errorf("testenv: CRD %s not established: %v (last error: %v)", name, ctx.Err(), err)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return settled, nil
}

// crdEstablished returns whether crd is Established, and since when
// (lastTransitionTime, which has a resolution of one second).
func crdEstablished(crd *unstructured.Unstructured) (time.Time, bool) {
	if crd == nil {
		return time.Time{}, false
	}
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			ts, _ := m["lastTransitionTime"].(string)
			t, err := time.Parse(time.RFC3339, ts)
			if err != nil {
				t = time.Now()
			}
			return t, true
		}
	}
	return time.Time{}, false
}

// AggregateClusterRoles does once what kube-controller-manager's
// clusterrole-aggregation controller does continuously: every ClusterRole
// with an aggregationRule (admin, edit, view, ...) gets the rules of all
// ClusterRoles its selectors match. The test cluster has no
// controller-manager, so without this the built-in admin/edit/view roles
// are EMPTY. Call it again after creating more aggregated roles.
func AggregateClusterRoles(ctx context.Context, kube kubernetes.Interface) error {
	list, err := kube.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	roles := list.Items
	sort.Slice(roles, func(i, j int) bool { return roles[i].Name < roles[j].Name })
	orig := make([][]rbacv1.PolicyRule, len(roles))
	for i := range roles {
		orig[i] = roles[i].Rules
	}
	// admin aggregates edit which aggregates view: iterate to a fixed point.
	for pass := 0; pass < 10; pass++ {
		changed := false
		for i := range roles {
			ar := roles[i].AggregationRule
			if ar == nil {
				continue
			}
			var rules []rbacv1.PolicyRule
			for j := range roles {
				if i == j || !matchesAny(ar.ClusterRoleSelectors, roles[j].Labels) {
					continue
				}
				for _, r := range roles[j].Rules {
					if !containsRule(rules, r) {
						rules = append(rules, r)
					}
				}
			}
			if !reflect.DeepEqual(rules, roles[i].Rules) {
				roles[i].Rules = rules
				changed = true
			}
		}
		if !changed {
			break
		}
	}
	for i := range roles {
		if roles[i].AggregationRule == nil || reflect.DeepEqual(orig[i], roles[i].Rules) {
			continue
		}
		if _, err := kube.RbacV1().ClusterRoles().Update(ctx, &roles[i], metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("testenv: aggregate ClusterRole %s: %w", roles[i].Name, err)
		}
	}
	return nil
}

func matchesAny(selectors []metav1.LabelSelector, l map[string]string) bool {
	for i := range selectors {
		sel, err := metav1.LabelSelectorAsSelector(&selectors[i])
		if err != nil || sel.Empty() {
			continue
		}
		if sel.Matches(labels.Set(l)) {
			return true
		}
	}
	return false
}

func containsRule(rules []rbacv1.PolicyRule, r rbacv1.PolicyRule) bool {
	for _, x := range rules {
		if reflect.DeepEqual(x, r) {
			return true
		}
	}
	return false
}
