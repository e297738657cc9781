package translate

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// resizeVM has scsi0 on a DataVolume template of 8 GiB (StorageClass
// local-lvm), scsi1 on a DataVolume without a template, scsi2 on a plain
// PVC, and a template using a PVC spec only (no storage spec) for scsi3.
func resizeVM() *kubevirtv1.VirtualMachine {
	sc := "local-lvm"
	dvVol := func(name, claim string) kubevirtv1.Volume {
		return kubevirtv1.Volume{Name: name, VolumeSource: kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: claim}}}
	}
	return &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
			AnnotationConfig: EncodeConfig(map[string]string{"scsi0": "local-lvm:vm-100-disk-0,iothread=1,size=8G"}),
		}},
		Spec: kubevirtv1.VirtualMachineSpec{
			DataVolumeTemplates: []kubevirtv1.DataVolumeTemplateSpec{
				{ObjectMeta: metav1.ObjectMeta{Name: "vm-100-disk-0"}, Spec: cdiv1.DataVolumeSpec{Storage: &cdiv1.StorageSpec{
					StorageClassName: &sc,
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceStorage: resource.MustParse("8Gi")}},
				}}},
				{ObjectMeta: metav1.ObjectMeta{Name: "vm-100-disk-3"}, Spec: cdiv1.DataVolumeSpec{PVC: &corev1.PersistentVolumeClaimSpec{}}},
			},
			Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{Spec: kubevirtv1.VirtualMachineInstanceSpec{Volumes: []kubevirtv1.Volume{
				dvVol("scsi0", "vm-100-disk-0"),
				dvVol("scsi1", "imported"),
				pvcVolume("scsi2", "data"),
				dvVol("scsi3", "vm-100-disk-3"),
			}}},
		},
	}
}

