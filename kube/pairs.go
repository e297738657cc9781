package kube

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// pairs is a small string map as keys and values one after the other,
// keys in order: a cached VM's labels and annotations. A Go map costs
// some 300 bytes however few its keys (a VM's labels are its vmid); the
// pairs cost their strings' headers. nil is a nil map, an empty non-nil
// pairs an empty one: the two differ to ReplaceVM.
type pairs []string

// pairsOf is m as pairs.
func pairsOf(m map[string]string) pairs {
	if m == nil {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make(pairs, 0, 2*len(m))
	for _, k := range keys {
		out = append(out, k, m[k])
	}
	return out
}

// get is the value of key k.
func (p pairs) get(k string) (string, bool) {
	for i := 0; i+1 < len(p); i += 2 {
		if p[i] == k {
			return p[i+1], true
		}
	}
	return "", false
}

// toMap is p as a new map (nil for nil).
func (p pairs) toMap() map[string]string {
	if p == nil {
		return nil
	}
	m := make(map[string]string, len(p)/2)
	for i := 0; i+1 < len(p); i += 2 {
		m[p[i]] = p[i+1]
	}
	return m
}

// vmTypeMeta is every cached VM's: kept once rather than per VM, as the
// instance, DataVolume and claim records do.
var vmTypeMeta = metav1.TypeMeta{APIVersion: kubevirtv1.GroupVersion.String(), Kind: "VirtualMachine"}
