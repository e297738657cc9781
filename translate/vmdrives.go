package translate

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// applyDrives maps disk keys onto disks, volumes and DataVolume templates
// of the same name. Volumes of the VM ("<storage>:<claim>") are attached
// by name; new "<storage>:<GiB>" disks get the first vm-<id>-disk-<n> that
// no claim, DataVolume or VM of the namespace uses. Foreign disks (see
// specDisk) are kept exactly as they are unless the update deletes their
// key (then they are detached); an update that would change one is
// refused, since it cannot be rebuilt from a PVE value without guessing.
// Claims the VM owns that no drive uses any more become unusedN, or are
// destroyed when the call deletes them for good (chg).
func applyDrives(vm *kubevirtv1.VirtualMachine, req VMRequest, cfg map[string]string, boot map[string]uint, errs map[string]string, chg *diskChange) {
	p := newDrivePlan(vm, req, cfg, boot, errs, chg)
	p.keepForeign(vm)
	for _, k := range p.managedKeys() {
		p.mapDrive(k)
	}
	p.settleUnused()
	p.write(vm)
}

// drivePlan is one config write's mapping of the disk keys, built up step
// by step by applyDrives: what the VM owns before the write, and the
// disks, volumes and DataVolume templates it has after.
type drivePlan struct {
	req  VMRequest
	cfg  map[string]string // the config after the write; drive values are normalised in place
	errs map[string]string
	chg  *diskChange
	boot map[string]uint // boot order by key

	stored     map[string]string   // the config before the write
	sds        []specDisk          // the VM's disks before the write, with their keys
	foreign    map[string]specDisk // foreign disks by disk name
	foreignKey map[string]bool     // their keys

	// templates are the VM's DataVolume templates and those the write
	// adds, by name.
	templates map[string]kubevirtv1.DataVolumeTemplateSpec
	// owned are the claims the VM may attach by name, detach and delete.
	owned map[string]*ownedClaim
	// used are the claims a drive uses after the write.
	used map[string]bool

	disks   []kubevirtv1.Disk
	vols    []kubevirtv1.Volume
	keepVol map[string]bool // volumes of the foreign disks kept
	next    int             // the next vm-<id>-disk-<n> to try
	ciDrive string          // the key of the cloud-init drive, once mapped
}

func newDrivePlan(vm *kubevirtv1.VirtualMachine, req VMRequest, cfg map[string]string, boot map[string]uint, errs map[string]string, chg *diskChange) *drivePlan {
	p := &drivePlan{
		req: req, cfg: cfg, errs: errs, chg: chg, boot: boot,
		foreign: map[string]specDisk{}, foreignKey: map[string]bool{},
		used: map[string]bool{}, keepVol: map[string]bool{},
	}
	p.stored = StoredConfig(vm)
	p.sds = specDisks(vm, p.stored)
	for _, s := range p.sds {
		if !s.managed {
			p.foreign[s.disk.Name] = s
			p.foreignKey[s.key] = true
		}
	}
	p.templates, p.owned = ownedClaims(vm, p.sds, p.stored, req.Claim)
	return p
}

// ownedClaims lists the claims vm may attach by name, detach and delete:
// its DataVolume templates, the writable claims its disks use (sds), and
// the volumes of its unusedN (stored). Each has its storage: the
// template's StorageClass, the unusedN's storage, the claim's
// StorageClass as claims knows it, else unknownStorage. templates are the
// DataVolume templates by name.
func ownedClaims(vm *kubevirtv1.VirtualMachine, sds []specDisk, stored map[string]string, claims ClaimLookup) (templates map[string]kubevirtv1.DataVolumeTemplateSpec, owned map[string]*ownedClaim) {
	templates = map[string]kubevirtv1.DataVolumeTemplateSpec{}
	owned = map[string]*ownedClaim{}
	for _, dv := range vm.Spec.DataVolumeTemplates {
		templates[dv.Name] = dv
		owned[dv.Name] = &ownedClaim{storage: TemplateStorageClass(dv), template: true, dv: true}
	}
	for _, s := range sds {
		if s.disk.CDRom != nil {
			continue
		}
		if n, dv := claimOfVolume(s.vol); n != "" && owned[n] == nil {
			owned[n] = &ownedClaim{dv: dv}
		}
	}
	for _, k := range orderedKeys(stored) {
		if !strings.HasPrefix(k, "unused") {
			continue
		}
		if n := unusedVolume(stored[k]); n != "" && owned[n] == nil {
			// A detached disk's template left the spec with it (see
			// keptTemplates); its claim may still be a DataVolume's.
			st, _, _ := strings.Cut(stored[k], ":")
			ci, _ := claims.get(n)
			owned[n] = &ownedClaim{storage: st, dv: ci.DataVolume}
		}
	}
	for n, o := range owned {
		if o.storage == "" {
			if ci, ok := claims.get(n); ok {
				o.storage = ci.StorageClass
			}
		}
		if o.storage == "" {
			o.storage = unknownStorage
		}
	}
	return templates, owned
}

