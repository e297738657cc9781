package translate

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// CloneRequest describes POST …/clone.
type CloneRequest struct {
	NewID       int
	Node        string // target node (PVE's target=, else the source's)
	Namespace   string // target pool
	Name        string // new name; PVE's default is "Copy-of-VM-<name>"
	Description string
	// Storage overrides the StorageClass of every cloned disk.
	Storage   string
	NameTaken func(name string) bool
	// NewUUID draws a fresh UUID (PVE's generate_uuid) for the clone's
	// smbios1 uuid and vmgenid; nil draws random ones.
	NewUUID func() string
	// VolumeTaken reports claim names in use in Namespace (see
	// VMRequest.VolumeTaken): the clone's disks never take one.
	VolumeTaken func(name string) (bool, error)
}

// storageIDRE is PVE's pve-storage-id format.
var storageIDRE = regexp.MustCompile(`^(?i:[a-z][a-z0-9\-_.]*[a-z0-9])$`)

// CloneVM builds the VM a clone of src creates: the same hardware, new
// MACs, and every disk a DataVolume cloned from the source's claim (CDI
// picks a CSI clone or snapshot where the storage can, a copy otherwise).
func CloneVM(src *kubevirtv1.VirtualMachine, req CloneRequest) (*kubevirtv1.VirtualMachine, map[string]string) {
	errs := map[string]string{}
	if src.Spec.Template == nil {
		errs["vmid"] = "the source VM has no template"
		return nil, errs
	}
	cfg := StoredConfig(src)
	name := cloneName(src, cfg, req.Name)
	if !dnsNameRE.MatchString(name) || len(name) > 253 {
		errs["name"] = "invalid format - value does not look like a valid DNS name"
	}
	if req.Storage != "" && !storageIDRE.MatchString(req.Storage) {
		errs["storage"] = fmt.Sprintf("invalid format - value '%s' does not look like a valid storage ID", req.Storage)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	spec := src.Spec.Template.Spec.DeepCopy()
	cloneIdentity(spec, cfg, req, name)
	cloneMACs(spec, cfg, req)
	dvs, renamed, err := cloneVolumes(src, spec, req)
	if err != nil {
		errs["newid"] = err.Error()
		return nil, errs
	}
	cloneDiskKeys(cfg, renamed, req)
	delete(cfg, "template")
	cfg["name"] = name
	if req.Description != "" {
		cfg["description"] = req.Description
	}
	rs := kubevirtv1.RunStrategyManual
	id := strconv.Itoa(req.NewID)
	annotations := map[string]string{
		AnnotationNode: req.Node, AnnotationName: name, AnnotationConfig: EncodeConfig(cfg), AnnotationLock: LockClone,
	}
	// The clone keeps the disks' keys: the same disks, the same names.
	if pins := src.Annotations[AnnotationDiskKeys]; pins != "" {
		annotations[AnnotationDiskKeys] = pins
	}
	vm := &kubevirtv1.VirtualMachine{
		TypeMeta: metav1.TypeMeta{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine"},
		ObjectMeta: metav1.ObjectMeta{
			Name: freeKubeName(name, req.NewID, req.NameTaken), Namespace: req.Namespace,
			Labels:      map[string]string{LabelVMID: id},
			Annotations: annotations,
		},
		Spec: kubevirtv1.VirtualMachineSpec{
			RunStrategy:         &rs,
			DataVolumeTemplates: dvs,
			Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{LabelVMID: id}},
				Spec:       *spec,
			},
		},
	}
	return vm, nil
}

// cloneName is the clone's PVE name: the one asked for, else PVE's
// default "Copy-of-VM-<source name>".
func cloneName(src *kubevirtv1.VirtualMachine, cfg map[string]string, asked string) string {
	if asked != "" {
		return asked
	}
	// qemu-server: the source's name, else its vmid; a VM made outside
	// the API shows its object name as its name.
	n := cfg["name"]
	if _, made := src.Annotations[AnnotationConfig]; n == "" && made {
		n = src.Labels[LabelVMID]
	}
	if n == "" {
		n = src.Name
	}
	return "Copy-of-VM-" + n
}

