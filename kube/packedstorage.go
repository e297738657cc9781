package kube

import (
	"encoding/hex"
	"fmt"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// Every VM disk is a DataVolume and its claim; as the typed objects
// stripStorage leaves, the pair cost some 2 KB per VM in the caches with
// their informer entries (ObjectMeta, specs and statuses, a map per label
// or annotation set, owner references, UIDs as 36-byte strings). The
// claim and DataVolume caches hold records instead: the metadata as
// compact fields (storageMeta), a claim's spec and status as the few
// fields stripStorage keeps of them, and a DataVolume's spec and status
// packed as the VM specs are (specCodec; a DataVolume that is done packs
// into some 16 bytes against its siblings). Lists and indexes read the
// records' fields; CachedPVC and DataVolume build typed objects from them
// (read-only, as every cached object).

// storageMeta is the metadata of a cached claim or DataVolume. It is a
// metav1.Object, as the informers, the mutation cache and put want.
type storageMeta struct {
	name      string
	namespace string // interned
	uid       uuid   // zero when rest has it
	version   string // resourceVersion
	created   metav1.Time
	deleted   *metav1.Time
	// pairs are the labels and annotations, nil for neither.
	pairs *metaPairs
	// owners is nil when rest has them.
	owners []ownerRef
	// rest holds what a claim or DataVolume seldom has (a generateName, a
	// generation, finalizers …, a UID or owner UID not in kube-apiserver's
	// form), nil for none.
	rest *metav1.ObjectMeta
}

// packMeta makes the record's metadata of m.
func packMeta(m *metav1.ObjectMeta) storageMeta {
	s := storageMeta{
		name: m.Name, namespace: internString(m.Namespace), version: m.ResourceVersion,
		created: m.CreationTimestamp, deleted: m.DeletionTimestamp,
	}
	if m.Labels != nil || m.Annotations != nil {
		s.pairs = &metaPairs{labels: packPairs(m.Labels), annotations: packPairs(m.Annotations)}
	}
	rest := metav1.ObjectMeta{
		GenerateName: m.GenerateName, SelfLink: m.SelfLink, Generation: m.Generation,
		DeletionGracePeriodSeconds: m.DeletionGracePeriodSeconds, Finalizers: m.Finalizers, ManagedFields: m.ManagedFields,
	}
	var ok bool
	if s.uid, ok = parseUUID(m.UID); !ok {
		rest.UID = m.UID
	}
	if s.owners, ok = packOwners(m.OwnerReferences, m.Name); !ok {
		rest.OwnerReferences = m.OwnerReferences
	}
	if !reflect.ValueOf(rest).IsZero() {
		s.rest = &rest
	}
	return s
}

// objectMeta builds the typed metadata (maps and slices of its own; the
// owner references' Controller and BlockOwnerDeletion point to shared
// bools: read them, never modify them).
func (s *storageMeta) objectMeta() metav1.ObjectMeta {
	m := metav1.ObjectMeta{
		Name: s.name, Namespace: s.namespace, UID: s.GetUID(), ResourceVersion: s.version,
		CreationTimestamp: s.created, DeletionTimestamp: s.deleted,
		Labels: s.GetLabels(), Annotations: s.GetAnnotations(), OwnerReferences: s.GetOwnerReferences(),
	}
	if r := s.rest; r != nil {
		m.GenerateName, m.SelfLink, m.Generation = r.GenerateName, r.SelfLink, r.Generation
		m.DeletionGracePeriodSeconds, m.Finalizers, m.ManagedFields = r.DeletionGracePeriodSeconds, r.Finalizers, r.ManagedFields
	}
	return m
}

// hasUID tells whether the object's UID is uid, without making its string.
func (s *storageMeta) hasUID(uid types.UID) bool {
	if s.rest != nil && s.rest.UID != "" {
		return s.rest.UID == uid
	}
	u, _ := parseUUID(uid)
	return u == s.uid && (u != uuid{} || uid == "")
}

// annotation is the value of the annotation key, "" if none.
func (s *storageMeta) annotation(key string) string {
	if s.pairs == nil {
		return ""
	}
	v, _ := s.pairs.annotations.get(key)
	return v
}

// hasAnnotations tells whether the record has annotations at all.
func (s *storageMeta) hasAnnotations() bool { return s.pairs != nil && len(s.pairs.annotations) > 0 }

// metaPairs are the labels and annotations of an object, as packPairs
// makes them: key, value, … by key (shared by equal sets; nil for none,
// empty for an empty map).
type metaPairs struct{ labels, annotations pairs }

// ensureRest is rest, made when there is none.
func (s *storageMeta) ensureRest() *metav1.ObjectMeta {
	if s.rest == nil {
		s.rest = &metav1.ObjectMeta{}
	}
	return s.rest
}

// The metav1.Object methods. Setters replace a field of the record (the
// cache never calls them on a stored record).

func (s *storageMeta) GetNamespace() string   { return s.namespace }
func (s *storageMeta) SetNamespace(ns string) { s.namespace = internString(ns) }
func (s *storageMeta) GetName() string        { return s.name }
func (s *storageMeta) SetName(name string)    { s.name = name }
func (s *storageMeta) GetUID() types.UID {
	if s.rest != nil && s.rest.UID != "" {
		return s.rest.UID
	}
	return s.uid.uid()
}
func (s *storageMeta) SetUID(uid types.UID) {
	var ok bool
	if s.uid, ok = parseUUID(uid); !ok {
		s.ensureRest().UID = uid
	} else if s.rest != nil {
		s.rest.UID = ""
	}
}
func (s *storageMeta) GetResourceVersion() string          { return s.version }
func (s *storageMeta) SetResourceVersion(v string)         { s.version = v }
func (s *storageMeta) GetCreationTimestamp() metav1.Time   { return s.created }
func (s *storageMeta) SetCreationTimestamp(t metav1.Time)  { s.created = t }
func (s *storageMeta) GetDeletionTimestamp() *metav1.Time  { return s.deleted }
func (s *storageMeta) SetDeletionTimestamp(t *metav1.Time) { s.deleted = t }
func (s *storageMeta) GetLabels() map[string]string {
	if s.pairs == nil {
		return nil
	}
	return s.pairs.labels.toMap()
}
func (s *storageMeta) GetAnnotations() map[string]string {
	if s.pairs == nil {
		return nil
	}
	return s.pairs.annotations.toMap()
}
func (s *storageMeta) SetLabels(m map[string]string) {
	s.setPairs(packPairs(m), nil, true)
}
func (s *storageMeta) SetAnnotations(m map[string]string) {
	s.setPairs(nil, packPairs(m), false)
}

// setPairs replaces the labels (isLabels) or the annotations.
func (s *storageMeta) setPairs(labels, annotations pairs, isLabels bool) {
	var cp metaPairs
	if s.pairs != nil {
		cp = *s.pairs
	}
	if isLabels {
		cp.labels = labels
	} else {
		cp.annotations = annotations
	}
	s.pairs = nil
	if cp.labels != nil || cp.annotations != nil {
		s.pairs = &cp
	}
}

func (s *storageMeta) GetOwnerReferences() []metav1.OwnerReference {
	if s.rest != nil && s.rest.OwnerReferences != nil {
		return s.rest.OwnerReferences
	}
	return unpackOwners(s.owners)
}
func (s *storageMeta) SetOwnerReferences(r []metav1.OwnerReference) {
	var ok bool
	if s.owners, ok = packOwners(r, s.name); !ok {
		s.ensureRest().OwnerReferences = r
	} else if s.rest != nil {
		s.rest.OwnerReferences = nil
	}
}

func (s *storageMeta) GetGenerateName() string {
	if s.rest == nil {
		return ""
	}
	return s.rest.GenerateName
}
func (s *storageMeta) SetGenerateName(n string) { s.ensureRest().GenerateName = n }
func (s *storageMeta) GetGeneration() int64 {
	if s.rest == nil {
		return 0
	}
	return s.rest.Generation
}
func (s *storageMeta) SetGeneration(g int64) { s.ensureRest().Generation = g }
func (s *storageMeta) GetSelfLink() string {
	if s.rest == nil {
		return ""
	}
	return s.rest.SelfLink
}
func (s *storageMeta) SetSelfLink(l string) { s.ensureRest().SelfLink = l }
func (s *storageMeta) GetDeletionGracePeriodSeconds() *int64 {
	if s.rest == nil {
		return nil
	}
	return s.rest.DeletionGracePeriodSeconds
}
func (s *storageMeta) SetDeletionGracePeriodSeconds(v *int64) {
	s.ensureRest().DeletionGracePeriodSeconds = v
}
func (s *storageMeta) GetFinalizers() []string {
	if s.rest == nil {
		return nil
	}
	return s.rest.Finalizers
}
func (s *storageMeta) SetFinalizers(f []string) { s.ensureRest().Finalizers = f }
func (s *storageMeta) GetManagedFields() []metav1.ManagedFieldsEntry {
	if s.rest == nil {
		return nil
	}
	return s.rest.ManagedFields
}
func (s *storageMeta) SetManagedFields(f []metav1.ManagedFieldsEntry) {
	s.ensureRest().ManagedFields = f
}

// deepCopy copies what a setter may replace in place (rest; the slices
// are replaced whole, never changed).
func (s *storageMeta) deepCopy() storageMeta {
	cp := *s
	if s.rest != nil {
		cp.rest = s.rest.DeepCopy()
	}
	return cp
}

// packedClaim is what the claim cache holds: the metadata, and of the
// spec and status what stripStorage keeps, their slices, pointers and maps
// shared by equal ones.
type packedClaim struct {
	storageMeta
	accessModes *[]corev1.PersistentVolumeAccessMode
	requests    corev1.ResourceList
	class       *string
	volumeMode  *corev1.PersistentVolumeMode
	phase       corev1.PersistentVolumeClaimPhase
	capacity    corev1.ResourceList
	rare        *claimRare // nil for none
}

// claimRare is what claims seldom set.
type claimRare struct {
	limits          corev1.ResourceList
	attributesClass *string
}

// GetObjectKind is for client-go's interfaces; the cache never asks.
func (p *packedClaim) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject keeps a record a record.
func (p *packedClaim) DeepCopyObject() runtime.Object {
	cp := *p
	cp.storageMeta = p.deepCopy()
	return &cp
}

// packClaim makes the record of a (stripped) claim.
func packClaim(pvc *corev1.PersistentVolumeClaim) *packedClaim {
	s := &pvc.Spec
	p := &packedClaim{
		storageMeta: packMeta(&pvc.ObjectMeta),
		accessModes: internAccessModes(s.AccessModes),
		requests:    internQuantities(s.Resources.Requests),
		class:       internStringPtr(s.StorageClassName), volumeMode: internVolumeMode(s.VolumeMode),
		phase:    corev1.PersistentVolumeClaimPhase(internString(string(pvc.Status.Phase))),
		capacity: internQuantities(pvc.Status.Capacity),
	}
	if s.Resources.Limits != nil || s.VolumeAttributesClassName != nil {
		p.rare = &claimRare{limits: internQuantities(s.Resources.Limits), attributesClass: s.VolumeAttributesClassName}
	}
	return p
}

// claim builds the typed claim (sharing the record's slices, pointers and
// maps: read it, never modify it), nil for a nil p.
func (p *packedClaim) claim() *corev1.PersistentVolumeClaim {
	if p == nil {
		return nil
	}
	pvc := &corev1.PersistentVolumeClaim{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		ObjectMeta: p.objectMeta(),
		Spec: corev1.PersistentVolumeClaimSpec{
			Resources:        corev1.VolumeResourceRequirements{Requests: p.requests},
			StorageClassName: p.class, VolumeMode: p.volumeMode,
		},
		Status: corev1.PersistentVolumeClaimStatus{Phase: p.phase, Capacity: p.capacity},
	}
	if p.accessModes != nil {
		pvc.Spec.AccessModes = *p.accessModes
	}
	if r := p.rare; r != nil {
		pvc.Spec.Resources.Limits, pvc.Spec.VolumeAttributesClassName = r.limits, r.attributesClass
	}
	return pvc
}

// bytes is the claim's size as translate.ClaimInfoOf counts it: its
// capacity, else its request.
func (p *packedClaim) bytes() int64 {
	if q, ok := p.capacity[corev1.ResourceStorage]; ok {
		return q.Value()
	}
	q := p.requests[corev1.ResourceStorage]
	return q.Value()
}

// packingClaims is the claim cache's transform: stripStorage, then the
// record.
func packingClaims(obj any) (any, error) {
	if p, ok := obj.(*packedClaim); ok {
		return p, nil
	}
	o, err := stripStorage(obj)
	if err != nil {
		return nil, err
	}
	pvc, ok := o.(*corev1.PersistentVolumeClaim)
	if !ok {
		return o, nil
	}
	return packClaim(pvc), nil
}

// packedDataVolume is what the DataVolume cache holds: the metadata and
// phase (what claim listings and task routing read of every DataVolume),
// and the spec and status packed: a DataVolume that is done repeats its
// siblings' conditions and storage but for its name.
type packedDataVolume struct {
	storageMeta
	phase cdiv1.DataVolumePhase
	blob  []byte // dataVolumeBody
	codec *specCodec
}

// dataVolumeBody is what packedDataVolume packs.
type dataVolumeBody struct {
	Spec   cdiv1.DataVolumeSpec   `json:"spec"`
	Status cdiv1.DataVolumeStatus `json:"status"`
}

// GetObjectKind is for client-go's interfaces; the cache never asks.
func (p *packedDataVolume) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject keeps a record a record.
func (p *packedDataVolume) DeepCopyObject() runtime.Object {
	cp := *p
	cp.storageMeta = p.deepCopy()
	return &cp
}

func packDataVolume(c *specCodec, dv *cdiv1.DataVolume) (*packedDataVolume, error) {
	body := dataVolumeBody{Spec: dv.Spec, Status: dv.Status}
	body.Status.Phase = ""
	blob, err := c.pack(&body)
	if err != nil {
		return nil, err
	}
	return &packedDataVolume{
		storageMeta: packMeta(&dv.ObjectMeta),
		phase:       cdiv1.DataVolumePhase(internString(string(dv.Status.Phase))),
		blob:        blob, codec: c,
	}, nil
}

// dataVolume decodes the whole DataVolume (read it, never modify it), nil
// for a nil p.
func (p *packedDataVolume) dataVolume() *cdiv1.DataVolume {
	if p == nil {
		return nil
	}
	var body dataVolumeBody
	if err := p.codec.unpack(p.blob, &body); err != nil {
		// Only memory corruption gets here: what pack encoded decodes.
		panic(fmt.Sprintf("kube: cached DataVolume %s/%s does not decode: %v", p.namespace, p.name, err))
	}
	body.Status.Phase = p.phase
	return &cdiv1.DataVolume{
		TypeMeta:   metav1.TypeMeta{APIVersion: CDIGroupVersion, Kind: "DataVolume"},
		ObjectMeta: p.objectMeta(), Spec: body.Spec, Status: body.Status,
	}
}

// packingDataVolumes is the DataVolume cache's transform: stripStorage,
// then the record.
func packingDataVolumes(c *specCodec) func(any) (any, error) {
	return func(obj any) (any, error) {
		if p, ok := obj.(*packedDataVolume); ok {
			return p, nil
		}
		o, err := stripStorage(obj)
		if err != nil {
			return nil, err
		}
		dv, ok := o.(*cdiv1.DataVolume)
		if !ok {
			return o, nil
		}
		return packDataVolume(c, dv)
	}
}

// cachedClaim is the record of the claim ns/name, or nil.
func (c *Cluster) cachedClaim(ns, name string) *packedClaim {
	p, _ := c.pvcs.get(ns, name).(*packedClaim)
	return p
}

// cachedDataVolume is the record of the DataVolume ns/name, or nil (also
// on a cluster without CDI).
func (c *Cluster) cachedDataVolume(ns, name string) *packedDataVolume {
	if c.dataVolumes == nil {
		return nil
	}
	p, _ := c.dataVolumes.get(ns, name).(*packedDataVolume)
	return p
}

// The records' small parts shared by equal ones, in tables bounded as
// intern.go's (internAs).
var internedStorage = struct {
	strs   map[string]string
	ptrs   map[string]*string
	modes  map[string]*corev1.PersistentVolumeMode
	access map[string]*[]corev1.PersistentVolumeAccessMode
	owners map[string]*ownerKind
	pairs  map[string]pairs
	bools  [2]*bool
}{
	strs: map[string]string{}, ptrs: map[string]*string{}, modes: map[string]*corev1.PersistentVolumeMode{},
	access: map[string]*[]corev1.PersistentVolumeAccessMode{}, pairs: map[string]pairs{},
	owners: map[string]*ownerKind{},
	bools:  [2]*bool{new(bool), func() *bool { t := true; return &t }()},
}

// internString returns a string equal to s, shared.
func internString(s string) string {
	if s == "" {
		return ""
	}
	return internAs(internedStorage.strs, s, s)
}

// internStringPtr returns a pointer to a string equal to *p, shared.
func internStringPtr(p *string) *string {
	if p == nil {
		return nil
	}
	v := *p
	return internAs(internedStorage.ptrs, v, &v)
}

// internVolumeMode is internStringPtr of a volume mode.
func internVolumeMode(p *corev1.PersistentVolumeMode) *corev1.PersistentVolumeMode {
	if p == nil {
		return nil
	}
	v := *p
	return internAs(internedStorage.modes, string(v), &v)
}

// internAccessModes returns a pointer to a slice equal to m, shared (nil
// for nil).
func internAccessModes(m []corev1.PersistentVolumeAccessMode) *[]corev1.PersistentVolumeAccessMode {
	if m == nil {
		return nil
	}
	var b strings.Builder
	for _, a := range m {
		b.WriteString(string(a))
		b.WriteByte(0)
	}
	cp := slices.Clone(m)
	return internAs(internedStorage.access, b.String(), &cp)
}

// packPairs is a label or annotation map as pairs, shared by equal maps
// (the keys too).
func packPairs(m map[string]string) pairs {
	p := pairsOf(m)
	if len(p) == 0 {
		return p
	}
	for i := 0; i < len(p); i += 2 {
		p[i] = internString(p[i])
	}
	return internAs(internedStorage.pairs, strings.Join(p, "\x00"), p)
}

// ownerRef is an owner reference with its UID as bytes, its API version
// and kind shared, its flags as bits (ownerController …), and its name,
// when it is the object's own (a DataVolume's claim), sharing that string.
type ownerRef struct {
	name  string
	uid   uuid
	kind  *ownerKind
	flags uint8
}

// ownerKind is the API version and kind of an owner, shared.
type ownerKind struct{ apiVersion, kind string }

// The bits of ownerRef.flags: whether Controller and BlockOwnerDeletion
// are set, and to true.
const (
	ownerController uint8 = 1 << iota
	ownerControllerTrue
	ownerBlock
	ownerBlockTrue
)

// boolBits are the flag bits of b: set, set and true.
func boolBits(b *bool, set, isTrue uint8) uint8 {
	switch {
	case b == nil:
		return 0
	case *b:
		return set | isTrue
	}
	return set
}

// bitsBool is the shared *bool of boolBits' bits.
func bitsBool(flags, set, isTrue uint8) *bool {
	if flags&set == 0 {
		return nil
	}
	return internedStorage.bools[min(1, int(flags&isTrue))]
}

// packOwners is refs as ownerRefs, false when a UID is not in
// kube-apiserver's form (or refs is empty but not nil).
func packOwners(refs []metav1.OwnerReference, name string) ([]ownerRef, bool) {
	if refs == nil {
		return nil, true
	}
	if len(refs) == 0 {
		return nil, false
	}
	out := make([]ownerRef, len(refs))
	for i, r := range refs {
		uid, ok := parseUUID(r.UID)
		if !ok {
			return nil, false
		}
		if r.Name == name {
			r.Name = name
		}
		kind := internAs(internedStorage.owners, r.APIVersion+"\x00"+r.Kind, &ownerKind{apiVersion: r.APIVersion, kind: r.Kind})
		out[i] = ownerRef{
			name: r.Name, uid: uid, kind: kind,
			flags: boolBits(r.Controller, ownerController, ownerControllerTrue) | boolBits(r.BlockOwnerDeletion, ownerBlock, ownerBlockTrue),
		}
	}
	return out, true
}

// unpackOwners is the owner references of packOwners' ownerRefs.
func unpackOwners(refs []ownerRef) []metav1.OwnerReference {
	if refs == nil {
		return nil
	}
	out := make([]metav1.OwnerReference, len(refs))
	for i, r := range refs {
		out[i] = metav1.OwnerReference{
			APIVersion: r.kind.apiVersion, Kind: r.kind.kind, Name: r.name, UID: r.uid.uid(),
			Controller:         bitsBool(r.flags, ownerController, ownerControllerTrue),
			BlockOwnerDeletion: bitsBool(r.flags, ownerBlock, ownerBlockTrue),
		}
	}
	return out
}

// uuid is a UID in the form kube-apiserver gives (a UUID in lowercase
// hex, 36 characters) as its 16 bytes: a third of the string's cost.
// The zero uuid stands for no UID.
type uuid [16]byte

// parseUUID returns u's bytes, false when u is not in that form (so that
// uid gives back the same string) or is all zeros. An empty u is the
// zero uuid.
func parseUUID(u types.UID) (uuid, bool) {
	var out uuid
	if u == "" {
		return out, true
	}
	if len(u) != 36 {
		return out, false
	}
	j := 0
	for i := 0; i < 36; {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if u[i] != '-' {
				return uuid{}, false
			}
			i++
			continue
		}
		hi, ok1 := lowerHex(u[i])
		lo, ok2 := lowerHex(u[i+1])
		if !ok1 || !ok2 {
			return uuid{}, false
		}
		out[j] = hi<<4 | lo
		j++
		i += 2
	}
	return out, out != uuid{}
}

func lowerHex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// uid is the UID u stands for.
func (u uuid) uid() types.UID {
	if u == (uuid{}) {
		return ""
	}
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return types.UID(b[:])
}

// file is the content type of the file the claim holds (translate.FileOf),
// "" for none.
func (p *packedClaim) file() string {
	if !p.hasAnnotations() {
		return ""
	}
	content, _, _ := translate.FileOf(p.pairs.annotations.toMap())
	return content
}