// keepForeign keeps the foreign disks first, in their order (see
// foreignDisk), and the disks that have no key to show under (not ours).
// Managed disks are dropped with their volumes: mapDrive rebuilds them
// from the config.
func (p *drivePlan) keepForeign(vm *kubevirtv1.VirtualMachine) {
	spec := &vm.Spec.Template.Spec
	_, setBoot := p.req.Config["boot"]
	dropVol := map[string]bool{}
	for _, d := range spec.Domain.Devices.Disks {
		s, isForeign := p.foreign[d.Name]
		if !isForeign {
			if !diskKeyRE.MatchString(d.Name) {
				p.disks = append(p.disks, d) // no key to show it under: not ours
			}
			continue
		}
		kept, err := p.foreignDisk(vm, s, d, setBoot)
		switch {
		case err != nil:
			p.errs[s.key] = err.Error()
		case kept == nil:
			dropVol[d.Name] = true // detached: its claim becomes unusedN
		default:
			p.keepVol[d.Name] = true
			if n, _ := claimOfVolume(s.vol); n != "" && kept.CDRom == nil {
				p.used[n] = true
			}
			p.disks = append(p.disks, *kept)
		}
	}
	for _, v := range spec.Volumes {
		if p.keepVol[v.Name] || (!diskKeyRE.MatchString(v.Name) && !dropVol[v.Name]) {
			p.vols = append(p.vols, v)
		}
	}
}

// foreignDisk is what the write makes of foreign disk d (s): nil when it
// deletes its key (detached), d itself when the call leaves it alone or
// sends back the value it shows, with the boot order a boot= in the call
// gives. A call that sends another value is refused.
func (p *drivePlan) foreignDisk(vm *kubevirtv1.VirtualMachine, s specDisk, d kubevirtv1.Disk, setBoot bool) (*kubevirtv1.Disk, error) {
	if _, keep := p.cfg[s.key]; !keep {
		return nil, nil
	}
	if v, set := p.req.Config[s.key]; set && !sameDrive(v, foreignValue(vm, s, p.req.Claim)) {
		return nil, fmt.Errorf("'%s' is the KubeVirt disk '%s', which was not made through this API: it can be detached or removed (delete, unlink), not changed or replaced", s.key, d.Name)
	}
	if setBoot {
		d.BootOrder = nil
		if o, ok := p.boot[s.key]; ok {
			d.BootOrder = &o
		}
	}
	return &d, nil
}

// managedKeys are the disk keys of the config that are not foreign
// disks', in PVE's order (scsi2 before scsi10).
func (p *drivePlan) managedKeys() []string {
	var keys []string
	for k := range p.cfg {
		if diskKeyRE.MatchString(k) && !p.foreignKey[k] {
			keys = append(keys, k)
		}
	}
	sortIndexed(keys)
	return keys
}

