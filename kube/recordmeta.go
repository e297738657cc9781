package kube

import (
	"math"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// recordMeta is the metadata every cached record keeps (packedVM,
// packedVMI, packedClaim, packedDataVolume): an ObjectMeta is 232 bytes,
// of which the informers, the overlay of our writes and the API read the
// names, UID, version, generation, creation time and owners. Those are
// kept compact: the namespace shared, the UID as its 16 bytes (uuid), the
// generation and creation time in 32 bits each (createdOf), the one owner
// most objects have packed (ownerRef); what objects seldom have (a deletion time, a
// generateName, finalizers, a UID not in kube-apiserver's form, other
// owners …) goes behind one pointer. The labels and annotations are the
// record's own: each kind reads them its own way. With those, a record is
// a metav1.Object, as client-go's stores and the mutation cache want.
type recordMeta struct {
	// Name and Namespace are the object's (Namespace shared among the
	// records: internString).
	Name, Namespace string
	version         string // resourceVersion
	uid             uuid   // zero when more has it, or there is none
	// generation is the object's, when it fits (else more has it).
	generation int32
	// created is the creationTimestamp's Unix seconds, 0 for none (else
	// more has it: a time before 1970 or after 2106).
	created uint32
	// owner is the object's one owner reference, packed; nil when it has
	// none or more has them.
	owner *ownerRef
	more  *rareMeta // the rare fields, nil when none is set
}

// rareMeta are the metadata fields a cached object seldom has, or has in
// a form recordMeta does not pack.
type rareMeta struct {
	// uid is a UID not in kube-apiserver's form (parseUUID).
	uid types.UID
	// owners are owner references other than one packable one (several,
	// an empty non-nil list, a UID not in kube-apiserver's form).
	owners []metav1.OwnerReference
	// generation is one beyond recordMeta.generation's range.
	generation int64
	// createdSec is a creation time beyond recordMeta.created's range,
	// createdNsec its nanoseconds: kube-apiserver sends seconds, objects
	// made in tests may have more.
	createdSec, createdNsec    int64
	deleted                    *metav1.Time
	generateName, selfLink     string
	deletionGracePeriodSeconds *int64
	finalizers                 []string
	managedFields              []metav1.ManagedFieldsEntry
}

// recordMetaOf is m's record (without its labels and annotations).
func recordMetaOf(m *metav1.ObjectMeta) recordMeta {
	r := recordMeta{Name: m.Name, Namespace: internString(m.Namespace), version: m.ResourceVersion}
	r.SetGeneration(m.Generation)
	r.SetUID(m.UID)
	r.SetCreationTimestamp(m.CreationTimestamp)
	r.SetOwnerReferences(m.OwnerReferences)
	if m.DeletionTimestamp != nil || m.GenerateName != "" || m.SelfLink != "" || m.DeletionGracePeriodSeconds != nil ||
		m.Finalizers != nil || m.ManagedFields != nil {
		x := r.moreOrNew()
		x.deleted, x.generateName, x.selfLink = m.DeletionTimestamp, m.GenerateName, m.SelfLink
		x.deletionGracePeriodSeconds, x.finalizers, x.managedFields = m.DeletionGracePeriodSeconds, m.Finalizers, m.ManagedFields
	}
	return r
}

// objectMeta is r as an ObjectMeta with the labels and annotations given
// (sharing r's slices and pointers: read it, never modify it).
func (r *recordMeta) objectMeta(labels, annotations map[string]string) metav1.ObjectMeta {
	m := metav1.ObjectMeta{
		Name: r.Name, Namespace: r.Namespace, UID: r.GetUID(), ResourceVersion: r.version, Generation: r.GetGeneration(),
		CreationTimestamp: r.GetCreationTimestamp(), OwnerReferences: r.GetOwnerReferences(),
		Labels: labels, Annotations: annotations,
	}
	if x := r.more; x != nil {
		m.DeletionTimestamp, m.GenerateName, m.SelfLink = x.deleted, x.generateName, x.selfLink
		m.DeletionGracePeriodSeconds, m.Finalizers, m.ManagedFields = x.deletionGracePeriodSeconds, x.finalizers, x.managedFields
	}
	return m
}

// hasUID tells whether the object's UID is uid, without making its string.
func (r *recordMeta) hasUID(uid types.UID) bool {
	if have := r.seldom().uid; have != "" {
		return have == uid
	}
	u, ok := parseUUID(uid)
	return ok && u == r.uid
}

// deepCopy is a copy of r sharing nothing that a setter changes in place
// (more; the packed owner is replaced whole, never changed).
func (r *recordMeta) deepCopy() recordMeta {
	cp := *r
	if r.more != nil {
		x := *r.more
		if x.deleted != nil {
			t := *x.deleted
			x.deleted = &t
		}
		if x.owners != nil {
			x.owners = make([]metav1.OwnerReference, len(r.more.owners))
			for i := range r.more.owners {
				r.more.owners[i].DeepCopyInto(&x.owners[i])
			}
		}
		cp.more = &x
	}
	return cp
}

// moreOrNew is r.more, made if r has none.
func (r *recordMeta) moreOrNew() *rareMeta {
	if r.more == nil {
		r.more = &rareMeta{}
	}
	return r.more
}

// seldom is r.more to read, an empty one if r has none.
func (r *recordMeta) seldom() *rareMeta {
	if r.more == nil {
		return &noRareMeta
	}
	return r.more
}

// noRareMeta is what seldom reads of a record without rare fields (never
// written).
var noRareMeta rareMeta

// createdOf is t as recordMeta.created and rareMeta's createdSec and
// createdNsec: its Unix seconds when they fit 32 bits, else 0 and them
// apart, and its nanoseconds (0 for what kube-apiserver sends: its times
// are RFC 3339 in seconds). The zero time is 0 and 0; the Unix epoch
// itself would read back as the zero time (no object was made then).
func createdOf(t metav1.Time) (created uint32, sec, nsec int64) {
	if t.IsZero() {
		return 0, 0, 0
	}
	sec, nsec = t.Unix(), int64(t.Nanosecond())
	if sec > 0 && sec <= math.MaxUint32 {
		return uint32(sec), 0, nsec
	}
	return 0, sec, nsec
}

// metav1.Object. The record's own type gives the labels and annotations.

func (r *recordMeta) GetNamespace() string               { return r.Namespace }
func (r *recordMeta) SetNamespace(ns string)             { r.Namespace = internString(ns) }
func (r *recordMeta) GetName() string                    { return r.Name }
func (r *recordMeta) SetName(n string)                   { r.Name = n }
func (r *recordMeta) GetResourceVersion() string         { return r.version }
func (r *recordMeta) SetResourceVersion(v string)        { r.version = v }
func (r *recordMeta) GetDeletionTimestamp() *metav1.Time { return r.seldom().deleted }
func (r *recordMeta) SetDeletionTimestamp(t *metav1.Time) {
	if t != nil || r.more != nil {
		r.moreOrNew().deleted = t
	}
}

func (r *recordMeta) GetUID() types.UID {
	if uid := r.seldom().uid; uid != "" {
		return uid
	}
	return r.uid.uid()
}
func (r *recordMeta) SetUID(uid types.UID) {
	var ok bool
	if r.uid, ok = parseUUID(uid); !ok {
		r.moreOrNew().uid = uid
	} else if r.more != nil {
		r.more.uid = ""
	}
}

func (r *recordMeta) GetGeneration() int64 {
	if g := r.seldom().generation; g != 0 {
		return g
	}
	return int64(r.generation)
}
func (r *recordMeta) SetGeneration(g int64) {
	r.generation = int32(g)
	if int64(r.generation) == g {
		if r.more != nil {
			r.more.generation = 0
		}
		return
	}
	r.generation = 0
	r.moreOrNew().generation = g
}

// GetCreationTimestamp is the creation time in the local time zone, as
// metav1.Time's JSON decoding gives it.
func (r *recordMeta) GetCreationTimestamp() metav1.Time {
	x := r.seldom()
	sec := int64(r.created)
	if x.createdSec != 0 {
		sec = x.createdSec
	}
	if sec == 0 && x.createdNsec == 0 {
		return metav1.Time{}
	}
	return metav1.NewTime(time.Unix(sec, x.createdNsec))
}
func (r *recordMeta) SetCreationTimestamp(t metav1.Time) {
	var sec, nsec int64
	r.created, sec, nsec = createdOf(t)
	if sec != 0 || nsec != 0 || r.more != nil {
		x := r.moreOrNew()
		x.createdSec, x.createdNsec = sec, nsec
	}
}

func (r *recordMeta) GetOwnerReferences() []metav1.OwnerReference {
	if owners := r.seldom().owners; owners != nil {
		return owners
	}
	if r.owner == nil {
		return nil
	}
	return []metav1.OwnerReference{r.owner.reference()}
}
func (r *recordMeta) SetOwnerReferences(refs []metav1.OwnerReference) {
	r.owner = nil
	if r.more != nil {
		r.more.owners = nil
	}
	if refs == nil {
		return
	}
	if len(refs) == 1 {
		if o, ok := packOwner(refs[0], r.Name); ok {
			r.owner = &o
			return
		}
	}
	r.moreOrNew().owners = refs
}

func (r *recordMeta) GetGenerateName() string { return r.seldom().generateName }
func (r *recordMeta) SetGenerateName(n string) {
	if n != "" || r.more != nil {
		r.moreOrNew().generateName = n
	}
}
func (r *recordMeta) GetSelfLink() string { return r.seldom().selfLink }
func (r *recordMeta) SetSelfLink(l string) {
	if l != "" || r.more != nil {
		r.moreOrNew().selfLink = l
	}
}
func (r *recordMeta) GetDeletionGracePeriodSeconds() *int64 {
	return r.seldom().deletionGracePeriodSeconds
}
func (r *recordMeta) SetDeletionGracePeriodSeconds(s *int64) {
	if s != nil || r.more != nil {
		r.moreOrNew().deletionGracePeriodSeconds = s
	}
}
func (r *recordMeta) GetFinalizers() []string { return r.seldom().finalizers }
func (r *recordMeta) SetFinalizers(f []string) {
	if f != nil || r.more != nil {
		r.moreOrNew().finalizers = f
	}
}
func (r *recordMeta) GetManagedFields() []metav1.ManagedFieldsEntry {
	return r.seldom().managedFields
}
func (r *recordMeta) SetManagedFields(f []metav1.ManagedFieldsEntry) {
	if f != nil || r.more != nil {
		r.moreOrNew().managedFields = f
	}
}
