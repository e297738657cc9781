package translate

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"

	kubevirtv1 "kubevirt.io/api/core/v1"
)

// snapNameRE is PVE's pve-configid format for snapshot names.
var snapNameRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_\-]{1,39}$`)

// ValidSnapName checks a PVE snapshot name; "current" is reserved.
func ValidSnapName(s string) error {
	if !snapNameRE.MatchString(s) {
		return fmt.Errorf("invalid format - invalid configuration ID '%s'", s)
	}
	if s == "current" || s == "vzdump" {
		return fmt.Errorf("invalid snapshot name '%s'", s)
	}
	return nil
}

// SnapshotObjectName derives the VirtualMachineSnapshot name for a PVE
// snapshot: lower-case safe, unique per VM and case-sensitive name (PVE
// names are case-sensitive, Kubernetes names are not).
func SnapshotObjectName(vmid int, snapname string) string {
	sum := sha256.Sum256([]byte(snapname))
	return fmt.Sprintf("vm-%d-%s-%s", vmid, ISOClaimName(snapname), hex.EncodeToString(sum[:])[:8])
}

// SnapshotDisk is a disk whose data a PVE snapshot holds: a PVC or
// DataVolume volume of a disk that is not a CD-ROM (qemu-server's
// has_feature skips CD-ROMs, whose images snapshots leave alone).
type SnapshotDisk struct {
	Volume string // the volume's (and disk's) name, e.g. scsi0
	Claim  string // the PVC (or DataVolume) holding the data
}

// SnapshotDisks lists vm's disks whose data a snapshot must hold, in
// volume order.
func SnapshotDisks(vm *kubevirtv1.VirtualMachine) []SnapshotDisk {
	if vm == nil || vm.Spec.Template == nil {
		return nil
	}
	cdrom := map[string]bool{}
	for _, d := range vm.Spec.Template.Spec.Domain.Devices.Disks {
		cdrom[d.Name] = d.CDRom != nil
	}
	var out []SnapshotDisk
	for _, v := range vm.Spec.Template.Spec.Volumes {
		if cdrom[v.Name] {
			continue
		}
		claim := ""
		switch {
		case v.DataVolume != nil:
			claim = v.DataVolume.Name
		case v.PersistentVolumeClaim != nil:
			claim = v.PersistentVolumeClaim.ClaimName
		}
		if claim != "" {
			out = append(out, SnapshotDisk{Volume: v.Name, Claim: claim})
		}
	}
	return out
}