// mapDrive maps disk key k onto a disk and its volume, and stores its
// value normalised: a cloud-init drive, a CD-ROM or a disk. An empty
// CD-ROM drive has no KubeVirt form; the config keeps it.
func (p *drivePlan) mapDrive(k string) {
	d, err := parseDrive(p.cfg[k])
	if err != nil {
		p.errs[k] = err.Error()
		return
	}
	bus := diskBus(k)
	var disk kubevirtv1.Disk
	var vol *kubevirtv1.Volume
	switch {
	case ciVolRE.MatchString(d.file):
		disk, vol, err = p.cloudInitDrive(k, d, bus)
	case d.opts["media"] == "cdrom":
		if d.file == "none" || d.file == "cdrom" {
			return
		}
		disk, vol, err = p.cdromDrive(k, d, bus)
	default:
		disk, vol, err = p.diskDrive(k, d, bus)
	}
	if err != nil {
		p.errs[k] = err.Error()
		return
	}
	disk.Name = k
	if o, ok := p.boot[k]; ok {
		disk.BootOrder = &o
	}
	p.disks = append(p.disks, disk)
	p.vols = append(p.vols, *vol)
	p.cfg[k] = d.String()
}

// cloudInitDrive maps PVE's cloud-init drive onto a CD-ROM with a NoCloud
// (or, for citype=configdrive2, ConfigDrive) volume reading the VM's
// cloud-init Secret. A VM has one.
func (p *drivePlan) cloudInitDrive(k string, d *drive, bus kubevirtv1.DiskBus) (kubevirtv1.Disk, *kubevirtv1.Volume, error) {
	m := ciVolRE.FindStringSubmatch(d.file)
	if p.req.StorageExists != nil && !p.req.StorageExists(m[1]) && !p.fileStorage(m[1]) {
		return kubevirtv1.Disk{}, nil, fmt.Errorf("storage '%s' does not exist", m[1])
	}
	if p.ciDrive != "" {
		return kubevirtv1.Disk{}, nil, fmt.Errorf("only one cloud-init drive is allowed (already on %s)", p.ciDrive)
	}
	p.ciDrive = k
	disk := kubevirtv1.Disk{DiskDevice: kubevirtv1.DiskDevice{CDRom: &kubevirtv1.CDRomTarget{Bus: cdromBus(bus)}}}
	d.file = m[1] + ":" + CloudInitSecretName(p.req.VMID)
	d.set("media", "cdrom")
	return disk, cloudInitVolume(k, p.req.VMID, p.cfg["citype"]), nil
}

// cloudInitVolume is the cloud-init volume of the VM's Secret.
func cloudInitVolume(k string, vmid int, citype string) *kubevirtv1.Volume {
	user := &corev1.LocalObjectReference{Name: CloudInitSecretName(vmid)}
	network := &corev1.LocalObjectReference{Name: CloudInitSecretName(vmid)}
	if citype == "configdrive2" {
		return &kubevirtv1.Volume{Name: k, VolumeSource: kubevirtv1.VolumeSource{CloudInitConfigDrive: &kubevirtv1.CloudInitConfigDriveSource{UserDataSecretRef: user, NetworkDataSecretRef: network}}}
	}
	return &kubevirtv1.Volume{Name: k, VolumeSource: kubevirtv1.VolumeSource{CloudInitNoCloud: &kubevirtv1.CloudInitNoCloudSource{UserDataSecretRef: user, NetworkDataSecretRef: network}}}
}

// cdromDrive maps "<storage>:iso/<file>" onto a CD-ROM reading the ISO
// image's claim (ISOClaimName) read-only; the drive shows the image's
// size, as PVE does.
func (p *drivePlan) cdromDrive(k string, d *drive, bus kubevirtv1.DiskBus) (kubevirtv1.Disk, *kubevirtv1.Volume, error) {
	m := isoRE.FindStringSubmatch(d.file)
	if m == nil {
		return kubevirtv1.Disk{}, nil, fmt.Errorf("invalid CD-ROM volume '%s': use '<storage>:iso/<file>', 'none' or 'cdrom'", d.file)
	}
	claim := ISOClaimName(m[2])
	size, ok := int64(0), false
	if p.req.ISOSize != nil {
		size, ok = p.req.ISOSize(claim)
	}
	if !ok {
		return kubevirtv1.Disk{}, nil, fmt.Errorf("volume '%s' does not exist (expected a PVC '%s' in namespace '%s')", d.file, claim, p.req.Namespace)
	}
	if size > 0 {
		d.set("size", FormatSize(size))
	}
	disk := kubevirtv1.Disk{DiskDevice: kubevirtv1.DiskDevice{CDRom: &kubevirtv1.CDRomTarget{Bus: cdromBus(bus)}}}
	vol := &kubevirtv1.Volume{Name: k, VolumeSource: kubevirtv1.VolumeSource{PersistentVolumeClaim: &kubevirtv1.PersistentVolumeClaimVolumeSource{
		PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: true},
	}}}
	return disk, vol, nil
}

