package kube

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/caddy-proxmox/caddy-proxmox/internal/fleet"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// TestStripKeepsWhatIsRead: the cache transforms drop weight, never what
// the API reads (kube/, translate/, caddymodule/api): a field that goes
// missing here is a reader silently seeing a zero value.
func TestStripKeepsWhatIsRead(t *testing.T) {
	objs, err := fleet.Objects(fleet.Spec{Namespace: "default", N: 1, FirstVMID: 1000, Nodes: []string{"kv-node-1.lab.internal"}})
	if err != nil {
		t.Fatal(err)
	}
	vm := objs[0].(*kubevirtv1.VirtualMachine)
	dv := objs[1].(*cdiv1.DataVolume)
	pvc := objs[2].(*corev1.PersistentVolumeClaim)
	vmi := objs[3].(*kubevirtv1.VirtualMachineInstance)
	vmi.Spec.Domain.Firmware.Bootloader = &kubevirtv1.Bootloader{EFI: &kubevirtv1.EFI{}}
	vmi.Status.MigrationState = &kubevirtv1.VirtualMachineInstanceMigrationState{MigrationUID: "m-1", FailureReason: "no room", TargetNode: "n2"}
	dv.Spec.Source = &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "https://example.org/a.iso", ExtraHeaders: []string{"Authorization: Bearer x"}}}

	sVM := mustStrip(t, stripVM, vm.DeepCopy()).(*kubevirtv1.VirtualMachine)
	if sVM.Annotations[translate.AnnotationConfig] == "" || sVM.Annotations["kubevirt.io/latest-observed-api-version"] != "" ||
		sVM.Labels[translate.LabelVMID] == "" || sVM.Spec.Template == nil || len(sVM.Spec.DataVolumeTemplates) != 1 ||
		len(sVM.Status.Conditions) == 0 || len(sVM.Status.VolumeSnapshotStatuses) == 0 {
		t.Errorf("VM after the transform: %+v", sVM)
	}
	bare := vm.DeepCopy()
	bare.Annotations = map[string]string{"kubevirt.io/latest-observed-api-version": "v1"}
	if got := mustStrip(t, stripVM, bare).(*kubevirtv1.VirtualMachine).Annotations; got == nil {
		t.Error("a VM's emptied annotations became nil: ReplaceVM would then replace the cluster's")
	}

	sVMI := mustStrip(t, stripVMI, vmi.DeepCopy()).(*kubevirtv1.VirtualMachineInstance)
	d := sVMI.Spec.Domain
	if d.CPU == nil || d.CPU.Model == "" || d.Memory == nil || d.Machine == nil || d.Firmware == nil || d.Firmware.Bootloader == nil ||
		len(d.Devices.Disks) == 0 || len(d.Devices.Interfaces) == 0 || sVMI.Spec.Hostname == "" {
		t.Errorf("instance spec after the transform: %+v", sVMI.Spec)
	}
	st := sVMI.Status
	if st.Phase != kubevirtv1.Running || st.NodeName == "" || len(st.Conditions) == 0 || len(st.PhaseTransitionTimestamps) == 0 ||
		len(st.Interfaces) == 0 || st.Interfaces[0].IP == "" || st.GuestOSInfo.PrettyName == "" || st.Machine == nil ||
		st.CurrentCPUTopology == nil || st.Memory == nil || st.MigrationState == nil || st.MigrationState.FailureReason != "no room" ||
		st.MigrationState.MigrationUID != "m-1" {
		t.Errorf("instance status after the transform: %+v", st)
	}
	if sVMI.Spec.Volumes != nil || st.VolumeStatus != nil || st.ActivePods != nil {
		t.Errorf("instance kept what no one reads: %+v", sVMI)
	}

	sDV := mustStrip(t, stripStorage, dv.DeepCopy()).(*cdiv1.DataVolume)
	if sDV.Spec.Source == nil || sDV.Spec.Source.HTTP == nil || sDV.Spec.Source.HTTP.URL == "" || sDV.Spec.Storage == nil ||
		sDV.Status.Phase != cdiv1.Succeeded || sDV.Status.Progress == "" || len(sDV.Status.Conditions) == 0 || len(sDV.OwnerReferences) == 0 {
		t.Errorf("DataVolume after the transform: %+v", sDV)
	}
	if sDV.Spec.Source.HTTP.ExtraHeaders != nil {
		t.Error("a DataVolume's http headers stayed in the cache")
	}

	sPVC := mustStrip(t, stripStorage, pvc.DeepCopy()).(*corev1.PersistentVolumeClaim)
	if sPVC.Spec.StorageClassName == nil || sPVC.Spec.VolumeMode == nil || len(sPVC.Spec.AccessModes) == 0 ||
		sPVC.Spec.Resources.Requests.Storage().IsZero() || sPVC.Status.Capacity.Storage().IsZero() ||
		sPVC.Status.Phase != corev1.ClaimBound || len(sPVC.OwnerReferences) == 0 {
		t.Errorf("claim after the transform: %+v", sPVC)
	}
}

func mustStrip(t *testing.T, strip func(any) (any, error), obj any) any {
	t.Helper()
	out, err := strip(obj)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestStripSharesEqualMaps: equal quantity and label maps of different
// cached objects become one map (each costs hundreds of bytes per object),
// and a different one stays its own.
func TestStripSharesEqualMaps(t *testing.T) {
	objs, err := fleet.Objects(fleet.Spec{Namespace: "default", N: 3, FirstVMID: 1000, Nodes: []string{"kv-node-1.lab.internal"}})
	if err != nil {
		t.Fatal(err)
	}
	a := mustStrip(t, stripStorage, objs[2].DeepCopyObject()).(*corev1.PersistentVolumeClaim)
	b := mustStrip(t, stripStorage, objs[6].DeepCopyObject()).(*corev1.PersistentVolumeClaim)
	same := func(x, y any) bool { return reflect.ValueOf(x).UnsafePointer() == reflect.ValueOf(y).UnsafePointer() }
	if !same(a.Spec.Resources.Requests, b.Spec.Resources.Requests) || !same(a.Spec.Resources.Requests, a.Status.Capacity) {
		t.Error("equal claim sizes are separate maps")
	}
	big := objs[9].DeepCopyObject().(*corev1.PersistentVolumeClaim)
	big.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Gi")}
	c := mustStrip(t, stripStorage, big).(*corev1.PersistentVolumeClaim)
	if same(c.Spec.Resources.Requests, a.Spec.Resources.Requests) || c.Spec.Resources.Requests.Storage().String() != "64Gi" {
		t.Errorf("a different size was shared: %v", c.Spec.Resources.Requests)
	}
}
