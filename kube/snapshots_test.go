package kube

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	snapshotv1 "kubevirt.io/api/snapshot/v1beta1"
)

// snapVM is a VM with a data disk scsi0 (DataVolume vm-1-disk-0), an ISO
// CD-ROM ide2 (PVC iso) and a cloud-init drive, with KubeVirt's verdicts
// per volume.
func snapVM(statuses ...kubevirtv1.VolumeSnapshotStatus) *kubevirtv1.VirtualMachine {
	vm := &kubevirtv1.VirtualMachine{Spec: kubevirtv1.VirtualMachineSpec{Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
		Spec: kubevirtv1.VirtualMachineInstanceSpec{
			Domain: kubevirtv1.DomainSpec{Devices: kubevirtv1.Devices{Disks: []kubevirtv1.Disk{
				{Name: "scsi0", DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusSCSI}}},
				{Name: "ide2", DiskDevice: kubevirtv1.DiskDevice{CDRom: &kubevirtv1.CDRomTarget{Bus: kubevirtv1.DiskBusSATA}}},
				{Name: "cloudinit", DiskDevice: kubevirtv1.DiskDevice{CDRom: &kubevirtv1.CDRomTarget{Bus: kubevirtv1.DiskBusSATA}}},
			}}},
			Volumes: []kubevirtv1.Volume{
				{Name: "scsi0", VolumeSource: kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: "vm-1-disk-0"}}},
				{Name: "ide2", VolumeSource: kubevirtv1.VolumeSource{PersistentVolumeClaim: &kubevirtv1.PersistentVolumeClaimVolumeSource{
					PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: "iso", ReadOnly: true}}}},
				{Name: "cloudinit", VolumeSource: kubevirtv1.VolumeSource{CloudInitNoCloud: &kubevirtv1.CloudInitNoCloudSource{UserData: "#cloud-config"}}},
			},
		},
	}}}
	vm.Status.VolumeSnapshotStatuses = statuses
	return vm
}

func TestSnapshotBlocker(t *testing.T) {
	const noClass = "No VolumeSnapshotClass: Volume snapshots are not configured for this StorageClass [local-lvm] [scsi0]"
	isoNoClass := kubevirtv1.VolumeSnapshotStatus{Name: "ide2", Reason: "No VolumeSnapshotClass: Volume snapshots are not configured for this StorageClass [nfs-iso] [ide2]"}
	ciType := kubevirtv1.VolumeSnapshotStatus{Name: "cloudinit", Reason: "Snapshot is not supported for this volumeSource type [cloudinit]"}
	for _, c := range []struct {
		name string
		vm   *kubevirtv1.VirtualMachine
		want string // "" for no refusal
	}{
		{"all capable", snapVM(kubevirtv1.VolumeSnapshotStatus{Name: "scsi0", Enabled: true}, isoNoClass, ciType), ""},
		{"no verdict yet", snapVM(), ""},
		// A claim not created yet is a passing state; the task judges
		// what KubeVirt took.
		{"claim not yet there", snapVM(kubevirtv1.VolumeSnapshotStatus{Name: "scsi0", Reason: "PVC not found"}), ""},
		{"data disk without a class", snapVM(kubevirtv1.VolumeSnapshotStatus{Name: "scsi0", Reason: noClass}, isoNoClass, ciType),
			"snapshot feature is not available: disk scsi0 (vm-1-disk-0): " + noClass},
	} {
		err := snapshotBlocker(c.vm)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != "" && (err == nil || err.Error() != c.want || !errors.Is(err, ErrSnapshotUnavailable)):
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

func TestRollbackBlocker(t *testing.T) {
	snap := func(excluded ...string) *snapshotv1.VirtualMachineSnapshot {
		return &snapshotv1.VirtualMachineSnapshot{Status: &snapshotv1.VirtualMachineSnapshotStatus{
			SnapshotVolumes: &snapshotv1.SnapshotVolumesLists{IncludedVolumes: []string{"scsi0"}, ExcludedVolumes: excluded}}}
	}
	vm := snapVM()
	if err := rollbackBlocker(vm, snap("ide2", "cloudinit"), "s1"); err != nil {
		t.Errorf("CD-ROMs left out: %v", err)
	}
	if err := rollbackBlocker(vm, &snapshotv1.VirtualMachineSnapshot{}, "s1"); err != nil {
		t.Errorf("no status: %v", err)
	}
	err := rollbackBlocker(vm, snap("scsi0"), "s1")
	if err == nil || !errors.Is(err, ErrRollbackImpossible) || !strings.HasPrefix(err.Error(), "can't rollback, snapshot 's1' does not exist on 'vm-1-disk-0' (") {
		t.Errorf("data disk left out: %v", err)
	}
}
