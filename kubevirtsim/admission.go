package kubevirtsim

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/testing"
	virtv1 "kubevirt.io/api/core/v1"
	snapshotv1 "kubevirt.io/api/snapshot/v1beta1"
)

// The admission rules of KubeVirt v1.8's validating webhooks that the
// stand-in enforces, in KubeVirt's words: the ones a client of the
// caddy-proxmox API (or the stand-in's own controllers) can run into. They
// are checked against the real webhooks by one table
// (internal/admissiontest), run on both. KubeVirt checks much more (its
// CRD schemas, instance types, networks, …); what is not here is allowed.
//
// VirtualMachine create and update (pkg/virt-api/webhooks/validating-
// webhook/admitters/vms-admitter.go, vmi-create-admitter.go and
// pkg/storage/admitters):
//   - the machine type one of the emulated machines (q35*, pc-q35*); no
//     more sockets than maxSockets (twice over under the LiveUpdate
//     rollout strategy, KubeVirt's default);
//   - every disk has a volume of its name (an empty CD-ROM needs the
//     DeclarativeHotplugVolumes gate; a volume without a disk is fine,
//     KubeVirt's defaults give it one); no boot order twice;
//   - disks: unique names, one target, boot orders > 0, buses KubeVirt
//     knows (no IDE, no virtio CD-ROM, no read-only SATA disk),
//     dedicatedIOThread only on virtio, serials of [A-Za-z0-9_.+-] and at
//     most 256 characters, cache none/writethrough/writeback, io
//     native/threads;
//   - one user-data and one network-data source per cloud-init volume,
//     at least one of them, valid base64, inline data up to 2048 bytes;
//   - every dataVolumeTemplate referenced by a volume;
//   - a valid run strategy, or (deprecated) running, not both;
//   - only if all that holds: while the VM's status.snapshotInProgress is
//     set, no change of its volumes or run state; while
//     status.restoreInProgress is set, no change of its run strategy.
//
// VirtualMachineSnapshot and VirtualMachineRestore create: the Snapshot
// feature gate of the KubeVirt CR. Without a KubeVirt CR (unit tests, the
// simulated lab) the gates are labGates.

// Webhook names, as kube-apiserver names them in a denial.
const (
	webhookVM       = "virtualmachine-validator.kubevirt.io"
	webhookSnapshot = "virtualmachinesnapshot-validator.snapshot.kubevirt.io"
	webhookRestore  = "virtualmachinerestore-validator.snapshot.kubevirt.io"
)

// maxSerialLength is KubeVirt's maxStrLen for disk serials.
const maxSerialLength = 256

var serialRE = regexp.MustCompile(`^[A-Za-z0-9_.+-]+$`)

// emulatedMachines are KubeVirt's default emulated machines on amd64.
var emulatedMachines = []string{"q35*", "pc-q35*"}

// admission is the stand-in's validating webhooks for one fake KubeVirt
// clientset; tracker holds the KubeVirt CR whose feature gates count.
type admission struct {
	tracker testing.ObjectTracker
}

var (
	vmGVR       = virtv1.SchemeGroupVersion.WithResource("virtualmachines")
	snapshotGVR = snapshotv1.SchemeGroupVersion.WithResource("virtualmachinesnapshots")
	restoreGVR  = snapshotv1.SchemeGroupVersion.WithResource("virtualmachinerestores")
	kubevirtGVR = virtv1.SchemeGroupVersion.WithResource("kubevirts")
)

// admit judges a write of obj (old is the stored object on update, nil on
// create) to gvr's main resource; a nil error admits it.
func (a *admission) admit(gvr schema.GroupVersionResource, old, obj runtime.Object) error {
	switch gvr.GroupResource() {
	case vmGVR.GroupResource():
		vm, ok := obj.(*virtv1.VirtualMachine)
		if !ok || vm.DeletionTimestamp != nil {
			return nil
		}
		oldVM, _ := old.(*virtv1.VirtualMachine)
		return denial(http.StatusUnprocessableEntity, webhookVM, vmCauses(oldVM, vm, a.config()))
	case snapshotGVR.GroupResource():
		if old == nil && !a.config().gate(gateSnapshot) {
			return denial(http.StatusBadRequest, webhookSnapshot, []metav1.StatusCause{{Message: "snapshot feature gate not enabled"}})
		}
	case restoreGVR.GroupResource():
		if old == nil && !a.config().gate(gateSnapshot) {
			return denial(http.StatusBadRequest, webhookRestore, []metav1.StatusCause{{Message: "Snapshot/Restore feature gate not enabled"}})
		}
	}
	return nil
}