// diskDrive maps a disk drive onto a disk of the key's bus (diskTarget)
// and the claim diskClaim finds or makes for it.
func (p *drivePlan) diskDrive(k string, d *drive, bus kubevirtv1.DiskBus) (kubevirtv1.Disk, *kubevirtv1.Volume, error) {
	disk, err := diskTarget(bus, d)
	if err != nil {
		return kubevirtv1.Disk{}, nil, err
	}
	name, asDV, err := p.diskClaim(d)
	if err != nil {
		return kubevirtv1.Disk{}, nil, err
	}
	p.used[name] = true
	return disk, claimVolume(k, name, asDV), nil
}

// diskTarget is the KubeVirt disk for a drive on bus, with the drive
// options KubeVirt has: iothread (a dedicated I/O thread), cache and
// serial (see diskSerial).
func diskTarget(bus kubevirtv1.DiskBus, d *drive) (kubevirtv1.Disk, error) {
	disk := kubevirtv1.Disk{DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: bus}}}
	// KubeVirt gives I/O threads to virtio disks only; its VM webhook
	// refuses dedicatedIOThread on any other bus ("IOThreads are not
	// supported for disks on a scsi bus"). PVE's iothread=1 on SCSI (the
	// GUI default with virtio-scsi-single) stays in the config, as on PVE,
	// and maps to nothing.
	if d.opts["iothread"] == "1" && bus == kubevirtv1.DiskBusVirtio {
		t := true
		disk.DedicatedIOThread = &t
	}
	if c := d.opts["cache"]; c == "none" || c == "writethrough" || c == "writeback" {
		disk.Cache = kubevirtv1.DriverCache(c)
	}
	serial, err := diskSerial(d.opts["serial"])
	disk.Serial = serial
	return disk, err
}

// diskSerial is the serial KubeVirt gives the guest for PVE's serial=,
// which is url-encoded (qemu-server's "urlencoded" format, at most 60
// characters) and decoded for QEMU. KubeVirt's VM webhook accepts only
// serials made of [A-Za-z0-9_.+-]; a value whose decoded form has any
// other character is refused here, saying why, rather than changed into
// a serial the guest would not know.
func diskSerial(v string) (string, error) {
	switch {
	case v == "":
		return "", nil
	case len(v) > 60:
		return "", fmt.Errorf("invalid format - serial: value may only be 60 characters long")
	case !urlencodedRE.MatchString(v):
		return "", fmt.Errorf("invalid format - serial: invalid urlencoded string: %s", v)
	}
	dec, err := url.PathUnescape(v)
	if err != nil {
		return "", fmt.Errorf("invalid format - serial: invalid urlencoded string: %s", v)
	}
	if !kubevirtSerialRE.MatchString(dec) {
		return "", fmt.Errorf("serial '%s' is not supported: KubeVirt takes only the characters A-Z, a-z, 0-9, '_', '.', '+' and '-' in a disk serial", dec)
	}
	return dec, nil
}

var (
	// urlencodedRE is pve_verify_urlencoded's pattern.
	urlencodedRE = regexp.MustCompile(`^[-%a-zA-Z0-9_.!~*'()]*$`)
	// kubevirtSerialRE is what KubeVirt's webhook accepts as a disk
	// serial (pkg/storage/admitters/disks.go).
	kubevirtSerialRE = regexp.MustCompile(`^[A-Za-z0-9_.+-]+$`)
)

// claimVolume is the volume of disk k on claim name: a dataVolume volume
// for a DataVolume (so KubeVirt waits for it to be filled), else the PVC.
func claimVolume(k, name string, asDV bool) *kubevirtv1.Volume {
	if asDV {
		return &kubevirtv1.Volume{Name: k, VolumeSource: kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: name}}}
	}
	return &kubevirtv1.Volume{Name: k, VolumeSource: kubevirtv1.VolumeSource{PersistentVolumeClaim: &kubevirtv1.PersistentVolumeClaimVolumeSource{
		PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: name},
	}}}
}

