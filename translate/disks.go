package translate

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// ClaimInfo is what the cluster knows of a claim (a PVC, or the DataVolume
// that fills it) of the VM's namespace.
type ClaimInfo struct {
	StorageClass string
	Bytes        int64 // capacity, else the request; 0 when unknown
	// ImageBytes is the disk an image to import holds (its virtual size,
	// the file's for raw) when the claim keeps it as a file (Filesystem
	// mode): a disk cloned from it needs that much, not the claim's
	// margin. 0 otherwise.
	ImageBytes int64
	// DataVolume: CDI made the claim for a DataVolume of the same name
	// (which controls it), so a disk re-attached to it is a dataVolume
	// volume, as it was while its template held it.
	DataVolume bool
}

// ClaimLookup describes a claim of the VM's namespace by name; ok is false
// when the cluster has none. A nil ClaimLookup knows no claim.
type ClaimLookup func(name string) (info ClaimInfo, ok bool)

func (l ClaimLookup) get(name string) (ClaimInfo, bool) {
	if l == nil || name == "" {
		return ClaimInfo{}, false
	}
	return l(name)
}

// unknownStorage stands for the storage of a claim whose StorageClass is
// not known, so that the volume id keeps PVE's "<storage>:<volume>" shape.
const unknownStorage = "pvc"

// specDisk is a disk of the VM's template with the PVE key it shows under.
//
// A managed disk was made from the stored config: the disk is named after
// its key and the stored config holds that key. Every other disk is
// foreign (made with kubectl, by a template, or before this API knew the
// VM): it shows under a key derived from its bus and its order, or its own
// name when that is a PVE disk key, and is never rebuilt from the config,
// so an update that does not name it cannot change or lose it.
type specDisk struct {
	key     string
	disk    kubevirtv1.Disk
	vol     *kubevirtv1.Volume
	managed bool
}

// specDisks lists the disks of vm's template that have a volume, in spec
// order, with their keys. stored is the VM's stored config. Keys of
// foreign disks are, in this order: the disk's own name when it is a PVE
// disk key; the key pinned by an earlier write (AnnotationDiskKeys) while
// nothing else holds it; the first free index of the PVE bus matching the
// disk's bus, skipping every key the stored config or another disk holds.
// A disk for which no key is free (more disks than PVE has slots) is left
// out.
func specDisks(vm *kubevirtv1.VirtualMachine, stored map[string]string) []specDisk {
	if vm == nil || vm.Spec.Template == nil {
		return nil
	}
	spec := &vm.Spec.Template.Spec
	vols := make(map[string]*kubevirtv1.Volume, len(spec.Volumes))
	for i := range spec.Volumes {
		vols[spec.Volumes[i].Name] = &spec.Volumes[i]
	}
	used := map[string]bool{}
	for k := range stored {
		if diskKeyRE.MatchString(k) {
			used[k] = true
		}
	}
	all := make([]specDisk, 0, len(spec.Domain.Devices.Disks))
	for _, d := range spec.Domain.Devices.Disks {
		if v := vols[d.Name]; v != nil {
			all = append(all, specDisk{disk: d, vol: v})
		}
	}
	var rest []int
	for i := range all {
		name := all[i].disk.Name
		if diskKeyRE.MatchString(name) {
			all[i].key = name
			_, all[i].managed = stored[name]
			used[name] = true
			continue
		}
		rest = append(rest, i)
	}
	pinned := map[string]string{} // disk name -> key
	for k, n := range DiskKeyPins(vm) {
		if diskKeyRE.MatchString(k) {
			pinned[n] = k
		}
	}
	var free []int
	for _, i := range rest {
		if k, ok := pinned[all[i].disk.Name]; ok && !used[k] {
			all[i].key = k
			used[k] = true
			continue
		}
		free = append(free, i)
	}
	for _, i := range free {
		if k := freeDiskKey(specDiskPrefix(all[i].disk), used); k != "" {
			all[i].key = k
			used[k] = true
		}
	}
	out := all[:0]
	for _, s := range all {
		if s.key != "" {
			out = append(out, s)
		}
	}
	return out
}