// Feature gates the stand-in's rules depend on (both off by default in
// KubeVirt v1.8: Snapshot is Beta, DeclarativeHotplugVolumes Alpha).
const (
	gateSnapshot                  = "Snapshot"
	gateDeclarativeHotplugVolumes = "DeclarativeHotplugVolumes"
)

// labGates are the gates on where there is no KubeVirt CR (unit tests,
// the simulated lab), as on the cluster the integration suite runs: the
// lab shows snapshots.
var labGates = []string{gateSnapshot}

// clusterConfig is what of the KubeVirt CR's configuration the rules
// read.
type clusterConfig struct {
	gates []string
	// liveUpdate: the VM rollout strategy is LiveUpdate, KubeVirt's
	// default, under which the VM webhook checks CPU hotplug twice.
	liveUpdate bool
}

// config reads the KubeVirt CR; without one it is the lab's.
func (a *admission) config() clusterConfig {
	list, err := a.tracker.List(kubevirtGVR, virtv1.SchemeGroupVersion.WithKind("KubeVirt"), metav1.NamespaceAll)
	kvs, ok := list.(*virtv1.KubeVirtList)
	if err != nil || !ok || len(kvs.Items) == 0 {
		return clusterConfig{gates: labGates, liveUpdate: true}
	}
	c := kvs.Items[0].Spec.Configuration
	cfg := clusterConfig{liveUpdate: c.VMRolloutStrategy == nil || *c.VMRolloutStrategy == virtv1.VMRolloutStrategyLiveUpdate}
	if dev := c.DeveloperConfiguration; dev != nil {
		// KubeVirt v1.8 turns on only its GA gates by itself, and an
		// enabled gate wins over a disabled one.
		cfg.gates = dev.FeatureGates
	}
	return cfg
}

func (c clusterConfig) gate(name string) bool { return slices.Contains(c.gates, name) }

// maxCauses is how many causes KubeVirt's ToAdmissionResponse names.
const maxCauses = 10

// denial is kube-apiserver's answer when a webhook refuses with causes
// (KubeVirt's ToAdmissionResponse joins the messages of the first ten).
func denial(code int32, webhook string, causes []metav1.StatusCause) error {
	if len(causes) == 0 {
		return nil
	}
	more := ""
	if len(causes) > maxCauses {
		more = fmt.Sprintf(", and %v more validation errors", len(causes)-maxCauses)
		causes = causes[:maxCauses]
	}
	msgs := make([]string, len(causes))
	for i, c := range causes {
		msgs[i] = c.Message
	}
	st := metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    code,
		Message: fmt.Sprintf("admission webhook %q denied the request: %s%s", webhook, strings.Join(msgs, ", "), more),
	}
	if code == http.StatusUnprocessableEntity {
		st.Reason = metav1.StatusReasonInvalid
		st.Details = &metav1.StatusDetails{Causes: causes}
	}
	return &apierrors.StatusError{ErrStatus: st}
}