// diskClaim is the claim a disk drive's volume names, and whether it is
// attached as a DataVolume: a new one copied from import-from, a new
// blank one for "<storage>:<GiB>", or one the VM owns, named.
func (p *drivePlan) diskClaim(d *drive) (name string, asDV bool, err error) {
	if imp, ok := d.opts["import-from"]; ok && newDiskRE.MatchString(d.file) {
		name, err = p.importDisk(d, imp)
		return name, true, err
	}
	if m := newDiskRE.FindStringSubmatch(d.file); m != nil {
		name, err = p.blankDisk(d, m[2], m[3])
		return name, true, err
	}
	if st, name, ok := strings.Cut(d.file, ":"); ok && st != "" && p.owned[ClaimOfVolume(name)] != nil {
		return p.reattach(d, ClaimOfVolume(name))
	}
	return "", false, p.unknownVolume(d)
}

// importDisk adds a DataVolume template cloned from import-from, a volume
// of this cluster (a claim of the same namespace), at least as large as
// the source, and names it in the drive.
func (p *drivePlan) importDisk(d *drive, imp string) (string, error) {
	m := newDiskRE.FindStringSubmatch(d.file)
	src := strings.SplitN(imp, ":", 2)
	if len(src) == 2 {
		// An image of the directory storage is the claim holding it.
		if f, ok := strings.CutPrefix(src[1], ContentImport+"/"); ok && f != "" && !strings.Contains(f, "/") {
			src[1] = FileClaimName(ContentImport, f)
		}
	}
	if len(src) != 2 || strings.Contains(src[1], "/") || m[2] == "" {
		return "", fmt.Errorf("import-from '%s': only volumes of this cluster ('<storage>:<volume>' or '<storage>:import/<file>') can be imported", imp)
	}
	storage := m[2]
	if err := p.diskStorage(storage); err != nil {
		return "", err
	}
	bytes := gibBytes(m[3])
	if p.req.Claim != nil {
		ci, ok := p.req.Claim.get(src[1])
		if !ok {
			return "", fmt.Errorf("import-from: volume '%s' does not exist", imp)
		}
		switch t, own := p.templates[src[1]]; {
		case ci.ImageBytes > 0:
			bytes = max(bytes, ci.ImageBytes)
		case own && DataVolumeSize(t) > 0:
			// One of the VM's disks (move_disk): its size, not its
			// claim's, which CDI gave room for the filesystem.
			bytes = max(bytes, DataVolumeSize(t))
		default:
			bytes = max(bytes, ci.Bytes)
		}
	}
	bytes = wholeMiB(bytes)
	name, err := p.newVolume()
	if err != nil {
		return "", err
	}
	p.addTemplate(importTemplate(name, storage, p.req.Namespace, src[1], bytes), storage)
	if bytes > 0 {
		d.set("size", FormatSize(bytes))
	}
	delete(d.opts, "import-from")
	d.file = storage + ":" + name
	return name, nil
}

// blankDisk adds a blank DataVolume template of gib GiB on storage (whole
// MiB, as PVE allocates) and names it in the drive.
func (p *drivePlan) blankDisk(d *drive, storage, gib string) (string, error) {
	if storage == "" {
		return "", fmt.Errorf("missing storage ID in '%s'", d.file)
	}
	if err := p.diskStorage(storage); err != nil {
		return "", err
	}
	bytes := gibBytes(gib)
	if bytes <= 0 {
		return "", errors.New("disk size must be greater than zero")
	}
	bytes = wholeMiB(bytes)
	name, err := p.newVolume()
	if err != nil {
		return "", err
	}
	p.addTemplate(blankTemplate(name, storage, bytes), storage)
	d.file = storage + ":" + name
	d.set("size", FormatSize(bytes))
	return name, nil
}