// specDiskPrefix is the PVE bus of a KubeVirt disk: virtio, scsi or sata
// (KubeVirt's defaults for a bus left empty; USB, which PVE has no disk
// bus for, shows as sata).
func specDiskPrefix(d kubevirtv1.Disk) string {
	var bus kubevirtv1.DiskBus
	switch {
	case d.CDRom != nil:
		bus = d.CDRom.Bus
		if bus == "" {
			bus = kubevirtv1.DiskBusSATA
		}
	case d.LUN != nil:
		bus = d.LUN.Bus
		if bus == "" {
			bus = kubevirtv1.DiskBusSCSI
		}
	case d.Disk != nil:
		bus = d.Disk.Bus
	}
	switch bus {
	case kubevirtv1.DiskBusSCSI:
		return "scsi"
	case kubevirtv1.DiskBusSATA, kubevirtv1.DiskBusUSB:
		return "sata"
	}
	return "virtio"
}

// freeDiskKey is the first key of prefix's bus that used does not hold,
// else of another bus; "" when every slot is taken.
func freeDiskKey(prefix string, used map[string]bool) string {
	for _, p := range []string{prefix, "scsi", "virtio", "sata"} {
		for i := 0; i < indexedConfigKeys[p]; i++ {
			if k := p + strconv.Itoa(i); !used[k] {
				return k
			}
		}
	}
	return ""
}

// DiskKeyPins returns the PVE keys pinned to foreign disks (key -> disk
// name), from AnnotationDiskKeys.
func DiskKeyPins(vm *kubevirtv1.VirtualMachine) map[string]string {
	out := map[string]string{}
	if raw := vm.Annotations[AnnotationDiskKeys]; raw != "" {
		_ = json.Unmarshal([]byte(raw), &out)
	}
	return out
}

// pinDiskKeys records the keys of vm's foreign disks whose names are not
// their keys, so that later reads show them under the same keys even when
// the disks or keys before them go away.
func pinDiskKeys(vm *kubevirtv1.VirtualMachine, disks []specDisk) {
	pins := map[string]string{}
	for _, s := range disks {
		if !s.managed && s.key != s.disk.Name {
			pins[s.key] = s.disk.Name
		}
	}
	if len(pins) == 0 {
		delete(vm.Annotations, AnnotationDiskKeys)
		return
	}
	buf, _ := json.Marshal(pins)
	if vm.Annotations == nil {
		vm.Annotations = map[string]string{}
	}
	vm.Annotations[AnnotationDiskKeys] = string(buf)
}

// ownedClaim is a claim a VM's disk may use, detach to unusedN and
// delete: a DataVolume template of the VM, or a writable PVC or
// DataVolume one of its disks uses or used (unusedN).
type ownedClaim struct {
	storage  string
	template bool // one of the VM's dataVolumeTemplates
	dv       bool // attached as a dataVolume volume (a template's always is)
}

// claimOfVolume is the claim a disk volume keeps data on, if it is one
// the VM may detach and delete: not a read-only one (shared ISO images)
// and not an ephemeral overlay.
func claimOfVolume(v *kubevirtv1.Volume) (name string, dv bool) {
	switch {
	case v.DataVolume != nil:
		return v.DataVolume.Name, true
	case v.PersistentVolumeClaim != nil && !v.PersistentVolumeClaim.ReadOnly:
		return v.PersistentVolumeClaim.ClaimName, false
	}
	return "", false
}