// vmCauses are the rules a VirtualMachine breaks; old is nil on create.
// They come in KubeVirt's order: the spec's own rules, and only if it
// passes them, the storage admitter's locks.
func vmCauses(old, vm *virtv1.VirtualMachine, cfg clusterConfig) []metav1.StatusCause {
	if vm.Spec.Template == nil {
		return []metav1.StatusCause{{Type: metav1.CauseTypeFieldValueRequired, Message: "missing virtual machine template.", Field: "spec.template"}}
	}
	spec := &vm.Spec.Template.Spec
	var causes []metav1.StatusCause
	causes = append(causes, machineCauses(spec)...)
	causes = append(causes, socketCauses(spec)...)
	causes = append(causes, diskVolumeCauses(spec, cfg)...)
	causes = append(causes, diskCauses(spec.Domain.Devices.Disks)...)
	causes = append(causes, cloudInitCauses(spec.Volumes)...)
	causes = append(causes, templateCauses(&vm.Spec)...)
	causes = append(causes, runStrategyCauses(&vm.Spec)...)
	if cfg.liveUpdate {
		// validateLiveUpdateFeatures (its memory rules need maxGuest,
		// which this API never sets).
		causes = append(causes, socketCauses(spec)...)
	}
	if len(causes) == 0 && old != nil {
		causes = lockCauses(old, vm)
	}
	return causes
}

// socketCauses: no more sockets than maxSockets.
func socketCauses(spec *virtv1.VirtualMachineInstanceSpec) []metav1.StatusCause {
	if cpu := spec.Domain.CPU; cpu != nil && cpu.MaxSockets != 0 && cpu.Sockets > cpu.MaxSockets {
		return []metav1.StatusCause{invalid("Number of sockets in CPU topology is greater than the maximum sockets allowed",
			"spec.template.spec.domain.cpu.sockets")}
	}
	return nil
}

// runStrategyCauses: a valid run strategy, or (deprecated) running, not
// both (vms-admitter.go validateRunStrategy).
func runStrategyCauses(s *virtv1.VirtualMachineSpec) []metav1.StatusCause {
	var causes []metav1.StatusCause
	if s.Running != nil && s.RunStrategy != nil {
		causes = append(causes, invalid("Running and RunStrategy are mutually exclusive. Note that Running is deprecated, please use RunStrategy instead", "spec.running"))
	}
	if s.Running == nil && s.RunStrategy == nil {
		causes = append(causes, invalid("RunStrategy must be specified", "spec.running"))
	}
	if s.RunStrategy != nil && !slices.Contains(runStrategies, *s.RunStrategy) {
		msg := fmt.Sprintf("Invalid RunStrategy (%s)", *s.RunStrategy)
		if *s.RunStrategy == virtv1.RunStrategyWaitAsReceiver {
			msg += ", DecentralizedLiveMigration feature gate is not enabled in kubevirt resource"
		}
		causes = append(causes, invalid(msg, "spec.runStrategy"))
	}
	return causes
}

// runStrategies are the ones KubeVirt's VM webhook takes (WaitAsReceiver
// needs an Alpha gate the stand-in does not model).
var runStrategies = []virtv1.VirtualMachineRunStrategy{virtv1.RunStrategyHalted, virtv1.RunStrategyManual,
	virtv1.RunStrategyAlways, virtv1.RunStrategyRerunOnFailure, virtv1.RunStrategyOnce}

// diskVolumeCauses: every disk has a volume of its name, but for an empty
// CD-ROM, which needs the DeclarativeHotplugVolumes gate; no two disks
// share a boot order (vmi-create-admitter.go validateBootOrder). A volume
// without a disk is fine: KubeVirt's defaults give it one.
func diskVolumeCauses(spec *virtv1.VirtualMachineInstanceSpec, cfg clusterConfig) []metav1.StatusCause {
	const disks = "spec.template.spec.domain.devices.disks"
	var causes []metav1.StatusCause
	vols := map[string]bool{}
	for _, v := range spec.Volumes {
		vols[v.Name] = true
	}
	orders := map[uint]bool{}
	for i, d := range spec.Domain.Devices.Disks {
		field := fmt.Sprintf("%s[%d]", disks, i)
		switch {
		case vols[d.Name]:
		case d.CDRom == nil:
			causes = append(causes, invalid(fmt.Sprintf("%s.Name '%s' not found.", field, d.Name), field+".name"))
		case !cfg.gate(gateDeclarativeHotplugVolumes):
			causes = append(causes, invalid(gateDeclarativeHotplugVolumes+" feature gate not enabled, cannot define an empty CD-ROM disk", field+".name"))
		}
		if d.BootOrder != nil {
			if orders[*d.BootOrder] {
				causes = append(causes, invalid(fmt.Sprintf("Boot order for %s.bootOrder already set for a different device.", field), field+".bootOrder"))
			}
			orders[*d.BootOrder] = true
		}
	}
	return causes
}