func TestResizeDisk(t *testing.T) {
	const gib, mib = int64(1 << 30), int64(1 << 20)
	tests := []struct {
		name    string
		disk    string
		delta   bool
		bytes   int64
		from    int64
		to      int64
		shown   string // scsi0 in the stored config afterwards
		err     error
		message string
	}{
		{"absolute", "scsi0", false, 10 * gib, 8 * gib, 10 * gib, "local-lvm:vm-100-disk-0,iothread=1,size=10G", nil, ""},
		{"delta", "scsi0", true, 2 * gib, 8 * gib, 10 * gib, "local-lvm:vm-100-disk-0,iothread=1,size=10G", nil, ""},
		{"same size", "scsi0", false, 8 * gib, 8 * gib, 8 * gib, "local-lvm:vm-100-disk-0,iothread=1,size=8G", nil, ""},
		{"rounded up to whole MiB", "scsi0", true, 1, 8 * gib, 8*gib + mib, "local-lvm:vm-100-disk-0,iothread=1,size=8193M", nil, ""},
		{"shrink", "scsi0", false, 4 * gib, 0, 0, "", ErrShrinkDisk, "shrinking disks is not supported"},
		{"no such disk", "scsi9", false, gib, 0, 0, "", ErrNotResizable, "disk 'scsi9' does not exist or is not a resizable disk"},
		{"plain PVC", "scsi2", false, gib, 0, 0, "", ErrNotResizable, "disk 'scsi2' does not exist or is not a resizable disk"},
		{"DataVolume without template", "scsi1", false, gib, 0, 0, "", ErrNotResizable, "disk 'scsi1' has no resizable volume"},
		{"template without storage spec", "scsi3", false, gib, 0, 0, "", ErrNotResizable, "disk 'scsi3' has no resizable volume"},
	}
	for _, tt := range tests {
		vm := resizeVM()
		before := vm.DeepCopy()
		r, err := ResizeDisk(vm, tt.disk, tt.delta, tt.bytes)
		if tt.err != nil {
			if !errors.Is(err, tt.err) || err.Error() != tt.message || r.VM != nil {
				t.Errorf("%s: got %+v, %v; want error %q", tt.name, r, err, tt.message)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if r.From != tt.from || r.To != tt.to || r.Claim != "vm-100-disk-0" || r.StorageClass != "local-lvm" {
			t.Errorf("%s: got from %d to %d claim %q class %q", tt.name, r.From, r.To, r.Claim, r.StorageClass)
		}
		if got := DataVolumeSize(r.VM.Spec.DataVolumeTemplates[0]); got != tt.to {
			t.Errorf("%s: template size %d, want %d", tt.name, got, tt.to)
		}
		if got := StoredConfig(r.VM)["scsi0"]; got != tt.shown {
			t.Errorf("%s: scsi0 = %q, want %q", tt.name, got, tt.shown)
		}
		if DataVolumeSize(vm.Spec.DataVolumeTemplates[0]) != 8*gib || vm.Annotations[AnnotationConfig] != before.Annotations[AnnotationConfig] {
			t.Errorf("%s: the VM passed in was modified", tt.name)
		}
	}
}

func TestResizeDiskWithoutStoredKey(t *testing.T) {
	// A disk whose key the stored config lacks (made with kubectl) grows;
	// the config is left as it is.
	vm := resizeVM()
	vm.Annotations = nil
	r, err := ResizeDisk(vm, "scsi0", true, 1<<30)
	if err != nil || r.To != 9<<30 || r.VM.Annotations != nil {
		t.Fatalf("got %+v, %v", r, err)
	}
}

func TestReplaceSize(t *testing.T) {
	tests := []struct{ drive, size, want string }{
		{"local-lvm:vm-1-disk-0", "4G", "local-lvm:vm-1-disk-0,size=4G"},
		{"local-lvm:vm-1-disk-0,size=2G", "4G", "local-lvm:vm-1-disk-0,size=4G"},
		{"local-lvm:vm-1-disk-0,size=2G,iothread=1", "4G", "local-lvm:vm-1-disk-0,iothread=1,size=4G"},
		{"local-lvm:vm-1-disk-0,size=1G,size=2G", "4G", "local-lvm:vm-1-disk-0,size=4G"},
		{"", "1M", ",size=1M"},
	}
	for _, tt := range tests {
		if got := replaceSize(tt.drive, tt.size); got != tt.want {
			t.Errorf("replaceSize(%q, %q) = %q, want %q", tt.drive, tt.size, got, tt.want)
		}
	}
}

func TestMarkTemplate(t *testing.T) {
	manual := kubevirtv1.RunStrategyManual
	tests := []struct {
		name string
		vm   *kubevirtv1.VirtualMachine
		cfg  map[string]string
	}{
		{"bare VM (made with kubectl)", &kubevirtv1.VirtualMachine{}, map[string]string{"template": "1"}},
		{"VM of this API", &kubevirtv1.VirtualMachine{
			ObjectMeta: metav1.ObjectMeta{
				Labels:      map[string]string{LabelVMID: "100"},
				Annotations: map[string]string{AnnotationConfig: EncodeConfig(map[string]string{"cores": "2"})},
			},
			Spec: kubevirtv1.VirtualMachineSpec{RunStrategy: &manual},
		}, map[string]string{"cores": "2", "template": "1"}},
	}
	for _, tt := range tests {
		MarkTemplate(tt.vm)
		if tt.vm.Labels[LabelTemplate] != "true" {
			t.Errorf("%s: labels %v", tt.name, tt.vm.Labels)
		}
		if rs := tt.vm.Spec.RunStrategy; rs == nil || *rs != kubevirtv1.RunStrategyHalted {
			t.Errorf("%s: run strategy %v", tt.name, rs)
		}
		if got := StoredConfig(tt.vm); len(got) != len(tt.cfg) || got["template"] != "1" || got["cores"] != tt.cfg["cores"] {
			t.Errorf("%s: config %v, want %v", tt.name, got, tt.cfg)
		}
	}
}

func TestProvisioning(t *testing.T) {
	withDV := []kubevirtv1.DataVolumeTemplateSpec{{ObjectMeta: metav1.ObjectMeta{Name: "vm-100-disk-0"}}}
	tests := []struct {
		name    string
		status  kubevirtv1.VirtualMachinePrintableStatus
		dvs     []kubevirtv1.DataVolumeTemplateSpec
		created bool
		want    bool
	}{
		{"provisioning", kubevirtv1.VirtualMachineStatusProvisioning, withDV, false, true},
		{"waiting for volume binding", kubevirtv1.VirtualMachineStatusWaitingForVolumeBinding, withDV, false, true},
		{"stopped", kubevirtv1.VirtualMachineStatusStopped, withDV, false, false},
		{"running", kubevirtv1.VirtualMachineStatusRunning, withDV, true, false},
		{"data volume error", kubevirtv1.VirtualMachineStatusDataVolumeError, withDV, false, false},
		{"no status yet, volumes to make", "", withDV, false, true},
		{"no status yet, no volumes", "", nil, false, false},
		{"no status but created", "", withDV, true, false},
	}
	for _, tt := range tests {
		vm := &kubevirtv1.VirtualMachine{
			Spec:   kubevirtv1.VirtualMachineSpec{DataVolumeTemplates: tt.dvs},
			Status: kubevirtv1.VirtualMachineStatus{PrintableStatus: tt.status, Created: tt.created},
		}
		if got := Provisioning(vm); got != tt.want {
			t.Errorf("%s: Provisioning = %v, want %v", tt.name, got, tt.want)
		}
	}
}
