package translate

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// ErrShrinkDisk refuses a resize to a smaller size. qemu-server dies on it,
// so the API answers it as PVE does: a 500, not a parameter error.
var ErrShrinkDisk = errors.New("shrinking disks is not supported")

// ErrNotResizable classifies a resize of a disk without a DataVolume
// template to grow; the error's text names the disk in PVE's words.
var ErrNotResizable = errors.New("not a resizable disk")

// DiskResize is a disk grown by ResizeDisk.
type DiskResize struct {
	// VM is a copy of the VM with the disk's DataVolume template grown
	// and the disk's size= in the stored config updated.
	VM *kubevirtv1.VirtualMachine
	// Claim is the disk's DataVolume (and claim) name.
	Claim string
	// StorageClass is the one the template asks for ("" when none), which
	// must allow volume expansion for a bound claim to grow.
	StorageClass string
	// From and To are the sizes in bytes; To is rounded up to whole MiB,
	// as the claim gets it.
	From, To int64
}

// ResizeDisk grows disk (a config key) of vm to bytes, or by bytes when
// delta is set (PVE's "+<size>"). Only a disk backed by one of the VM's
// DataVolume templates can grow: the template's request is what config
// shows and what a not yet provisioned DataVolume is created with. vm is
// not modified.
func ResizeDisk(vm *kubevirtv1.VirtualMachine, disk string, delta bool, bytes int64) (DiskResize, error) {
	var claim string
	if vm.Spec.Template != nil {
		for _, v := range vm.Spec.Template.Spec.Volumes {
			if v.Name == disk && v.DataVolume != nil {
				claim = v.DataVolume.Name
			}
		}
	}
	if claim == "" {
		return DiskResize{}, newParamError(ErrNotResizable, fmt.Sprintf("disk '%s' does not exist or is not a resizable disk", disk))
	}
	want := vm.DeepCopy()
	for i := range want.Spec.DataVolumeTemplates {
		dv := &want.Spec.DataVolumeTemplates[i]
		if dv.Name != claim || dv.Spec.Storage == nil {
			continue
		}
		q := dv.Spec.Storage.Resources.Requests[corev1.ResourceStorage]
		cur := q.Value()
		target := bytes
		if delta {
			target = cur + bytes
		}
		if target < cur {
			return DiskResize{}, ErrShrinkDisk
		}
		target = (target + (1<<20 - 1)) &^ (1<<20 - 1)
		dv.Spec.Storage.Resources.Requests[corev1.ResourceStorage] = *resource.NewQuantity(target, resource.BinarySI)
		cfg := StoredConfig(want)
		if v, ok := cfg[disk]; ok {
			cfg[disk] = replaceSize(v, FormatSize(target))
			want.Annotations[AnnotationConfig] = EncodeConfig(cfg)
		}
		return DiskResize{VM: want, Claim: claim, StorageClass: TemplateStorageClass(*dv), From: cur, To: target}, nil
	}
	return DiskResize{}, newParamError(ErrNotResizable, fmt.Sprintf("disk '%s' has no resizable volume", disk))
}

// replaceSize sets the size= option of a drive string, dropping any
// other size= it holds.
func replaceSize(drive, size string) string {
	parts := strings.Split(drive, ",")
	out := parts[:0]
	for _, p := range parts {
		if !strings.HasPrefix(p, "size=") {
			out = append(out, p)
		}
	}
	return strings.Join(append(out, "size="+size), ",")
}

// MarkTemplate makes vm a PVE template: labelled, Halted (KubeVirt never
// starts it), template=1 in its stored config.
func MarkTemplate(vm *kubevirtv1.VirtualMachine) {
	if vm.Labels == nil {
		vm.Labels = map[string]string{}
	}
	vm.Labels[LabelTemplate] = "true"
	halted := kubevirtv1.RunStrategyHalted
	vm.Spec.RunStrategy = &halted
	cfg := StoredConfig(vm)
	cfg["template"] = "1"
	baseVolumes(cfg)
	if vm.Annotations == nil {
		vm.Annotations = map[string]string{}
	}
	vm.Annotations[AnnotationConfig] = EncodeConfig(cfg)
}

// Provisioning tells whether vm's volumes are still being provisioned
// (DataVolumes importing, cloning or waiting for a volume), so that a
// lock recorded at create or clone still holds. A VM whose status nothing
// has written yet is provisioning while it has DataVolume templates and
// KubeVirt has not created it.
func Provisioning(vm *kubevirtv1.VirtualMachine) bool {
	switch vm.Status.PrintableStatus {
	case kubevirtv1.VirtualMachineStatusProvisioning, kubevirtv1.VirtualMachineStatusWaitingForVolumeBinding:
		return true
	case "":
		return len(vm.Spec.DataVolumeTemplates) > 0 && !vm.Status.Created
	}
	return false
}

// A template's disks are named base-<vmid>-disk-<n> on PVE: converting a
// VM to a template renames each of its volumes (qemu-server
// template_create, pve-storage vdisk_create_base). A claim cannot be
// renamed (and copying every disk would make the conversion a long
// transfer), so here the PVE name is a view: MarkTemplate rewrites the
// template's config to base- names, its claims keep their names, and
// either name finds the claim (ClaimOfVolume).
var (
	baseVolRE = regexp.MustCompile(`^base-(\d+)-(disk-\d+)$`)
	diskVolRE = regexp.MustCompile(`^vm-(\d+)-(disk-\d+)$`)
)

// ClaimOfVolume is the claim a PVE volume name refers to: base-<vmid>-disk-<n>
// is vm-<vmid>-disk-<n>, any other name itself.
func ClaimOfVolume(name string) string {
	if m := baseVolRE.FindStringSubmatch(name); m != nil {
		return "vm-" + m[1] + "-" + m[2]
	}
	return name
}

// BaseVolume is the name PVE gives a template's disk volume claim
// (vm-<vmid>-disk-<n> → base-<vmid>-disk-<n>); other claims keep theirs.
func BaseVolume(claim string) string {
	if m := diskVolRE.FindStringSubmatch(claim); m != nil {
		return "base-" + m[1] + "-" + m[2]
	}
	return claim
}

// baseVolumes rewrites the disk and unusedN values of cfg to the base-
// names a template's volumes get.
func baseVolumes(cfg map[string]string) {
	for k, v := range cfg {
		if !diskKeyRE.MatchString(k) && !strings.HasPrefix(k, "unused") {
			continue
		}
		d, err := parseDrive(v)
		if err != nil {
			continue
		}
		if st, name, ok := strings.Cut(d.file, ":"); ok && st != "" && BaseVolume(name) != name {
			d.file = st + ":" + BaseVolume(name)
			cfg[k] = d.String()
		}
	}
}