// diskCauses: pkg/storage/admitters/disks.go ValidateDisks, for what a
// client of this API or kubectl can write: names, targets, boot orders,
// buses (and I/O threads on them), serials, cache and I/O modes.
func diskCauses(disks []virtv1.Disk) []metav1.StatusCause {
	const path = "spec.template.spec.domain.devices.disks"
	var causes []metav1.StatusCause
	for i, d := range disks {
		field := fmt.Sprintf("%s[%d]", path, i)
		for j := range i {
			if disks[j].Name == d.Name {
				causes = append(causes, invalid(fmt.Sprintf("%s and %s[%d] must not have the same Name.", field, path, j), field+".name"))
			}
		}
		if targets(d) > 1 {
			causes = append(causes, invalid(field+" can only have a single target type defined", field))
		}
		if d.BootOrder != nil && *d.BootOrder < 1 {
			causes = append(causes, invalid(field+" must have a boot order > 0, if supplied", field+".bootOrder"))
		}
		causes = append(causes, busCauses(field, d)...)
		if d.Serial != "" && !serialRE.MatchString(d.Serial) {
			causes = append(causes, invalid(field+" must be made up of the following characters [A-Za-z0-9_.+-], if specified", field+".serial"))
		}
		if len([]rune(d.Serial)) > maxSerialLength {
			causes = append(causes, invalid(fmt.Sprintf("%s must be less than or equal to %d in length, if specified", field, maxSerialLength), field+".serial"))
		}
		if c := d.Cache; c != "" && c != virtv1.CacheNone && c != virtv1.CacheWriteThrough && c != virtv1.CacheWriteBack {
			causes = append(causes, invalid(fmt.Sprintf("%s.cache has invalid value %s", field, c), field+".cache"))
		}
		if d.IO != "" && d.IO != virtv1.IONative && d.IO != virtv1.IOThreads {
			causes = append(causes, metav1.StatusCause{Type: metav1.CauseTypeFieldValueNotSupported,
				Message: fmt.Sprintf("Disk IO mode for %s is not supported. Supported modes are: native, threads.", path),
				Field:   fmt.Sprintf("%s.domain.devices.disks[%d].io", path, i)})
		}
	}
	return causes
}

func targets(d virtv1.Disk) int {
	n := 0
	for _, set := range []bool{d.Disk != nil, d.LUN != nil, d.CDRom != nil} {
		if set {
			n++
		}
	}
	return n
}

// busCauses is disks.go validateBusSupport: a disk without a bus (the VM
// webhook sees none; KubeVirt defaults it only on the VMI) is not judged.
func busCauses(field string, d virtv1.Disk) []metav1.StatusCause {
	bus, kind := diskBus(d)
	if bus == "" {
		return nil
	}
	var causes []metav1.StatusCause
	switch bus {
	case "ide":
		causes = append(causes, invalid("IDE bus is not supported", field+"."+kind+".bus"))
	case virtv1.DiskBusVirtio:
		if kind == "cdrom" {
			causes = append(causes, invalid("Bus type virtio is invalid for CD-ROM device", field+".cdrom.bus"))
		}
	case virtv1.DiskBusSATA:
		if d.Disk != nil && d.Disk.ReadOnly {
			causes = append(causes, invalid("sata hard-disks do not support read-only.", field+".disk.bus"))
		}
	case virtv1.DiskBusSCSI, virtv1.DiskBusUSB:
	default:
		causes = append(causes, invalid(fmt.Sprintf("%s is set with an unrecognized bus %s, must be one of: [virtio scsi sata usb]", field, bus), field+"."+kind+".bus"))
	}
	if d.DedicatedIOThread != nil && *d.DedicatedIOThread && bus != virtv1.DiskBusVirtio {
		// KubeVirt names the field twice over here; so does the stand-in.
		causes = append(causes, metav1.StatusCause{Type: metav1.CauseTypeFieldValueNotSupported,
			Message: fmt.Sprintf("IOThreads are not supported for disks on a %s bus", bus),
			Field:   strings.Replace(field, "disks[", "disks.domain.devices.disks[", 1)})
	}
	return causes
}