// reattach attaches claim name of the VM (re-attached from unusedN, or
// kept under its key), once: two drives on one claim would corrupt it. A
// claim the call also deletes (its unusedN, or its old key with force) is
// moved, not deleted. The drive shows the claim's size.
func (p *drivePlan) reattach(d *drive, name string) (string, bool, error) {
	o := p.owned[name]
	if p.used[name] {
		return "", false, fmt.Errorf("volume '%s' is already used by another drive", d.file)
	}
	delete(p.chg.destroy, name)
	size := int64(0)
	if o.template {
		size = DataVolumeSize(p.templates[name])
	}
	if ci, ok := p.req.Claim.get(name); ok && size == 0 {
		size = ci.Bytes
	}
	if size > 0 {
		d.set("size", FormatSize(size))
	}
	return name, o.dv, nil
}

// unknownVolume says why a drive's volume is none the VM may use: a claim
// of another VM, one of this VM's names that does not exist, or not a
// volume at all.
func (p *drivePlan) unknownVolume(d *drive) error {
	st, name, ok := strings.Cut(d.file, ":")
	_, claimed := p.req.Claim.get(ClaimOfVolume(name))
	switch {
	case ok && st != "" && claimed:
		return fmt.Errorf("volume '%s' is not a volume of VM %d", d.file, p.req.VMID)
	case ownVolRE.MatchString(d.file):
		return fmt.Errorf("volume '%s' does not exist", d.file)
	}
	return fmt.Errorf("unable to parse volume '%s': use '<storage>:<size in GiB>' for a new disk or '<storage>:vm-<vmid>-disk-<n>' for an existing one", d.file)
}

// newVolume is the first vm-<id>-disk-<n> nothing in the namespace uses:
// no claim of the VM, none the call deletes, none VolumeTaken reports.
func (p *drivePlan) newVolume() (string, error) {
	return freeVolumeName(p.req.VMID, &p.next, func(name string) bool { return p.owned[name] != nil || p.chg.destroy[name] }, p.req.VolumeTaken)
}

// fileStorage tells whether storage keeps files only (VMRequest.FileStorage).
func (p *drivePlan) fileStorage(storage string) bool {
	return p.req.FileStorage != nil && p.req.FileStorage(storage)
}

// diskStorage checks that a new disk may go to storage, in PVE's words.
func (p *drivePlan) diskStorage(storage string) error {
	switch {
	case p.fileStorage(storage):
		return fmt.Errorf("storage '%s' does not support vm images", storage)
	case p.req.StorageExists != nil && !p.req.StorageExists(storage):
		return fmt.Errorf("storage '%s' does not exist", storage)
	}
	return nil
}

// addTemplate records a new DataVolume template as one the VM owns.
func (p *drivePlan) addTemplate(t kubevirtv1.DataVolumeTemplateSpec, storage string) {
	p.templates[t.Name] = t
	p.owned[t.Name] = &ownedClaim{storage: storage, template: true, dv: true}
}

// gibBytes is a size in GiB (qemu-server's NEW_DISK_RE allows decimals)
// in bytes.
func gibBytes(gib string) int64 {
	f, _ := strconv.ParseFloat(gib, 64)
	return int64(f * (1 << 30))
}

// wholeMiB rounds bytes up to whole MiB.
func wholeMiB(bytes int64) int64 { return (bytes + (1<<20 - 1)) &^ (1<<20 - 1) }

// blankTemplate is a DataVolume template for a new empty disk.
func blankTemplate(name, storage string, bytes int64) kubevirtv1.DataVolumeTemplateSpec {
	sc := storage
	return kubevirtv1.DataVolumeTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: cdiv1.DataVolumeSpec{
			Source: &cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}},
			Storage: &cdiv1.StorageSpec{
				StorageClassName: &sc,
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(bytes, resource.BinarySI)}},
			},
		},
	}
}

// importTemplate is a DataVolume template cloned from claim src of
// namespace ns; bytes 0 leaves the size to CDI (the source's).
func importTemplate(name, storage, ns, src string, bytes int64) kubevirtv1.DataVolumeTemplateSpec {
	sc := storage
	st := &cdiv1.StorageSpec{StorageClassName: &sc}
	if bytes > 0 {
		st.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(bytes, resource.BinarySI)}
	}
	return kubevirtv1.DataVolumeTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: cdiv1.DataVolumeSpec{
			Source:  &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: ns, Name: src}},
			Storage: st,
		},
	}
}

