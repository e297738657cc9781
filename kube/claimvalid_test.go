package kube

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// CDI's ErrClaimNotValid ends a create or clone task only when someone
// must act; a StorageProfile CDI has not made yet is waited for, and said
// as what CDI retries (the messages are CDI's, pkg/controller/datavolume).
func TestClaimNotValidKinds(t *testing.T) {
	const missing = `cannot get StorageProfile: StorageProfile.cdi.kubevirt.io "ceph-rbd" not found`
	tests := []struct {
		name            string
		cond            cdiv1.DataVolumeCondition
		failed, retried string
	}{
		{"no access modes", cdiv1.DataVolumeCondition{Type: cdiv1.DataVolumeBound, Status: corev1.ConditionFalse,
			Reason: cdiErrClaimNotValid, Message: "no accessMode specified in StorageProfile local-path"}, "no accessMode specified in StorageProfile local-path", ""},
		{"profile not made yet", cdiv1.DataVolumeCondition{Type: cdiv1.DataVolumeBound, Status: corev1.ConditionFalse,
			Reason: cdiErrClaimNotValid, Message: missing}, "", missing},
		{"profile not made yet, access modes asked", cdiv1.DataVolumeCondition{Type: cdiv1.DataVolumeBound, Status: corev1.ConditionUnknown,
			Reason: cdiErrClaimNotValid, Message: `no accessMode specified and cannot get StorageProfile ceph-rbd: StorageProfile.cdi.kubevirt.io "ceph-rbd" not found`},
			"", `no accessMode specified and cannot get StorageProfile ceph-rbd: StorageProfile.cdi.kubevirt.io "ceph-rbd" not found`},
		{"profile unreadable otherwise", cdiv1.DataVolumeCondition{Type: cdiv1.DataVolumeBound, Status: corev1.ConditionFalse,
			Reason: cdiErrClaimNotValid, Message: "cannot get StorageProfile: forbidden"}, "cannot get StorageProfile: forbidden", ""},
		{"resolved", cdiv1.DataVolumeCondition{Type: cdiv1.DataVolumeBound, Status: corev1.ConditionTrue,
			Reason: cdiErrClaimNotValid, Message: missing}, "", ""},
	}
	for _, tt := range tests {
		dv := &cdiv1.DataVolume{Status: cdiv1.DataVolumeStatus{Phase: cdiv1.Pending, Conditions: []cdiv1.DataVolumeCondition{tt.cond}}}
		if got := importFailure(dv); got != tt.failed {
			t.Errorf("%s: importFailure = %q, want %q", tt.name, got, tt.failed)
		}
		if got := importRetrying(dv); got != tt.retried {
			t.Errorf("%s: importRetrying = %q, want %q", tt.name, got, tt.retried)
		}
		if got := claimNotValidForGood(tt.cond); got != (tt.failed != "") {
			t.Errorf("%s: claimNotValidForGood = %v", tt.name, got)
		}
	}
}
