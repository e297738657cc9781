package kube

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// recordMeta is the metadata a cached VM or instance record keeps: an
// ObjectMeta is 232 bytes, of which the informers, the overlay of our
// writes and the API read the names, UID, version, generation, times and
// owners; the fields almost never set go behind one pointer, and the
// labels and annotations are the record's own (packedVM, packedVMI).
// It is a metav1.Object, as client-go's stores want.
type recordMeta struct {
	Name, Namespace   string
	UID               types.UID
	ResourceVersion   string
	Generation        int64
	CreationTimestamp metav1.Time
	DeletionTimestamp *metav1.Time
	OwnerReferences   []metav1.OwnerReference
	rare              *rareMeta // nil when none is set
}

// rareMeta are the metadata fields a cached object seldom has.
type rareMeta struct {
	generateName, selfLink     string
	deletionGracePeriodSeconds *int64
	finalizers                 []string
	managedFields              []metav1.ManagedFieldsEntry
}

// recordMetaOf is m's record (without its labels and annotations).
func recordMetaOf(m *metav1.ObjectMeta) recordMeta {
	r := recordMeta{
		Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion, Generation: m.Generation,
		CreationTimestamp: m.CreationTimestamp, DeletionTimestamp: m.DeletionTimestamp, OwnerReferences: m.OwnerReferences,
	}
	if m.GenerateName != "" || m.SelfLink != "" || m.DeletionGracePeriodSeconds != nil || m.Finalizers != nil || m.ManagedFields != nil {
		r.rare = &rareMeta{generateName: m.GenerateName, selfLink: m.SelfLink, deletionGracePeriodSeconds: m.DeletionGracePeriodSeconds,
			finalizers: m.Finalizers, managedFields: m.ManagedFields}
	}
	return r
}

// objectMeta is r as an ObjectMeta with the labels and annotations given
// (sharing r's slices: read it, never modify it).
func (r *recordMeta) objectMeta(labels, annotations map[string]string) metav1.ObjectMeta {
	m := metav1.ObjectMeta{
		Name: r.Name, Namespace: r.Namespace, UID: r.UID, ResourceVersion: r.ResourceVersion, Generation: r.Generation,
		CreationTimestamp: r.CreationTimestamp, DeletionTimestamp: r.DeletionTimestamp, OwnerReferences: r.OwnerReferences,
		Labels: labels, Annotations: annotations,
	}
	if x := r.rare; x != nil {
		m.GenerateName, m.SelfLink, m.DeletionGracePeriodSeconds = x.generateName, x.selfLink, x.deletionGracePeriodSeconds
		m.Finalizers, m.ManagedFields = x.finalizers, x.managedFields
	}
	return m
}

// deepCopy is a copy of r sharing nothing that a setter could change.
func (r *recordMeta) deepCopy() recordMeta {
	cp := *r
	if r.DeletionTimestamp != nil {
		t := *r.DeletionTimestamp
		cp.DeletionTimestamp = &t
	}
	if r.OwnerReferences != nil {
		cp.OwnerReferences = make([]metav1.OwnerReference, len(r.OwnerReferences))
		for i := range r.OwnerReferences {
			r.OwnerReferences[i].DeepCopyInto(&cp.OwnerReferences[i])
		}
	}
	if r.rare != nil {
		x := *r.rare
		cp.rare = &x
	}
	return cp
}

func (r *recordMeta) rareOrNew() *rareMeta {
	if r.rare == nil {
		r.rare = &rareMeta{}
	}
	return r.rare
}

// metav1.Object. The record's own type gives the labels and annotations.

func (r *recordMeta) GetNamespace() string                { return r.Namespace }
func (r *recordMeta) SetNamespace(ns string)              { r.Namespace = ns }
func (r *recordMeta) GetName() string                     { return r.Name }
func (r *recordMeta) SetName(n string)                    { r.Name = n }
func (r *recordMeta) GetUID() types.UID                   { return r.UID }
func (r *recordMeta) SetUID(uid types.UID)                { r.UID = uid }
func (r *recordMeta) GetResourceVersion() string          { return r.ResourceVersion }
func (r *recordMeta) SetResourceVersion(v string)         { r.ResourceVersion = v }
func (r *recordMeta) GetGeneration() int64                { return r.Generation }
func (r *recordMeta) SetGeneration(g int64)               { r.Generation = g }
func (r *recordMeta) GetCreationTimestamp() metav1.Time   { return r.CreationTimestamp }
func (r *recordMeta) SetCreationTimestamp(t metav1.Time)  { r.CreationTimestamp = t }
func (r *recordMeta) GetDeletionTimestamp() *metav1.Time  { return r.DeletionTimestamp }
func (r *recordMeta) SetDeletionTimestamp(t *metav1.Time) { r.DeletionTimestamp = t }
func (r *recordMeta) GetOwnerReferences() []metav1.OwnerReference {
	return r.OwnerReferences
}
func (r *recordMeta) SetOwnerReferences(refs []metav1.OwnerReference) { r.OwnerReferences = refs }

func (r *recordMeta) GetGenerateName() string {
	if r.rare == nil {
		return ""
	}
	return r.rare.generateName
}
func (r *recordMeta) SetGenerateName(n string) { r.rareOrNew().generateName = n }
func (r *recordMeta) GetSelfLink() string {
	if r.rare == nil {
		return ""
	}
	return r.rare.selfLink
}
func (r *recordMeta) SetSelfLink(l string) { r.rareOrNew().selfLink = l }
func (r *recordMeta) GetDeletionGracePeriodSeconds() *int64 {
	if r.rare == nil {
		return nil
	}
	return r.rare.deletionGracePeriodSeconds
}
func (r *recordMeta) SetDeletionGracePeriodSeconds(s *int64) {
	r.rareOrNew().deletionGracePeriodSeconds = s
}
func (r *recordMeta) GetFinalizers() []string {
	if r.rare == nil {
		return nil
	}
	return r.rare.finalizers
}
func (r *recordMeta) SetFinalizers(f []string) { r.rareOrNew().finalizers = f }
func (r *recordMeta) GetManagedFields() []metav1.ManagedFieldsEntry {
	if r.rare == nil {
		return nil
	}
	return r.rare.managedFields
}
func (r *recordMeta) SetManagedFields(f []metav1.ManagedFieldsEntry) {
	r.rareOrNew().managedFields = f
}

// The labels and annotations: the record types override these.
func (r *recordMeta) GetLabels() map[string]string      { return nil }
func (r *recordMeta) SetLabels(map[string]string)       {}
func (r *recordMeta) GetAnnotations() map[string]string { return nil }
func (r *recordMeta) SetAnnotations(map[string]string)  {}
