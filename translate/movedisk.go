package translate

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	kubevirtv1 "kubevirt.io/api/core/v1"
)

// Moving a disk to another storage (POST …/move_disk) is, on a stopped VM,
// a config change the drive plan already knows: the disk becomes a new
// volume on the target storage cloned from its old claim (import-from, a
// CDI clone into the target StorageClass), and the old claim, no longer
// used, becomes unusedN as PVE keeps it. Deleting the source waits for the
// copy (DropUnusedClaim, once the new volume is ready).

// moveDiskKeyRE are the keys move_disk takes here: PVE's disk keys. The
// EFI variables and TPM state live in KubeVirt's own backend storage (its
// vmStateStorageClass), not in a claim of the VM that could be moved.
var moveDiskKeyRE = regexp.MustCompile(`^(ide|sata|scsi|virtio)\d+$`)

// MoveDisk describes a disk to move.
type MoveDisk struct {
	Key           string // the config key, scsi0
	Storage       string // the storage it is on now
	Volume        string // its PVE volume name (a template's base- name)
	Claim         string // the claim holding it
	TargetStorage string
}

// ErrCDROM is PVE's refusal to move a CD-ROM (cloud-init drives included).
var ErrCDROM = errors.New("you can't move a cdrom")

// PlanMoveDisk reads the disk key of a VM's config for a move to storage
// target, with PVE's refusals: a key that is not set, a CD-ROM, a disk
// without a volume, the same storage. format is PVE's target format; claims
// hold raw disks, so only a change of storage moves anything.
func PlanMoveDisk(cfg map[string]string, key, target, format string) (MoveDisk, error) {
	m := MoveDisk{Key: key, TargetStorage: target}
	v, ok := cfg[key]
	if !ok {
		return m, fmt.Errorf("disk '%s' does not exist", key)
	}
	d, err := parseDrive(v)
	if err != nil {
		return m, err
	}
	if d.opts["media"] == "cdrom" || ciVolRE.MatchString(d.file) || isoRE.MatchString(d.file) || d.file == "none" || d.file == "cdrom" {
		return m, ErrCDROM
	}
	st, name, found := strings.Cut(d.file, ":")
	if !found || st == "" || name == "" {
		return m, fmt.Errorf("disk '%s' has no associated volume", key)
	}
	m.Storage, m.Volume, m.Claim = st, name, ClaimOfVolume(name)
	if st == target && (format == "" || format == "raw") {
		return m, errors.New("you can't move to the same storage with same format")
	}
	return m, nil
}

// MovedValue is the disk's config value that makes the drive plan clone it
// onto the target storage: "<target>:0,import-from=<storage>:<claim>" with
// the drive's options (its size comes from the source).
func (m MoveDisk) MovedValue(cfg map[string]string) (string, error) {
	d, err := parseDrive(cfg[m.Key])
	if err != nil {
		return "", err
	}
	delete(d.opts, "size")
	delete(d.opts, "format")
	d.file = m.TargetStorage + ":0"
	d.set("import-from", m.Storage+":"+m.Claim)
	return d.String(), nil
}

// Movable tells whether key is a drive move_disk can move here.
func Movable(key string) bool { return moveDiskKeyRE.MatchString(key) }

// DropUnusedClaim removes from vm's config every unusedN naming claim (and
// the DataVolume template of that name): the source of a moved disk, once
// the copy is done and it is deleted. changed is false when there was none;
// inUse when a volume of the VM still uses the claim (re-attached
// meanwhile), which must then be kept.
func DropUnusedClaim(vm *kubevirtv1.VirtualMachine, claim string) (out *kubevirtv1.VirtualMachine, changed, inUse bool) {
	out = vm.DeepCopy()
	cfg := StoredConfig(out)
	for k, v := range cfg {
		if strings.HasPrefix(k, "unused") && unusedVolume(v) == claim {
			delete(cfg, k)
			changed = true
		}
	}
	if out.Spec.Template != nil {
		for i := range out.Spec.Template.Spec.Volumes {
			if n, _ := claimOfVolume(&out.Spec.Template.Spec.Volumes[i]); n == claim {
				return vm, false, true
			}
		}
	}
	if !changed {
		return vm, false, false
	}
	var kept []kubevirtv1.DataVolumeTemplateSpec
	for _, t := range out.Spec.DataVolumeTemplates {
		if t.Name != claim {
			kept = append(kept, t)
		}
	}
	out.Spec.DataVolumeTemplates = kept
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[AnnotationConfig] = EncodeConfig(cfg)
	return out, true, false
}