// settleUnused gives every claim the VM owns that no drive uses after the
// write its unusedN (see unusedEntries), and records those the call
// destroys in chg.
func (p *drivePlan) settleUnused() {
	prev := keptUnusedKeys(p.stored, p.cfg)
	unused, destroyed := unusedEntries(p.owned, p.used, p.chg.destroy, prev)
	for k, v := range unused {
		p.cfg[k] = v
	}
	p.chg.destroyed = append(p.chg.destroyed, destroyed...)
}

// keptUnusedKeys removes every unusedN from cfg, the config after the
// write, and returns the key each unchanged one had, by claim: an unusedN
// keeps its key, as on PVE, so that a repeated delete of unused0 cannot
// free the volume that would otherwise move into it.
func keptUnusedKeys(stored, cfg map[string]string) map[string]string {
	prev := map[string]string{}
	for _, k := range orderedKeys(cfg) {
		if !strings.HasPrefix(k, "unused") {
			continue
		}
		if v, ok := stored[k]; ok && v == cfg[k] {
			if n := unusedVolume(v); n != "" && prev[n] == "" {
				prev[n] = k
			}
		}
		delete(cfg, k)
	}
	return prev
}

// unusedEntries decides what becomes of each owned claim no drive uses
// (used): destroyed when the call deletes it for good (destroy), else
// PVE's unusedN, whose data is kept until the key is deleted — under the
// key it had (prev), or the lowest free one, in claim name order.
// unused maps the unusedN keys to their "<storage>:<claim>" values.
func unusedEntries(owned map[string]*ownedClaim, used, destroy map[string]bool, prev map[string]string) (unused map[string]string, destroyed []string) {
	unused = map[string]string{}
	var fresh []string
	for _, n := range orderedKeys(owned) {
		switch {
		case used[n]:
		case destroy[n]:
			destroyed = append(destroyed, n)
		case prev[n] != "":
			unused[prev[n]] = owned[n].storage + ":" + n
		default:
			fresh = append(fresh, n)
		}
	}
	i := 0
	for _, n := range fresh {
		for unused["unused"+strconv.Itoa(i)] != "" {
			i++
		}
		unused["unused"+strconv.Itoa(i)] = owned[n].storage + ":" + n
		i++
	}
	return unused, destroyed
}

// keptTemplates are the DataVolume templates the VM keeps, in name order:
// those a volume of vols still uses and the call does not destroy.
// KubeVirt's VM webhook refuses a template no volume references
// (ValidateDataVolumeTemplate), so a detached disk's template goes while
// its DataVolume stays, still owned by the VM (virt-controller never
// deletes the DataVolume of a template dropped) and named by its unusedN.
func keptTemplates(templates map[string]kubevirtv1.DataVolumeTemplateSpec, destroy map[string]bool, vols []kubevirtv1.Volume) []kubevirtv1.DataVolumeTemplateSpec {
	referenced := map[string]bool{}
	for _, v := range vols {
		switch {
		case v.DataVolume != nil:
			referenced[v.DataVolume.Name] = true
		case v.PersistentVolumeClaim != nil:
			referenced[v.PersistentVolumeClaim.ClaimName] = true
		}
	}
	var out []kubevirtv1.DataVolumeTemplateSpec
	for _, n := range orderedKeys(templates) {
		if !destroy[n] && referenced[n] {
			out = append(out, templates[n])
		}
	}
	return out
}

// write sets the VM's disks, volumes and DataVolume templates, and pins
// the keys of the foreign disks kept. Foreign disks are shown from the
// spec, never stored, so their keys leave the config.
func (p *drivePlan) write(vm *kubevirtv1.VirtualMachine) {
	for k := range p.foreignKey {
		delete(p.cfg, k)
	}
	var kept []specDisk
	for _, s := range p.sds {
		if !s.managed && p.keepVol[s.disk.Name] {
			kept = append(kept, s)
		}
	}
	pinDiskKeys(vm, kept)
	vm.Spec.DataVolumeTemplates = keptTemplates(p.templates, p.chg.destroy, p.vols)
	vm.Spec.Template.Spec.Domain.Devices.Disks = p.disks
	vm.Spec.Template.Spec.Volumes = p.vols
}