// foreignValue is the drive string a foreign disk shows: the volume as
// "<storage>:<claim>" with its size when the claim is known, or a
// pseudo-volume naming the source of an ephemeral or generated disk.
func foreignValue(vm *kubevirtv1.VirtualMachine, s specDisk, claims ClaimLookup) string {
	v := s.vol
	d := &drive{opts: map[string]string{}}
	var size int64
	claim := func(name string) {
		storage := unknownStorage
		if ci, ok := claims.get(name); ok {
			if ci.StorageClass != "" {
				storage = ci.StorageClass
			}
			size = ci.Bytes
		}
		d.file = storage + ":" + name
	}
	switch {
	case v.PersistentVolumeClaim != nil:
		claim(v.PersistentVolumeClaim.ClaimName)
		if v.PersistentVolumeClaim.ReadOnly && s.disk.CDRom == nil {
			d.set("ro", "1")
		}
	case v.DataVolume != nil:
		claim(v.DataVolume.Name)
		for _, t := range vm.Spec.DataVolumeTemplates {
			if t.Name != v.DataVolume.Name {
				continue
			}
			if sc := TemplateStorageClass(t); sc != "" {
				d.file = sc + ":" + t.Name
			}
			if n := DataVolumeSize(t); n > 0 {
				size = n
			}
		}
	case v.Ephemeral != nil && v.Ephemeral.PersistentVolumeClaim != nil:
		claim(v.Ephemeral.PersistentVolumeClaim.ClaimName)
		d.set("snapshot", "1")
	case v.ContainerDisk != nil:
		d.file = "containerdisk:" + v.ContainerDisk.Image
		d.set("snapshot", "1")
	case v.EmptyDisk != nil:
		d.file = "emptydisk:" + v.Name
		d.set("snapshot", "1")
		size = v.EmptyDisk.Capacity.Value()
	case v.HostDisk != nil:
		d.file = v.HostDisk.Path
		if v.HostDisk.Capacity.Value() > 0 {
			size = v.HostDisk.Capacity.Value()
		}
	case v.CloudInitNoCloud != nil || v.CloudInitConfigDrive != nil:
		d.file = "cloudinit:" + v.Name
	case v.Secret != nil:
		d.file = "secret:" + v.Secret.SecretName
	case v.ConfigMap != nil:
		d.file = "configmap:" + v.ConfigMap.Name
	case v.ServiceAccount != nil:
		d.file = "serviceaccount:" + v.ServiceAccount.ServiceAccountName
	default:
		d.file = "kubevirt:" + v.Name
	}
	if s.disk.CDRom != nil {
		d.set("media", "cdrom")
	}
	if s.disk.Cache != "" {
		d.set("cache", string(s.disk.Cache))
	}
	if s.disk.DedicatedIOThread != nil && *s.disk.DedicatedIOThread {
		d.set("iothread", "1")
	}
	if s.disk.Serial != "" {
		d.set("serial", s.disk.Serial)
	}
	if size > 0 {
		d.set("size", FormatSize(size))
	}
	return d.String()
}

// TemplateStorageClass is the StorageClass a DataVolume template asks for
// (its storage spec, else its PVC spec); "" when it names none.
func TemplateStorageClass(t kubevirtv1.DataVolumeTemplateSpec) string {
	if t.Spec.Storage != nil && t.Spec.Storage.StorageClassName != nil {
		return *t.Spec.Storage.StorageClassName
	}
	if t.Spec.PVC != nil && t.Spec.PVC.StorageClassName != nil {
		return *t.Spec.PVC.StorageClassName
	}
	return ""
}

// sameDrive tells whether a drive string a client sent for a foreign disk
// asks for nothing but what the disk is: the same volume and options
// (size= aside, which describes the volume and changes nothing).
func sameDrive(sent, shown string) bool {
	a, err := parseDrive(sent)
	if err != nil {
		return false
	}
	b, err := parseDrive(shown)
	if err != nil {
		return false
	}
	if a.file != b.file {
		return false
	}
	delete(a.opts, "size")
	delete(b.opts, "size")
	if len(a.opts) != len(b.opts) {
		return false
	}
	for k, v := range a.opts {
		if b.opts[k] != v {
			return false
		}
	}
	return true
}

