package kube

import (
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// Cached objects repeat the same small maps thousands of times: every
// disk's size ("storage: 32Gi") in its VM's DataVolume template, its
// DataVolume and its claim, every instance's memory request, the labels
// of every VM template. A map costs some 300 bytes however small, one of
// quantities some 700, so the transforms make equal maps one: cached
// objects are read-only (readers copy before they change anything), so
// sharing them is safe. The table is bounded; when it fills it starts
// over (maps already shared stay shared, as long as their objects live).
const internMax = 4096

var interned = struct {
	sync.Mutex
	quantities map[string]corev1.ResourceList
	strs       map[string]map[string]string
}{quantities: map[string]corev1.ResourceList{}, strs: map[string]map[string]string{}}

// internQuantities returns a ResourceList equal to l, shared with the
// cached objects that have one equal to it.
func internQuantities(l corev1.ResourceList) corev1.ResourceList {
	if len(l) == 0 {
		return l
	}
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, string(k))
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		q := l[corev1.ResourceName(k)]
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(q.String())
		b.WriteByte(0)
	}
	return internAs(interned.quantities, b.String(), l)
}

// internStrings is internQuantities for label and annotation maps. A nil
// or empty map is returned as it is (nil and empty differ to ReplaceVM).
func internStrings(m map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(m[k])
		b.WriteByte(0)
	}
	return internAs(interned.strs, b.String(), m)
}

// internAs returns the value table keeps under key (a canonical form of
// v), after storing v there if it had none.
func internAs[M any](table map[string]M, key string, v M) M {
	interned.Lock()
	defer interned.Unlock()
	if have, ok := table[key]; ok {
		return have
	}
	if len(table) >= internMax {
		clear(table)
	}
	table[key] = v
	return v
}

// internRequirements shares the maps of a container's resources.
func internRequirements(r *corev1.ResourceRequirements) {
	r.Requests = internQuantities(r.Requests)
	r.Limits = internQuantities(r.Limits)
}

// internVolumeRequirements shares the maps of a claim's resources.
func internVolumeRequirements(r *corev1.VolumeResourceRequirements) {
	r.Requests = internQuantities(r.Requests)
	r.Limits = internQuantities(r.Limits)
}