// diskBus is the bus and the kind of a disk, a LUN or a CD-ROM.
func diskBus(d virtv1.Disk) (virtv1.DiskBus, string) {
	switch {
	case d.Disk != nil:
		return d.Disk.Bus, "disk"
	case d.LUN != nil:
		return d.LUN.Bus, "lun"
	case d.CDRom != nil:
		return d.CDRom.Bus, "cdrom"
	}
	return "", ""
}

// cloudInitMaxLength is KubeVirt's limit of inline user and network data
// (cloudInitUserMaxLen, cloudInitNetworkMaxLen), in bytes.
const cloudInitMaxLength = 2048

// cloudInitCauses: one source of user data and one of network data per
// cloud-init volume, at least one of them, inline data within KubeVirt's
// limit (vmi-create-admitter.go validateVolumes).
func cloudInitCauses(vols []virtv1.Volume) []metav1.StatusCause {
	var causes []metav1.StatusCause
	for i, v := range vols {
		var kind, user, userB64, net, netB64 string
		var userRef, netRef bool
		switch {
		case v.CloudInitNoCloud != nil:
			c := v.CloudInitNoCloud
			kind, user, userB64, net, netB64 = "cloudInitNoCloud", c.UserData, c.UserDataBase64, c.NetworkData, c.NetworkDataBase64
			userRef, netRef = named(c.UserDataSecretRef), named(c.NetworkDataSecretRef)
		case v.CloudInitConfigDrive != nil:
			c := v.CloudInitConfigDrive
			kind, user, userB64, net, netB64 = "cloudInitConfigDrive", c.UserData, c.UserDataBase64, c.NetworkData, c.NetworkDataBase64
			userRef, netRef = named(c.UserDataSecretRef), named(c.NetworkDataSecretRef)
		default:
			continue
		}
		field := fmt.Sprintf("spec.template.spec.volumes[%d].%s", i, kind)
		users, userLen, bad := cloudInitSource(userRef, user, userB64)
		if bad {
			causes = append(causes, invalid(fmt.Sprintf("%s.userDataBase64.%s.userDataBase64 is not a valid base64 value.", field, kind), field+".userDataBase64"))
		}
		if users > 1 {
			causes = append(causes, invalid(field+" must have only one userdatasource set.", field))
		}
		if userLen > cloudInitMaxLength {
			causes = append(causes, invalid(fmt.Sprintf("%s userdata exceeds %d byte limit. Should use UserDataSecretRef for larger data.", field, cloudInitMaxLength), field))
		}
		nets, netLen, bad := cloudInitSource(netRef, net, netB64)
		if bad {
			causes = append(causes, invalid(fmt.Sprintf("%s.networkDataBase64.%s.networkDataBase64 is not a valid base64 value.", field, kind), field+".networkDataBase64"))
		}
		if nets > 1 {
			causes = append(causes, invalid(field+" must have only one networkdata source set.", field))
		}
		if netLen > cloudInitMaxLength {
			causes = append(causes, invalid(fmt.Sprintf("%s networkdata exceeds %d byte limit. Should use NetworkDataSecretRef for larger data.", field, cloudInitMaxLength), field))
		}
		if users == 0 && nets == 0 {
			causes = append(causes, invalid(field+" must have at least one userdatasource or one networkdatasource set.", field))
		}
	}
	return causes
}

// cloudInitSource counts the sources one part of cloud-init data has, its
// inline length as KubeVirt measures it, and whether its base64 is bad.
func cloudInitSource(ref bool, inline, b64 string) (n, length int, bad bool) {
	if ref {
		n++
	}
	if b64 != "" {
		n++
		data, err := base64.StdEncoding.DecodeString(b64)
		bad = err != nil
		length = len(data)
	}
	if inline != "" {
		n++
		length = len(inline)
	}
	return n, length, bad
}

