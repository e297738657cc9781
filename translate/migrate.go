package translate

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// LabelHostname is the node label a hostname pin (nodeSelector, node
// affinity expression) and a migration's addedNodeSelector refer to.
const LabelHostname = "kubernetes.io/hostname"

// nodeNameField is the node field a node affinity matchFields term can
// select on.
const nodeNameField = "metadata.name"

// NodeRef names a Kubernetes node the two ways a pin can refer to it: its
// object name (matchFields on metadata.name) and its kubernetes.io/hostname
// label (nodeSelector and matchExpressions). Hostname defaults to Name.
type NodeRef struct {
	Name     string
	Hostname string
}

func (n NodeRef) hostname() string {
	if n.Hostname != "" {
		return n.Hostname
	}
	return n.Name
}

// RepinNode moves the node pins of a VM template from one node to
// another, so that a VM pinned to its PVE node stays pinned to it after a
// migration: a nodeSelector kubernetes.io/hostname=<from>, and the values
// <from> of In expressions on kubernetes.io/hostname (required and
// preferred node affinity terms) and of In matchFields on metadata.name
// become <to>. Pins of other nodes, other labels and other operators are
// left alone (NodeAllowed then tells whether the result admits <to>). It
// reports whether anything changed.
func RepinNode(spec *kubevirtv1.VirtualMachineInstanceSpec, from, to NodeRef) bool {
	if spec == nil || from.Name == "" || to.Name == "" {
		return false
	}
	changed := false
	if spec.NodeSelector[LabelHostname] == from.hostname() && from.hostname() != to.hostname() {
		spec.NodeSelector[LabelHostname] = to.hostname()
		changed = true
	}
	term := func(t *corev1.NodeSelectorTerm) {
		for i := range t.MatchExpressions {
			e := &t.MatchExpressions[i]
			if e.Key == LabelHostname && e.Operator == corev1.NodeSelectorOpIn {
				changed = replaceValue(&e.Values, from.hostname(), to.hostname()) || changed
			}
		}
		for i := range t.MatchFields {
			e := &t.MatchFields[i]
			if e.Key == nodeNameField && e.Operator == corev1.NodeSelectorOpIn {
				changed = replaceValue(&e.Values, from.Name, to.Name) || changed
			}
		}
	}
	if spec.Affinity != nil && spec.Affinity.NodeAffinity != nil {
		na := spec.Affinity.NodeAffinity
		if na.RequiredDuringSchedulingIgnoredDuringExecution != nil {
			for i := range na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
				term(&na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[i])
			}
		}
		for i := range na.PreferredDuringSchedulingIgnoredDuringExecution {
			term(&na.PreferredDuringSchedulingIgnoredDuringExecution[i].Preference)
		}
	}
	return changed
}

// replaceValue replaces from by to in vals (dropping a duplicate to).
func replaceValue(vals *[]string, from, to string) bool {
	if from == to {
		return false
	}
	i := -1
	for j, v := range *vals {
		if v == from {
			i = j
		}
	}
	if i < 0 {
		return false
	}
	out := make([]string, 0, len(*vals))
	for j, v := range *vals {
		switch {
		case j == i:
			out = append(out, to)
		case v == to || v == from:
		default:
			out = append(out, v)
		}
	}
	*vals = out
	return true
}

// NodeAllowed tells whether a VM template's placement constraints admit a
// node (its object name and labels): the nodeSelector, and the required
// node affinity (any of its terms). Taints, resources and preferred
// affinity are the scheduler's business, not a pin.
func NodeAllowed(spec *kubevirtv1.VirtualMachineInstanceSpec, name string, labels map[string]string) bool {
	if spec == nil {
		return true
	}
	for k, v := range spec.NodeSelector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	if spec.Affinity == nil || spec.Affinity.NodeAffinity == nil || spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	terms := spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 {
		return true
	}
	for _, t := range terms {
		if termAdmits(t, name, labels) {
			return true
		}
	}
	return false
}

// termAdmits is the scheduler's reading of one node selector term: all of
// its requirements hold, and an empty term admits nothing.
func termAdmits(t corev1.NodeSelectorTerm, name string, labels map[string]string) bool {
	if len(t.MatchExpressions) == 0 && len(t.MatchFields) == 0 {
		return false
	}
	for _, e := range t.MatchExpressions {
		v, has := labels[e.Key]
		if !requirementHolds(e, v, has) {
			return false
		}
	}
	for _, e := range t.MatchFields {
		if e.Key != nodeNameField || !requirementHolds(e, name, true) {
			return false
		}
	}
	return true
}

