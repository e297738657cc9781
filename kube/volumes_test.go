package kube

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// A create or clone task ends once the VM's DataVolumes are filled or wait
// for the VM: not while CDI still imports, clones or populates them (a
// clone of a disk CDI has not filled yet fails: "source/target size info
// missing").
func TestDataVolumeSettled(t *testing.T) {
	bound := func(s corev1.ConditionStatus) []cdiv1.DataVolumeCondition {
		return []cdiv1.DataVolumeCondition{{Type: cdiv1.DataVolumeBound, Status: s}}
	}
	for _, tc := range []struct {
		phase cdiv1.DataVolumePhase
		conds []cdiv1.DataVolumeCondition
		want  bool
	}{
		{phase: cdiv1.Succeeded, want: true},
		{phase: cdiv1.PendingPopulation, want: true},
		{phase: cdiv1.WaitForFirstConsumer, conds: bound(corev1.ConditionFalse), want: true},
		{phase: cdiv1.WaitForFirstConsumer, conds: bound(corev1.ConditionTrue), want: false},
		{phase: cdiv1.PhaseUnset, want: false},
		{phase: cdiv1.Pending, want: false},
		{phase: cdiv1.ImportScheduled, want: false},
		{phase: cdiv1.ImportInProgress, want: false},
		{phase: cdiv1.CloneScheduled, want: false},
		{phase: cdiv1.CSICloneInProgress, want: false},
		{phase: cdiv1.PrepClaimInProgress, want: false},
		{phase: cdiv1.RebindInProgress, want: false},
		{phase: cdiv1.Failed, want: false},
	} {
		dv := &cdiv1.DataVolume{Status: cdiv1.DataVolumeStatus{Phase: tc.phase, Conditions: tc.conds}}
		if got := dataVolumeSettled(dv); got != tc.want {
			t.Errorf("phase %q conditions %v: settled %v, want %v", tc.phase, tc.conds, got, tc.want)
		}
	}
}