// cloneIdentity gives the clone its own identity, like PVE's clone_vm:
// always a new smbios1 uuid (the other smbios1 fields kept), a new
// vmgenid when the source has one. The firmware UUID is the SMBIOS UUID
// KubeVirt gives the guest, so it is the same; the firmware serial, the
// source's, goes. A hostname the source had follows the new name.
func cloneIdentity(spec *kubevirtv1.VirtualMachineInstanceSpec, cfg map[string]string, req CloneRequest, name string) {
	newUUID := req.NewUUID
	if newUUID == nil {
		newUUID = uuid.NewString
	}
	smbiosUUID := newUUID()
	cfg["smbios1"] = withSMBIOSUUID(cfg["smbios1"], smbiosUUID)
	if v := cfg["vmgenid"]; v != "" && v != "0" {
		cfg["vmgenid"] = newUUID()
	}
	if spec.Domain.Firmware == nil {
		spec.Domain.Firmware = &kubevirtv1.Firmware{}
	}
	spec.Domain.Firmware.UUID = types.UID(smbiosUUID)
	spec.Domain.Firmware.Serial = ""
	if spec.Hostname != "" {
		spec.Hostname = KubeName(strings.SplitN(name, ".", 2)[0], req.NewID)
	}
}

// cloneMACs gives every NIC the MAC derived from the clone's namespace,
// vmid and key (as a new VM's), written back into the netN strings.
func cloneMACs(spec *kubevirtv1.VirtualMachineInstanceSpec, cfg map[string]string, req CloneRequest) {
	for i := range spec.Domain.Devices.Interfaces {
		iface := &spec.Domain.Devices.Interfaces[i]
		mac := GenerateMAC([]byte(fmt.Sprintf("%s/%d/%s", req.Namespace, req.NewID, iface.Name)))
		iface.MacAddress = mac
		if v, ok := cfg[iface.Name]; ok {
			if ns, err := ParseNetSpec(v); err == nil {
				ns.MAC = mac
				cfg[iface.Name] = ns.String()
			}
		}
	}
}

// cloneVolumes makes every disk of spec that keeps data on a claim of src
// (a DataVolume, a writable PVC) a DataVolume cloned from it, named
// vm-<newid>-disk-<n>, with the source template's StorageClass and size
// unless req.Storage overrides the class. Cloud-init volumes read the
// clone's Secret; read-only ISOs and other sources are shared, not
// copied. renamed maps each source claim to its copy.
func cloneVolumes(src *kubevirtv1.VirtualMachine, spec *kubevirtv1.VirtualMachineInstanceSpec, req CloneRequest) (dvs []kubevirtv1.DataVolumeTemplateSpec, renamed map[string]string, err error) {
	renamed = map[string]string{} // old volume (DV or PVC) name -> new DV name
	oldDV := map[string]kubevirtv1.DataVolumeTemplateSpec{}
	for _, dv := range src.Spec.DataVolumeTemplates {
		oldDV[dv.Name] = dv
	}
	n := 0
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		if cloneCloudInit(v, req.NewID) {
			continue
		}
		claim, sc, size := cloneSource(v, oldDV)
		if claim == "" {
			continue
		}
		newName, err := freeVolumeName(req.NewID, &n, nil, req.VolumeTaken)
		if err != nil {
			return nil, nil, err
		}
		renamed[claim] = newName
		if req.Storage != "" {
			s := req.Storage
			sc = &s
		}
		storage := &cdiv1.StorageSpec{StorageClassName: sc}
		if size != nil {
			storage.Resources.Requests = size.DeepCopy()
		}
		dvs = append(dvs, kubevirtv1.DataVolumeTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Name: newName},
			Spec: cdiv1.DataVolumeSpec{
				Source:  &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: src.Namespace, Name: claim}},
				Storage: storage,
			},
		})
		v.VolumeSource = kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: newName}}
	}
	return dvs, renamed, nil
}

// cloneSource is the claim volume v keeps data on, to be copied ("" for
// none), with the StorageClass and size of its DataVolume template.
func cloneSource(v *kubevirtv1.Volume, templates map[string]kubevirtv1.DataVolumeTemplateSpec) (claim string, sc *string, size corev1.ResourceList) {
	switch {
	case v.DataVolume != nil:
		claim = v.DataVolume.Name
		if dv, ok := templates[claim]; ok && dv.Spec.Storage != nil {
			sc, size = dv.Spec.Storage.StorageClassName, dv.Spec.Storage.Resources.Requests
		}
	case v.PersistentVolumeClaim != nil && !v.PersistentVolumeClaim.ReadOnly:
		claim = v.PersistentVolumeClaim.ClaimName
	}
	return claim, sc, size
}