func requirementHolds(e corev1.NodeSelectorRequirement, v string, has bool) bool {
	in := false
	for _, x := range e.Values {
		in = in || x == v
	}
	switch e.Operator {
	case corev1.NodeSelectorOpIn:
		return has && in
	case corev1.NodeSelectorOpNotIn:
		return !has || !in
	case corev1.NodeSelectorOpExists:
		return has
	case corev1.NodeSelectorOpDoesNotExist:
		return !has
	case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
		if !has || len(e.Values) != 1 {
			return false
		}
		a, err1 := strconv.ParseInt(v, 10, 64)
		b, err2 := strconv.ParseInt(e.Values[0], 10, 64)
		if err1 != nil || err2 != nil {
			return false
		}
		if e.Operator == corev1.NodeSelectorOpGt {
			return a > b
		}
		return a < b
	}
	return false
}

// StorageMap is PVE's targetstorage parameter (pve-storage-pair-list): a
// storage for every source storage (Default), per-source targets
// (Entries), or each storage mapped to itself (Identity, the value "1").
type StorageMap struct {
	Identity bool
	Default  string
	Entries  map[string]string
}

// ParseStorageMap parses a targetstorage value the way pve-common's
// parse_idmap does for storage ids: a list (split on commas, semicolons,
// white space or NULs) of "1", "<source>:<target>" pairs and at most one
// lone default target; "1" cannot be combined with anything else. The
// error texts are PVE's.
func ParseStorageMap(s string) (StorageMap, error) {
	var m StorageMap
	for _, entry := range SplitList(s) {
		if entry == "" {
			continue // an empty NUL-separated part names nothing
		}
		switch src, dst, pair := strings.Cut(entry, ":"); {
		case entry == "1":
			m.Identity = true
		case pair && src != "" && dst != "" && !strings.Contains(dst, ":"):
			if !storageIDRE.MatchString(src) || !storageIDRE.MatchString(dst) {
				return StorageMap{}, fmt.Errorf("entry '%s' contains invalid ID - value does not look like a valid storage ID", entry)
			}
			if _, dup := m.Entries[src]; dup {
				return StorageMap{}, fmt.Errorf("duplicate mapping for source '%s'", src)
			}
			if m.Entries == nil {
				m.Entries = map[string]string{}
			}
			m.Entries[src] = dst
		default:
			if !storageIDRE.MatchString(entry) {
				return StorageMap{}, fmt.Errorf("entry '%s' contains invalid ID - value does not look like a valid storage ID", entry)
			}
			if m.Default != "" {
				return StorageMap{}, fmt.Errorf("default target ID can only be provided once")
			}
			m.Default = entry
		}
	}
	if m.Identity && (m.Default != "" || len(m.Entries) > 0) {
		return StorageMap{}, fmt.Errorf("identity mapping cannot be combined with other mappings")
	}
	return m, nil
}

// Target is the storage a volume on source goes to.
func (m StorageMap) Target(source string) string {
	if t, ok := m.Entries[source]; ok {
		return t
	}
	if m.Default != "" {
		return m.Default
	}
	return source
}

// ConfigVolume is a volume a PVE config refers to, with the attributes
// qemu-server's foreach_volid reports for it.
type ConfigVolume struct {
	VolID     string
	Storage   string // "" for a path or a volume without a storage
	DriveName string // the config key (scsi0, unused1, efidisk0, ...)
	Size      int64  // bytes, from size=; 0 when unknown
	CDROM     bool
	CloudInit bool
	Unused    bool
}

// ConfigVolumes lists the volumes of a PVE config (disks, CD-ROMs with
// media, cloud-init drives, EFI and TPM disks, unusedN) in key order.
// Empty CD-ROM drives ("none", "cdrom") hold no volume.
func ConfigVolumes(cfg map[string]string) []ConfigVolume {
	keys := make([]string, 0, len(cfg))
	for k := range cfg {
		if privDiskKeyRE.MatchString(k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var out []ConfigVolume
	for _, k := range keys {
		v := ConfigVolume{DriveName: k, Unused: strings.HasPrefix(k, "unused")}
		if v.Unused {
			v.VolID = strings.TrimSpace(cfg[k])
		} else {
			d, err := parseDrive(cfg[k])
			if err != nil || d.file == "none" || d.file == "cdrom" {
				continue
			}
			v.VolID = d.file
			v.CDROM = d.opts["media"] == "cdrom"
			if s, ok := d.opts["size"]; ok {
				v.Size, _ = ParseDiskSize(s)
			}
		}
		if v.VolID == "" {
			continue
		}
		v.CloudInit = ciVolRE.MatchString(v.VolID)
		if st, _, ok := strings.Cut(v.VolID, ":"); ok && !strings.HasPrefix(v.VolID, "/") {
			v.Storage = st
		}
		out = append(out, v)
	}
	return out
}
