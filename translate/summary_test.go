package translate

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// SummarizeVM says what the rows' own readers (CPUTopology, MemoryBytes,
// the stored config, Provisioning) say of the whole VM.
func TestSummarizeVM(t *testing.T) {
	made := func(cfg map[string]string) *kubevirtv1.VirtualMachine {
		vm, errs := BuildVM(VMRequest{VMID: 100, Node: "pve", Namespace: "default", Config: cfg,
			StorageExists: func(string) bool { return true }, VolumeTaken: func(string) (bool, error) { return false, nil }})
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		return vm
	}
	outside := func(edit func(*kubevirtv1.VirtualMachine)) *kubevirtv1.VirtualMachine {
		vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "outside"}, Spec: kubevirtv1.VirtualMachineSpec{
			Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{}}}
		edit(vm)
		return vm
	}
	size := func(q string) kubevirtv1.DataVolumeTemplateSpec {
		dv := kubevirtv1.DataVolumeTemplateSpec{Spec: cdiv1.DataVolumeSpec{Storage: &cdiv1.StorageSpec{}}}
		if q != "" {
			dv.Spec.Storage.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(q)}
		}
		return dv
	}
	provisioning := made(map[string]string{"cores": "2", "memory": "1024", "scsi0": "local-lvm:8"})
	provisioning.Annotations[AnnotationLock] = LockClone
	provisioned := provisioning.DeepCopy()
	provisioned.Status.PrintableStatus = kubevirtv1.VirtualMachineStatusStopped
	tests := []struct {
		name string
		vm   *kubevirtv1.VirtualMachine
		want VMSummary
	}{
		{"made, tags and agent", made(map[string]string{"sockets": "2", "cores": "3", "memory": "2048", "tags": "db;prod", "agent": "1",
			"scsi0": "local-lvm:32"}), VMSummary{CPUs: 6, MaxMem: 2 << 30, MaxDisk: 32 << 30, Tags: "db;prod", Agent: true}},
		{"made, agent off", made(map[string]string{"memory": "512", "agent": "0"}), VMSummary{CPUs: 1, MaxMem: 512 << 20}},
		{"clone lock while provisioning", provisioning, VMSummary{CPUs: 2, MaxMem: 1 << 30, MaxDisk: 8 << 30, Lock: LockClone}},
		{"clone lock lifted once provisioned", provisioned, VMSummary{CPUs: 2, MaxMem: 1 << 30, MaxDisk: 8 << 30}},
		{"outside: agent channel, threads, requests, first sized disk", outside(func(vm *kubevirtv1.VirtualMachine) {
			d := &vm.Spec.Template.Spec.Domain
			d.CPU = &kubevirtv1.CPU{Cores: 2, Threads: 2}
			d.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("3Gi")}
			vm.Spec.DataVolumeTemplates = []kubevirtv1.DataVolumeTemplateSpec{size(""), size("20Gi"), size("40Gi")}
		}), VMSummary{CPUs: 4, MaxMem: 3 << 30, MaxDisk: 20 << 30, Agent: true}},
		{"outside: no template", &kubevirtv1.VirtualMachine{}, VMSummary{CPUs: 1, Agent: true}},
	}
	for _, tt := range tests {
		if got := SummarizeVM(tt.vm); got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func TestSummarizeInstance(t *testing.T) {
	since := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	running := &kubevirtv1.VirtualMachineInstance{Status: kubevirtv1.VirtualMachineInstanceStatus{
		Phase: kubevirtv1.Running, Machine: &kubevirtv1.Machine{Type: "pc-q35-rhel9.6.0"},
		PhaseTransitionTimestamps: []kubevirtv1.VirtualMachineInstancePhaseTransitionTimestamp{
			{Phase: kubevirtv1.Scheduled, PhaseTransitionTimestamp: metav1.NewTime(since.Add(-time.Minute))},
			{Phase: kubevirtv1.Running, PhaseTransitionTimestamp: metav1.NewTime(since)}}}}
	if got := SummarizeInstance(running); got.Machine != RunningMachine(running) || !got.Since.Equal(since) {
		t.Errorf("running: %+v", got)
	}
	scheduled := running.DeepCopy()
	scheduled.Status.Phase = kubevirtv1.Scheduled
	if got := SummarizeInstance(scheduled); !got.Since.IsZero() || got.Machine == "" {
		t.Errorf("scheduled: %+v", got)
	}
	if got := SummarizeInstance(nil); got != (InstanceSummary{}) {
		t.Errorf("none: %+v", got)
	}
}