// unusedVolume is the volume name an unusedN value names.
func unusedVolume(v string) string {
	d, err := parseDrive(v)
	if err != nil {
		return ""
	}
	_, name, ok := strings.Cut(d.file, ":")
	if !ok {
		return ""
	}
	return ClaimOfVolume(name)
}

// orderedKeys returns m's keys in sorted order, never nil.
func orderedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// claimBytes is the size of a PVC: its capacity, else its request.
func claimBytes(pvc *corev1.PersistentVolumeClaim) int64 {
	if q, ok := pvc.Status.Capacity[corev1.ResourceStorage]; ok {
		return q.Value()
	}
	q := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	return q.Value()
}

// ClaimInfoOf describes a PVC for a ClaimLookup.
func ClaimInfoOf(pvc *corev1.PersistentVolumeClaim) ClaimInfo {
	ci := ClaimInfo{Bytes: claimBytes(pvc)}
	if pvc.Spec.StorageClassName != nil {
		ci.StorageClass = *pvc.Spec.StorageClassName
	}
	// A block claim is cloned whole: CDI wants the target at least as large.
	block := pvc.Spec.VolumeMode != nil && *pvc.Spec.VolumeMode == corev1.PersistentVolumeBlock
	if content, _, ok := FileOf(pvc.Annotations); ok && content == ContentImport && !block {
		ci.ImageBytes = max(VirtualSizeOf(pvc.Annotations), FileSizeOf(pvc.Annotations))
	}
	if ref := metav1.GetControllerOf(pvc); ref != nil && ref.Kind == "DataVolume" && ref.Name == pvc.Name &&
		strings.HasPrefix(ref.APIVersion, "cdi.kubevirt.io/") {
		ci.DataVolume = true
	}
	return ci
}

// VolumeClaims lists the claims vm keeps data on or refers to by name: its
// DataVolume templates, the PVCs and DataVolumes its volumes use, and the
// volumes of its unusedN. No new disk may take one of these names, and
// none may be deleted for another VM.
func VolumeClaims(vm *kubevirtv1.VirtualMachine) []string {
	seen := map[string]bool{}
	var out []string
	add := func(n string) {
		if n != "" && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	for _, t := range vm.Spec.DataVolumeTemplates {
		add(t.Name)
	}
	if vm.Spec.Template != nil {
		for _, v := range vm.Spec.Template.Spec.Volumes {
			switch {
			case v.DataVolume != nil:
				add(v.DataVolume.Name)
			case v.PersistentVolumeClaim != nil:
				add(v.PersistentVolumeClaim.ClaimName)
			case v.Ephemeral != nil && v.Ephemeral.PersistentVolumeClaim != nil:
				add(v.Ephemeral.PersistentVolumeClaim.ClaimName)
			case v.MemoryDump != nil:
				add(v.MemoryDump.ClaimName)
			}
		}
	}
	stored := StoredConfig(vm)
	for _, k := range orderedKeys(stored) {
		if strings.HasPrefix(k, "unused") {
			add(unusedVolume(stored[k]))
		}
	}
	return out
}

// freeVolumeName is the first vm-<vmid>-disk-<n>, n counting on from
// *next, that skip (if set) does not reject and taken (if set) does not
// report in use; *next moves past every name tried. It gives up after
// 1000 names, and when taken cannot tell.
func freeVolumeName(vmid int, next *int, skip func(string) bool, taken func(string) (bool, error)) (string, error) {
	for tries := 0; tries < 1000; tries++ {
		name := fmt.Sprintf("vm-%d-disk-%d", vmid, *next)
		*next++
		if skip != nil && skip(name) {
			continue
		}
		if taken != nil {
			t, err := taken(name)
			if err != nil {
				return "", fmt.Errorf("cannot tell whether volume name '%s' is free: %v", name, err)
			}
			if t {
				continue
			}
		}
		return name, nil
	}
	return "", fmt.Errorf("no free volume name vm-%d-disk-<n>", vmid)
}