func named(ref *corev1.LocalObjectReference) bool { return ref != nil && ref.Name != "" }

// machineCauses: the machine type, after KubeVirt's default (q35), is one
// of the emulated machines.
func machineCauses(spec *virtv1.VirtualMachineInstanceSpec) []metav1.StatusCause {
	m := spec.Domain.Machine
	if m == nil || m.Type == "" {
		return nil
	}
	for _, pattern := range emulatedMachines {
		if ok, _ := filepath.Match(pattern, m.Type); ok {
			return nil
		}
	}
	const field = "spec.template.spec.domain.machine.type"
	return []metav1.StatusCause{invalid(fmt.Sprintf("%s is not supported: %s (allowed values: %v)", field, m.Type, emulatedMachines), field)}
}

// templateCauses: every dataVolumeTemplate is referenced by a dataVolume
// or persistentVolumeClaim volume.
func templateCauses(spec *virtv1.VirtualMachineSpec) []metav1.StatusCause {
	var causes []metav1.StatusCause
	for i, t := range spec.DataVolumeTemplates {
		found := slices.ContainsFunc(spec.Template.Spec.Volumes, func(v virtv1.Volume) bool {
			return v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == t.Name ||
				v.DataVolume != nil && v.DataVolume.Name == t.Name
		})
		if !found {
			field := fmt.Sprintf("spec.dataVolumeTemplate[%d]", i)
			causes = append(causes, metav1.StatusCause{Type: metav1.CauseTypeFieldValueRequired,
				Message: fmt.Sprintf("DataVolumeTemplate entry %s must be referenced in the VMI template's 'volumes' list", field), Field: field})
		}
	}
	return causes
}

// lockCauses: what an update may not change while a snapshot or a restore
// holds the VM (pkg/storage/admitters/vm-storage-status.go). The status
// is the stored one: an update of the main resource does not change it.
func lockCauses(old, vm *virtv1.VirtualMachine) []metav1.StatusCause {
	if r := old.Status.RestoreInProgress; r != nil && !equality.Semantic.DeepEqual(old.Spec, vm.Spec) {
		before, _ := old.RunStrategy()
		after, _ := vm.RunStrategy()
		if before != after {
			return []metav1.StatusCause{{Type: metav1.CauseTypeFieldValueNotSupported, Field: "spec",
				Message: fmt.Sprintf("Cannot update VM runStrategy until restore %q completes", *r)}}
		}
	}
	s := old.Status.SnapshotInProgress
	if s == nil {
		return nil
	}
	if !sameVolumes(old.Spec.Template.Spec.Volumes, vm.Spec.Template.Spec.Volumes) {
		return []metav1.StatusCause{{Type: metav1.CauseTypeFieldValueNotSupported, Field: "spec",
			Message: fmt.Sprintf("Cannot update vm disks or volumes until snapshot %q completes", *s)}}
	}
	if !sameRunState(&old.Spec, &vm.Spec) {
		return []metav1.StatusCause{{Type: metav1.CauseTypeFieldValueNotSupported, Field: "spec",
			Message: fmt.Sprintf("Cannot update vm running state until snapshot %q completes", *s)}}
	}
	return nil
}

// sameVolumes is KubeVirt's compareVolumes.
func sameVolumes(old, vols []virtv1.Volume) bool {
	if len(old) != len(vols) {
		return false
	}
	for i := range old {
		if !equality.Semantic.DeepEqual(old[i], vols[i]) {
			return false
		}
	}
	return true
}

// sameRunState is KubeVirt's compareRunningSpec: the same running flag or
// run strategy; a switch between the two counts as a change.
func sameRunState(old, vm *virtv1.VirtualMachineSpec) bool {
	switch {
	case old.Running != nil && vm.Running != nil:
		return *old.Running == *vm.Running
	case old.RunStrategy != nil && vm.RunStrategy != nil:
		return *old.RunStrategy == *vm.RunStrategy
	}
	return false
}

func invalid(msg, field string) metav1.StatusCause {
	return metav1.StatusCause{Type: metav1.CauseTypeFieldValueInvalid, Message: msg, Field: field}
}
