package kube

import (
	"encoding/hex"
	"fmt"
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
// compact fields (recordMeta, as every record's, and storageLabels), a
// claim's spec and status as the few fields stripStorage keeps of them,
// and a DataVolume's spec and status packed as the VM specs are
// (specCodec; a DataVolume that is done packs into some 16 bytes against
// its siblings). Lists and indexes read the
// records' fields; CachedPVC and DataVolume build typed objects from them
// (read-only, as every cached object).

// storageLabels are a claim's or DataVolume's labels and annotations,
// behind one pointer (most claims have a few of the plugin's, alike but
// for a vmid). With recordMeta they make a record a metav1.Object.
type storageLabels struct {
	pairs *metaPairs // nil for neither
}

// metaPairs are the labels and annotations of an object, as packPairs
// makes them: key, value, … by key (shared by equal sets; nil for none,
// empty for an empty map).
type metaPairs struct{ labels, annotations pairs }

// storageLabelsOf are m's labels and annotations.
func storageLabelsOf(m *metav1.ObjectMeta) storageLabels {
	if m.Labels == nil && m.Annotations == nil {
		return storageLabels{}
	}
	return storageLabels{&metaPairs{labels: packPairs(m.Labels), annotations: packPairs(m.Annotations)}}
}

// storageObjectMeta builds the typed metadata of a claim or DataVolume
// record (maps of its own; the owner references' Controller and
// BlockOwnerDeletion point to shared bools: read them, never modify them).
func storageObjectMeta(r *recordMeta, l *storageLabels) metav1.ObjectMeta {
	return r.objectMeta(l.GetLabels(), l.GetAnnotations())
}

// annotation is the value of the annotation key, "" if none.
func (l *storageLabels) annotation(key string) string {
	if l.pairs == nil {
		return ""
	}
	v, _ := l.pairs.annotations.get(key)
	return v
}

// hasAnnotations tells whether the record has annotations at all.
func (l *storageLabels) hasAnnotations() bool {
	return l.pairs != nil && len(l.pairs.annotations) > 0
}

// The labels and annotations of metav1.Object, as new maps. Setters
// replace a set whole (the cache never calls them on a stored record).

func (l *storageLabels) GetLabels() map[string]string {
	if l.pairs == nil {
		return nil
	}
	return l.pairs.labels.toMap()
}
func (l *storageLabels) GetAnnotations() map[string]string {
	if l.pairs == nil {
		return nil
	}
	return l.pairs.annotations.toMap()
}
func (l *storageLabels) SetLabels(m map[string]string) {
	l.setPairs(packPairs(m), nil, true)
}
func (l *storageLabels) SetAnnotations(m map[string]string) {
	l.setPairs(nil, packPairs(m), false)
}

// setPairs replaces the labels (isLabels) or the annotations.
func (l *storageLabels) setPairs(labels, annotations pairs, isLabels bool) {
	var cp metaPairs
	if l.pairs != nil {
		cp = *l.pairs
	}
	if isLabels {
		cp.labels = labels
	} else {
		cp.annotations = annotations
	}
	l.pairs = nil
	if cp.labels != nil || cp.annotations != nil {
		l.pairs = &cp
	}
}

// packedClaim is what the claim cache holds: the metadata, and of the
// spec and status what stripStorage keeps, their slices, pointers and maps
// shared by equal ones.
type packedClaim struct {
	recordMeta
	storageLabels
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
	cp.recordMeta = p.recordMeta.deepCopy()
	return &cp
}

// packClaim makes the record of a (stripped) claim.
func packClaim(pvc *corev1.PersistentVolumeClaim) *packedClaim {
	s := &pvc.Spec
	p := &packedClaim{
		recordMeta: recordMetaOf(&pvc.ObjectMeta), storageLabels: storageLabelsOf(&pvc.ObjectMeta),
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
		ObjectMeta: storageObjectMeta(&p.recordMeta, &p.storageLabels),
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
	recordMeta
	storageLabels
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
	cp.recordMeta = p.recordMeta.deepCopy()
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
		recordMeta: recordMetaOf(&dv.ObjectMeta), storageLabels: storageLabelsOf(&dv.ObjectMeta),
		phase: cdiv1.DataVolumePhase(internString(string(dv.Status.Phase))),
		blob:  blob, codec: c,
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
		panic(fmt.Sprintf("kube: cached DataVolume %s/%s does not decode: %v", p.Namespace, p.Name, err))
	}
	body.Status.Phase = p.phase
	return &cdiv1.DataVolume{
		TypeMeta:   metav1.TypeMeta{APIVersion: CDIGroupVersion, Kind: "DataVolume"},
		ObjectMeta: storageObjectMeta(&p.recordMeta, &p.storageLabels), Spec: body.Spec, Status: body.Status,
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

// packOwner is ref as an ownerRef, false when its UID is not in
// kube-apiserver's form. name is the object's own: an owner so named (a
// DataVolume's claim, a VM's instance) shares its string.
func packOwner(ref metav1.OwnerReference, name string) (ownerRef, bool) {
	uid, ok := parseUUID(ref.UID)
	if !ok || uid == (uuid{}) {
		return ownerRef{}, false
	}
	if ref.Name == name {
		ref.Name = name
	}
	kind := internAs(internedStorage.owners, ref.APIVersion+"\x00"+ref.Kind, &ownerKind{apiVersion: ref.APIVersion, kind: ref.Kind})
	return ownerRef{
		name: ref.Name, uid: uid, kind: kind,
		flags: boolBits(ref.Controller, ownerController, ownerControllerTrue) | boolBits(ref.BlockOwnerDeletion, ownerBlock, ownerBlockTrue),
	}, true
}

// reference is the owner reference packOwner packed.
func (r *ownerRef) reference() metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: r.kind.apiVersion, Kind: r.kind.kind, Name: r.name, UID: r.uid.uid(),
		Controller:         bitsBool(r.flags, ownerController, ownerControllerTrue),
		BlockOwnerDeletion: bitsBool(r.flags, ownerBlock, ownerBlockTrue),
	}
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
