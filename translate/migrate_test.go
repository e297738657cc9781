package translate

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

func hostExpr(op corev1.NodeSelectorOperator, vals ...string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: LabelHostname, Operator: op, Values: vals}
}

func nameField(op corev1.NodeSelectorOperator, vals ...string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: op, Values: vals}
}

func required(terms ...corev1.NodeSelectorTerm) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}}
}

func preferred(terms ...corev1.NodeSelectorTerm) *corev1.Affinity {
	aff := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{}}
	for _, t := range terms {
		aff.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution = append(aff.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution,
			corev1.PreferredSchedulingTerm{Weight: 100, Preference: t})
	}
	return aff
}

func exprs(e ...corev1.NodeSelectorRequirement) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchExpressions: e}
}

func fields(e ...corev1.NodeSelectorRequirement) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchFields: e}
}

func TestRepinNode(t *testing.T) {
	from := NodeRef{Name: "n1.lab", Hostname: "n1"}
	to := NodeRef{Name: "n2.lab", Hostname: "n2"}
	tests := []struct {
		name      string
		in, want  kubevirtv1.VirtualMachineInstanceSpec
		changed   bool
		from, to_ NodeRef
	}{
		{name: "no pins", in: kubevirtv1.VirtualMachineInstanceSpec{}, want: kubevirtv1.VirtualMachineInstanceSpec{}},
		{name: "nodeSelector hostname",
			in:      kubevirtv1.VirtualMachineInstanceSpec{NodeSelector: map[string]string{LabelHostname: "n1", "zone": "a"}},
			want:    kubevirtv1.VirtualMachineInstanceSpec{NodeSelector: map[string]string{LabelHostname: "n2", "zone": "a"}},
			changed: true},
		{name: "nodeSelector of another node is kept",
			in:   kubevirtv1.VirtualMachineInstanceSpec{NodeSelector: map[string]string{LabelHostname: "n3"}},
			want: kubevirtv1.VirtualMachineInstanceSpec{NodeSelector: map[string]string{LabelHostname: "n3"}}},
		{name: "required In expression and field",
			in: kubevirtv1.VirtualMachineInstanceSpec{Affinity: required(
				exprs(hostExpr(corev1.NodeSelectorOpIn, "n1", "n3")),
				fields(nameField(corev1.NodeSelectorOpIn, "n1.lab")))},
			want: kubevirtv1.VirtualMachineInstanceSpec{Affinity: required(
				exprs(hostExpr(corev1.NodeSelectorOpIn, "n2", "n3")),
				fields(nameField(corev1.NodeSelectorOpIn, "n2.lab")))},
			changed: true},
		{name: "target already listed: no duplicate",
			in:      kubevirtv1.VirtualMachineInstanceSpec{Affinity: required(exprs(hostExpr(corev1.NodeSelectorOpIn, "n1", "n2")))},
			want:    kubevirtv1.VirtualMachineInstanceSpec{Affinity: required(exprs(hostExpr(corev1.NodeSelectorOpIn, "n2")))},
			changed: true},
		{name: "preferred, as the seeded VMs have",
			in:      kubevirtv1.VirtualMachineInstanceSpec{Affinity: preferred(exprs(hostExpr(corev1.NodeSelectorOpIn, "n1")))},
			want:    kubevirtv1.VirtualMachineInstanceSpec{Affinity: preferred(exprs(hostExpr(corev1.NodeSelectorOpIn, "n2")))},
			changed: true},
		{name: "NotIn and other keys are not pins",
			in: kubevirtv1.VirtualMachineInstanceSpec{Affinity: required(exprs(hostExpr(corev1.NodeSelectorOpNotIn, "n1"),
				corev1.NodeSelectorRequirement{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"n1"}}))},
			want: kubevirtv1.VirtualMachineInstanceSpec{Affinity: required(exprs(hostExpr(corev1.NodeSelectorOpNotIn, "n1"),
				corev1.NodeSelectorRequirement{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"n1"}}))}},
		{name: "hostname defaults to the name",
			in:   kubevirtv1.VirtualMachineInstanceSpec{NodeSelector: map[string]string{LabelHostname: "a"}},
			want: kubevirtv1.VirtualMachineInstanceSpec{NodeSelector: map[string]string{LabelHostname: "b"}},
			from: NodeRef{Name: "a"}, to_: NodeRef{Name: "b"}, changed: true},
	}
	for _, tt := range tests {
		f, tn := from, to
		if tt.from.Name != "" {
			f, tn = tt.from, tt.to_
		}
		spec := tt.in.DeepCopy()
		if got := RepinNode(spec, f, tn); got != tt.changed {
			t.Errorf("%s: changed = %v, want %v", tt.name, got, tt.changed)
		}
		if !reflect.DeepEqual(*spec, tt.want) {
			t.Errorf("%s: got %+v\nwant %+v", tt.name, spec, tt.want)
		}
	}
	if RepinNode(nil, from, to) {
		t.Error("nil spec changed")
	}
}

