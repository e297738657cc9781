package kube

import (
	"testing"
	"time"
	"unsafe"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestRecordMetaRoundTrips: what recordMetaOf keeps reads back as the
// metadata it was given (but the labels and annotations, the record's
// own), in the compact form for what kube-apiserver sends and behind the
// rare part for the rest: UIDs not in its form, sub-second times or ones
// beyond 32 bits of seconds, huge generations, several owners, deletion.
func TestRecordMetaRoundTrips(t *testing.T) {
	yes, no := true, false
	grace := int64(30)
	created := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	deleted := metav1.NewTime(time.Date(2026, 1, 2, 4, 4, 5, 123456789, time.UTC))
	owner := metav1.OwnerReference{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: "web", UID: "5d0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b", Controller: &yes, BlockOwnerDeletion: &no}
	other := metav1.OwnerReference{APIVersion: "cdi.kubevirt.io/v1beta1", Kind: "DataVolume", Name: "web-disk-0", UID: "6d0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b"}
	for _, tc := range []struct {
		name string
		m    metav1.ObjectMeta
		rare bool
	}{
		{"apiserver's", metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "0b6f1f5e-0001-4f8e-9a2b-000000000001", ResourceVersion: "4001",
			Generation: 3, CreationTimestamp: created, OwnerReferences: []metav1.OwnerReference{owner}}, false},
		{"empty", metav1.ObjectMeta{}, false},
		{"not a UUID", metav1.ObjectMeta{Name: "web", UID: "bulk-vmi-00001", CreationTimestamp: created}, true},
		{"upper-case UUID", metav1.ObjectMeta{Name: "web", UID: "5D0C1A2B-3C4D-4E5F-8A9B-0C1D2E3F4A5B"}, true},
		{"sub-second creation", metav1.ObjectMeta{Name: "web", CreationTimestamp: metav1.NewTime(created.Add(1500 * time.Millisecond))}, true},
		{"created before 1970", metav1.ObjectMeta{Name: "web", CreationTimestamp: metav1.NewTime(time.Date(1969, 7, 20, 20, 17, 0, 0, time.UTC))}, true},
		{"created after 2106", metav1.ObjectMeta{Name: "web", CreationTimestamp: metav1.NewTime(time.Date(2107, 1, 1, 0, 0, 0, 0, time.UTC))}, true},
		{"generation beyond 32 bits", metav1.ObjectMeta{Name: "web", Generation: 1 << 40}, true},
		{"negative generation", metav1.ObjectMeta{Name: "web", Generation: -1}, false},
		{"owners", metav1.ObjectMeta{Name: "web", OwnerReferences: []metav1.OwnerReference{owner, other}}, true},
		{"owner UID not a UUID", metav1.ObjectMeta{Name: "web", OwnerReferences: []metav1.OwnerReference{{Kind: "VirtualMachine", Name: "web", UID: "x"}}}, true},
		{"no owners", metav1.ObjectMeta{Name: "web", OwnerReferences: []metav1.OwnerReference{}}, true},
		{"deleted", metav1.ObjectMeta{Name: "web", DeletionTimestamp: &deleted, DeletionGracePeriodSeconds: &grace,
			GenerateName: "we", Finalizers: []string{"f"}}, true},
	} {
		r := recordMetaOf(tc.m.DeepCopy())
		if got := r.objectMeta(nil, nil); !equality.Semantic.DeepEqual(got, tc.m) {
			t.Errorf("%s: reads back as\n%+v\nwant\n%+v", tc.name, got, tc.m)
		}
		if (r.more != nil) != tc.rare {
			t.Errorf("%s: rare part %+v, want one: %v", tc.name, r.more, tc.rare)
		}
		if !r.hasUID(tc.m.UID) || (tc.m.UID != "" && r.hasUID("")) || r.hasUID("0b6f1f5e-0001-4f8e-9a2b-000000000002") {
			t.Errorf("%s: hasUID does not tell its UID %q", tc.name, tc.m.UID)
		}
		cp := r.deepCopy()
		cp.SetOwnerReferences(nil)
		cp.SetDeletionTimestamp(nil)
		if got := r.objectMeta(nil, nil); !equality.Semantic.DeepEqual(got, tc.m) {
			t.Errorf("%s: a copy's setters change the record", tc.name)
		}
	}
}

// TestRecordMetaSize: the metadata of every cached record is at most 88
// bytes (an ObjectMeta is 232), and every record is a metav1.Object.
func TestRecordMetaSize(t *testing.T) {
	for _, s := range []struct {
		name      string
		got, want uintptr
	}{
		{"recordMeta", unsafe.Sizeof(recordMeta{}), 88},
		{"ownerRef", unsafe.Sizeof(ownerRef{}), 48},
	} {
		if s.got > s.want {
			t.Errorf("%s is %d bytes, want at most %d", s.name, s.got, s.want)
		}
	}
	var _ metav1.Object = &packedVM{}
	var _ metav1.Object = &packedVMI{}
	var _ metav1.Object = &packedClaim{}
	var _ metav1.Object = &packedDataVolume{}
}