// cloneCloudInit points the parts of a cloud-init volume (user data,
// network data) that read this API's Secret at the clone's own Secret,
// which is rendered for it from the copied config and its new MACs; false
// for any other volume. Data the source has of its own — inline, or in a
// Secret of the user's — is kept as it is, as PVE's clone keeps cicustom
// snippets: a part never gets both inline data and a Secret, which
// KubeVirt's VM webhook refuses ("must have only one userdatasource set").
func cloneCloudInit(v *kubevirtv1.Volume, newID int) bool {
	ref := &corev1.LocalObjectReference{Name: CloudInitSecretName(newID)}
	switch c := v.VolumeSource; {
	case c.CloudInitNoCloud != nil:
		cloneCloudInitPart(&c.CloudInitNoCloud.UserDataSecretRef, ref)
		cloneCloudInitPart(&c.CloudInitNoCloud.NetworkDataSecretRef, ref)
		return true
	case c.CloudInitConfigDrive != nil:
		cloneCloudInitPart(&c.CloudInitConfigDrive.UserDataSecretRef, ref)
		cloneCloudInitPart(&c.CloudInitConfigDrive.NetworkDataSecretRef, ref)
		return true
	}
	return false
}

// cloneCloudInitPart repoints a part's Secret reference at the clone's
// Secret when it names one of this API's.
func cloneCloudInitPart(secret **corev1.LocalObjectReference, clone *corev1.LocalObjectReference) {
	if *secret != nil && ciSecretRE.MatchString((*secret).Name) {
		*secret = clone
	}
}

// ciSecretRE matches the names of this API's cloud-init Secrets
// (CloudInitSecretName).
var ciSecretRE = regexp.MustCompile(`^vm-[0-9]+-cloudinit$`)

// cloneDiskKeys rewrites the volume ids in the disk keys to the copies
// (renamed) and drops what only the source has: disks on volumes of the
// source not copied, and unusedN (PVE does not clone unused disks
// either).
func cloneDiskKeys(cfg, renamed map[string]string, req CloneRequest) {
	for k, v := range cfg {
		switch {
		case strings.HasPrefix(k, "unused"):
			delete(cfg, k)
		case k == "efidisk0" || k == "tpmstate0":
			// The clone's EFI/TPM state is its own copy (its state claim),
			// named for its vmid as PVE's clone names the copied volumes.
			d, err := parseDrive(v)
			if err != nil {
				continue
			}
			st, _, _ := strings.Cut(d.file, ":")
			if req.Storage != "" {
				st = req.Storage
			}
			vol := EFIVolume(req.NewID)
			if k == "tpmstate0" {
				vol = TPMVolume(req.NewID)
			}
			d.file = st + ":" + vol
			cfg[k] = d.String()
		case diskKeyRE.MatchString(k):
			d, err := parseDrive(v)
			if err != nil {
				continue
			}
			if m := ciVolRE.FindStringSubmatch(d.file); m != nil {
				d.file = m[1] + ":" + CloudInitSecretName(req.NewID)
			} else if st, name, ok := strings.Cut(d.file, ":"); ok && renamed[ClaimOfVolume(name)] != "" {
				if req.Storage != "" {
					st = req.Storage
				}
				d.file = st + ":" + renamed[ClaimOfVolume(name)]
			} else if st, name, _ := strings.Cut(d.file, ":"); ownVolRE.MatchString(st + ":" + ClaimOfVolume(name)) {
				delete(cfg, k)
				continue
			}
			cfg[k] = d.String()
		}
	}
}

// smbios1Keys are the properties of PVE's smbios1 format.
var smbios1Keys = map[string]bool{"base64": true, "family": true, "manufacturer": true, "product": true,
	"serial": true, "sku": true, "uuid": true, "version": true}

// withSMBIOSUUID sets the uuid of an smbios1 value and prints it as PVE's
// print_property_string does: keys sorted, the base64 flag as 1 or 0. A
// value PVE could not parse keeps nothing but the uuid, as parse_smbios1
// then yields no fields.
func withSMBIOSUUID(smbios1, id string) string {
	fields := map[string]string{}
	for _, part := range strings.Split(smbios1, ",") {
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if _, dup := fields[k]; !ok || !smbios1Keys[k] || dup {
			fields = map[string]string{}
			break
		}
		fields[k] = v
	}
	if b, err := parseBoolOption("base64", fields); err == nil && b != nil {
		fields["base64"] = boolDigit(*b)
	}
	fields["uuid"] = id
	keys := orderedKeys(fields)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + fields[k]
	}
	return strings.Join(parts, ",")
}