func TestNodeAllowed(t *testing.T) {
	labels := map[string]string{LabelHostname: "n2", "zone": "a", "gen": "5"}
	tests := []struct {
		name string
		spec *kubevirtv1.VirtualMachineInstanceSpec
		want bool
	}{
		{"nil", nil, true},
		{"unconstrained", &kubevirtv1.VirtualMachineInstanceSpec{}, true},
		{"selector matches", &kubevirtv1.VirtualMachineInstanceSpec{NodeSelector: map[string]string{"zone": "a"}}, true},
		{"selector of another node", &kubevirtv1.VirtualMachineInstanceSpec{NodeSelector: map[string]string{LabelHostname: "n1"}}, false},
		{"selector label missing", &kubevirtv1.VirtualMachineInstanceSpec{NodeSelector: map[string]string{"gpu": "yes"}}, false},
		{"one term of two matches", &kubevirtv1.VirtualMachineInstanceSpec{Affinity: required(
			exprs(hostExpr(corev1.NodeSelectorOpIn, "n1")), fields(nameField(corev1.NodeSelectorOpIn, "n2.lab")))}, true},
		{"no term matches", &kubevirtv1.VirtualMachineInstanceSpec{Affinity: required(
			exprs(hostExpr(corev1.NodeSelectorOpIn, "n1")), fields(nameField(corev1.NodeSelectorOpNotIn, "n2.lab")))}, false},
		{"empty term admits nothing", &kubevirtv1.VirtualMachineInstanceSpec{Affinity: required(corev1.NodeSelectorTerm{})}, false},
		{"exists, doesnotexist, gt", &kubevirtv1.VirtualMachineInstanceSpec{Affinity: required(exprs(
			corev1.NodeSelectorRequirement{Key: "zone", Operator: corev1.NodeSelectorOpExists},
			corev1.NodeSelectorRequirement{Key: "gpu", Operator: corev1.NodeSelectorOpDoesNotExist},
			corev1.NodeSelectorRequirement{Key: "gen", Operator: corev1.NodeSelectorOpGt, Values: []string{"4"}}))}, true},
		{"lt fails", &kubevirtv1.VirtualMachineInstanceSpec{Affinity: required(exprs(
			corev1.NodeSelectorRequirement{Key: "gen", Operator: corev1.NodeSelectorOpLt, Values: []string{"4"}}))}, false},
		{"preferred never refuses", &kubevirtv1.VirtualMachineInstanceSpec{Affinity: preferred(exprs(hostExpr(corev1.NodeSelectorOpIn, "n1")))}, true},
	}
	for _, tt := range tests {
		if got := NodeAllowed(tt.spec, "n2.lab", labels); got != tt.want {
			t.Errorf("%s: NodeAllowed = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestParseStorageMap(t *testing.T) {
	tests := []struct {
		in      string
		want    StorageMap
		wantErr string
	}{
		{in: "1", want: StorageMap{Identity: true}},
		{in: "ceph-rbd", want: StorageMap{Default: "ceph-rbd"}},
		{in: "local-lvm:ceph-rbd, nfs:local-lvm", want: StorageMap{Entries: map[string]string{"local-lvm": "ceph-rbd", "nfs": "local-lvm"}}},
		{in: "aa:bb;cc", want: StorageMap{Default: "cc", Entries: map[string]string{"aa": "bb"}}},
		{in: "1,aa", wantErr: "identity mapping cannot be combined with other mappings"},
		{in: "aa,bb", wantErr: "default target ID can only be provided once"},
		{in: "aa:bb,aa:cc", wantErr: "duplicate mapping for source 'aa'"},
		{in: "aa:bb:cc", wantErr: "entry 'aa:bb:cc' contains invalid ID - value does not look like a valid storage ID"},
		{in: "9x", wantErr: "entry '9x' contains invalid ID - value does not look like a valid storage ID"},
		{in: "aa:-b", wantErr: "entry 'aa:-b' contains invalid ID - value does not look like a valid storage ID"},
	}
	for _, tt := range tests {
		got, err := ParseStorageMap(tt.in)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("%q: error %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%q: got %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
	m, _ := ParseStorageMap("aa:bb,cc")
	if m.Target("aa") != "bb" || m.Target("xx") != "cc" {
		t.Errorf("Target: %q %q", m.Target("aa"), m.Target("xx"))
	}
	if m, _ := ParseStorageMap("1"); m.Target("x") != "x" {
		t.Errorf("identity Target: %q", m.Target("x"))
	}
}

func TestConfigVolumes(t *testing.T) {
	cfg := map[string]string{
		"scsi0":    "local-lvm:vm-100-disk-0,iothread=1,size=8G",
		"ide2":     "local-lvm:iso/debian-12.iso,media=cdrom",
		"ide0":     "none,media=cdrom",
		"ide3":     "ceph-rbd:vm-100-cloudinit,media=cdrom",
		"unused0":  "local-lvm:vm-100-disk-1",
		"efidisk0": "local-lvm:vm-100-disk-2,efitype=4m,size=4M",
		"net0":     "virtio=BC:24:11:00:00:01,bridge=vmbr0",
		"name":     "x",
	}
	want := []ConfigVolume{
		{VolID: "local-lvm:vm-100-disk-2", Storage: "local-lvm", DriveName: "efidisk0", Size: 4 << 20},
		{VolID: "local-lvm:iso/debian-12.iso", Storage: "local-lvm", DriveName: "ide2", CDROM: true},
		{VolID: "ceph-rbd:vm-100-cloudinit", Storage: "ceph-rbd", DriveName: "ide3", CDROM: true, CloudInit: true},
		{VolID: "local-lvm:vm-100-disk-0", Storage: "local-lvm", DriveName: "scsi0", Size: 8 << 30},
		{VolID: "local-lvm:vm-100-disk-1", Storage: "local-lvm", DriveName: "unused0", Unused: true},
	}
	if got := ConfigVolumes(cfg); !reflect.DeepEqual(got, want) {
		t.Errorf("ConfigVolumes:\n got %+v\nwant %+v", got, want)
	}
}
