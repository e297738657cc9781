package kubevirtsim

import (
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clonev1 "kubevirt.io/api/clone/v1beta1"
	virtv1 "kubevirt.io/api/core/v1"
	snapshotv1 "kubevirt.io/api/snapshot/v1beta1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// cloneSource is a VM with labels/annotations to filter, two NICs, a PVC
// disk and a DataVolume disk.
func cloneSource(name string) *virtv1.VirtualMachine {
	vm := testVM(name, virtv1.RunStrategyManual)
	vm.Labels = map[string]string{"app": "web", labelVMID: "100", "secret.example.com/token": "x"}
	vm.Annotations = map[string]string{"note": "source", annotationNode: "node-a"}
	vm.Spec.Template.ObjectMeta.Labels["secret.example.com/tier"] = "gold"
	vm.Spec.Template.Spec.Domain.Devices.Interfaces = append(vm.Spec.Template.Spec.Domain.Devices.Interfaces,
		virtv1.Interface{Name: "net1", MacAddress: "BC:24:11:00:00:02", InterfaceBindingMethod: virtv1.InterfaceBindingMethod{Bridge: &virtv1.InterfaceBridge{}}})
	vm.Spec.Template.Spec.Networks = append(vm.Spec.Template.Spec.Networks,
		virtv1.Network{Name: "net1", NetworkSource: virtv1.NetworkSource{Multus: &virtv1.MultusNetwork{NetworkName: "vlan10"}}})
	vm.Spec.Template.Spec.Domain.Firmware = &virtv1.Firmware{Serial: "source-serial"}
	withPVC(vm, "scsi0", name+"-disk-0")
	return withDataVolume(vm, "scsi1", blankDVT(name+"-disk-1", "4Gi", nil))
}

func TestCloneVM(t *testing.T) {
	e := newCDIEnv(t, testPVC("web-disk-0", "ceph-rbd", "8Gi")).run(Options{})
	rec := recordPhases(t, e.ctx, NewVirtualMachineCloneInformer(e.kv, testNS, 0), func(obj any) (string, string) {
		cl := obj.(*clonev1.VirtualMachineClone)
		return cl.Name, string(cl.Status.Phase)
	})
	src := e.createVM(cloneSource("web"))
	e.waitDVPhase("web-disk-1", cdiv1.Succeeded)
	srcVM := e.waitStopped("web")

	e.createClone("c1", clonev1.VirtualMachineCloneSpec{
		Source:           &corev1.TypedLocalObjectReference{APIGroup: ptr("kubevirt.io"), Kind: "VirtualMachine", Name: "web"},
		Target:           &corev1.TypedLocalObjectReference{APIGroup: ptr("kubevirt.io"), Kind: "VirtualMachine", Name: "web-copy"},
		LabelFilters:     []string{"*", "!secret.example.com/*"},
		Template:         clonev1.VirtualMachineCloneTemplateFilters{LabelFilters: []string{"!secret.example.com/*"}},
		NewMacAddresses:  map[string]string{"net1": "02:00:00:00:00:01"},
		Patches:          []string{`{"op": "replace", "path": "/metadata/labels/pve.caddy-proxmox.io~1vmid", "value": "105"}`},
		VolumeNamePolicy: ptr(clonev1.VolumeNamePolicyPrefixTargetName),
	})
	cl := e.waitClone("c1", clonev1.Succeeded)
	rec.requireSequence(t, "c1", "", string(clonev1.SnapshotInProgress), string(clonev1.CreatingTargetVM),
		string(clonev1.RestoreInProgress), string(clonev1.Succeeded))
	if *cl.Status.TargetName != "web-copy" || cl.Status.CreationTime == nil {
		t.Errorf("status: %s", describeClone(cl))
	}
	if c := cl.Status.Conditions; len(c) != 2 {
		t.Errorf("conditions %+v", c)
	}

	vm := e.getVM("web-copy")
	if vm.UID == src.UID || vm.Labels["app"] != "web" || vm.Labels[labelVMID] != "105" || vm.Labels["secret.example.com/token"] != "" ||
		vm.Annotations["note"] != "source" || vm.Annotations[annotationNode] != "node-a" {
		t.Errorf("target metadata: labels %v annotations %v", vm.Labels, vm.Annotations)
	}
	tmpl := vm.Spec.Template
	if _, ok := tmpl.ObjectMeta.Labels["secret.example.com/tier"]; ok || tmpl.ObjectMeta.Labels["kubevirt.io/domain"] != "web" {
		t.Errorf("template labels %v", tmpl.ObjectMeta.Labels)
	}
	ifaces := tmpl.Spec.Domain.Devices.Interfaces
	if !regexp.MustCompile(`^BC:24:11:[0-9A-F]{2}:[0-9A-F]{2}:[0-9A-F]{2}$`).MatchString(ifaces[0].MacAddress) ||
		ifaces[0].MacAddress == "BC:24:11:00:00:01" || ifaces[1].MacAddress != "02:00:00:00:00:01" {
		t.Errorf("MACs %s %s", ifaces[0].MacAddress, ifaces[1].MacAddress)
	}
	fw := tmpl.Spec.Domain.Firmware
	if fw == nil || fw.Serial == "" || fw.Serial == "source-serial" {
		t.Errorf("firmware %+v", fw)
	}
	if *vm.Spec.RunStrategy != virtv1.RunStrategyHalted {
		t.Errorf("runStrategy %s", *vm.Spec.RunStrategy)
	}
	// The target gets its own firmware UUID once the controller persists one.
	vm = e.waitVM("web-copy", "own firmware UUID", func(vm *virtv1.VirtualMachine) bool {
		return vm.Spec.Template.Spec.Domain.Firmware.UUID != ""
	})
	if vm.Spec.Template.Spec.Domain.Firmware.UUID == srcVM.Spec.Template.Spec.Domain.Firmware.UUID {
		t.Error("the clone shares the source's firmware UUID")
	}

	// Disks: renamed dataVolumeTemplates cloning the source's PVCs.
	want := map[string]string{"web-copy-scsi0": "web-disk-0", "web-copy-scsi1": "web-disk-1"}
	if len(vm.Spec.DataVolumeTemplates) != 2 {
		t.Fatalf("dataVolumeTemplates %+v", vm.Spec.DataVolumeTemplates)
	}
	for _, dvt := range vm.Spec.DataVolumeTemplates {
		s := dvt.Spec.Source
		if s == nil || s.PVC == nil || s.PVC.Name != want[dvt.Name] || s.PVC.Namespace != testNS {
			t.Errorf("dataVolumeTemplate %s: %+v", dvt.Name, dvt.Spec)
		}
	}
	vols := tmpl.Spec.Volumes
	if vols[1].PersistentVolumeClaim == nil || vols[1].PersistentVolumeClaim.ClaimName != "web-copy-scsi0" ||
		vols[2].DataVolume == nil || vols[2].DataVolume.Name != "web-copy-scsi1" {
		t.Errorf("volumes %+v", vols)
	}
	e.waitDVPhase("web-copy-scsi0", cdiv1.Succeeded)
	e.waitDVPhase("web-copy-scsi1", cdiv1.Succeeded)
	if pvc := e.waitPVC("web-copy-scsi0"); pvc.Spec.Resources.Requests.Storage().Cmp(resource.MustParse("8Gi")) != 0 || *pvc.Spec.StorageClassName != "ceph-rbd" {
		t.Errorf("cloned PVC %+v", pvc.Spec)
	}
	if pvc := e.waitPVC("web-copy-scsi1"); pvc.Spec.Resources.Requests.Storage().Cmp(resource.MustParse("4Gi")) != 0 {
		t.Errorf("cloned PVC %+v", pvc.Spec)
	}
	e.waitStopped("web-copy")

	// The temporary snapshot and restore are gone; the source is untouched.
	cl = e.waitClone("c1", clonev1.Succeeded)
	eventually(t, "temporary objects cleaned up", func() (bool, string) {
		cl = e.getClone("c1")
		return cl.Status.SnapshotName == nil && cl.Status.RestoreName == nil &&
			e.getSnapshot(tmpSnapshotName(cl)) == nil && e.getRestore(tmpRestoreName(cl)) == nil, describeClone(cl)
	})
	contents, err := e.kv.SnapshotV1beta1().VirtualMachineSnapshotContents(testNS).List(e.ctx, metav1.ListOptions{})
	if err != nil || len(contents.Items) != 0 {
		t.Errorf("contents left: %v %v", contents, err)
	}
	if s := e.getVM("web"); s.Labels[labelVMID] != "100" || s.Spec.Template.Spec.Domain.Devices.Interfaces[0].MacAddress != "BC:24:11:00:00:01" {
		t.Errorf("source changed: %+v", s.ObjectMeta)
	}
}

func TestCloneFromSnapshotWithGeneratedName(t *testing.T) {
	e := newCDIEnv(t, testPVC("web-disk-0", "local-lvm", "1Gi")).run(Options{})
	rec := recordPhases(t, e.ctx, NewVirtualMachineCloneInformer(e.kv, testNS, 0), func(obj any) (string, string) {
		cl := obj.(*clonev1.VirtualMachineClone)
		return cl.Name, string(cl.Status.Phase)
	})
	e.createVM(withPVC(testVM("web", virtv1.RunStrategyHalted), "scsi0", "web-disk-0"))
	e.createSnapshot("golden", "web")
	e.waitSnapshot("golden", snapshotv1.Succeeded)

	e.createClone("c2", clonev1.VirtualMachineCloneSpec{
		Source: &corev1.TypedLocalObjectReference{APIGroup: ptr("snapshot.kubevirt.io"), Kind: "VirtualMachineSnapshot", Name: "golden"},
	})
	cl := e.waitClone("c2", clonev1.Succeeded)
	for _, p := range rec.values("c2") {
		if p == string(clonev1.SnapshotInProgress) {
			t.Errorf("a snapshot source went through SnapshotInProgress: %v", rec.values("c2"))
		}
	}
	target := *cl.Status.TargetName
	if !regexp.MustCompile(`^clone-golden-[0-9a-f]{5}$`).MatchString(target) {
		t.Errorf("target name %q", target)
	}
	vm := e.getVM(target)
	claim := vm.Spec.Template.Spec.Volumes[1].PersistentVolumeClaim.ClaimName
	if !strings.HasPrefix(claim, "restore-") || !strings.HasSuffix(claim, "-scsi0") {
		t.Errorf("RandomizeNames claim %q", claim)
	}
	e.waitDVPhase(claim, cdiv1.Succeeded)
	if e.getSnapshot("golden") == nil {
		t.Error("the source snapshot was deleted")
	}
}

func TestCloneFailures(t *testing.T) {
	vmRef := func(name string) *corev1.TypedLocalObjectReference {
		return &corev1.TypedLocalObjectReference{APIGroup: ptr("kubevirt.io"), Kind: "VirtualMachine", Name: name}
	}
	failedWith := func(e *cdiEnv, name, substr string) {
		t.Helper()
		cl := e.waitClone(name, clonev1.Failed)
		for _, c := range cl.Status.Conditions {
			if c.Type == clonev1.ConditionReady && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, substr) {
				return
			}
		}
		t.Errorf("clone %s: %s, want a message with %q", name, describeClone(cl), substr)
	}

	t.Run("snapshots unsupported", func(t *testing.T) {
		e := newCDIEnv(t, testPVC("web-disk-0", "ceph-rbd", "1Gi")).run(Options{SnapshotUnsupported: true})
		e.createVM(withPVC(testVM("web", virtv1.RunStrategyHalted), "scsi0", "web-disk-0"))
		e.createClone("c", clonev1.VirtualMachineCloneSpec{Source: vmRef("web"), Target: vmRef("copy")})
		failedWith(e, "c", "No VolumeSnapshotClass")
		if _, err := e.kv.KubevirtV1().VirtualMachines(testNS).Get(e.ctx, "copy", metav1.GetOptions{}); err == nil {
			t.Error("target created")
		}
	})
	t.Run("target exists", func(t *testing.T) {
		e := newCDIEnv(t).run(Options{})
		e.createVM(testVM("web", virtv1.RunStrategyHalted))
		e.createVM(testVM("copy", virtv1.RunStrategyHalted))
		e.createClone("c", clonev1.VirtualMachineCloneSpec{Source: vmRef("web"), Target: vmRef("copy")})
		failedWith(e, "c", "already exists")
	})
	t.Run("invalid patch", func(t *testing.T) {
		e := newCDIEnv(t).run(Options{})
		e.createVM(testVM("web", virtv1.RunStrategyHalted))
		e.createClone("c", clonev1.VirtualMachineCloneSpec{Source: vmRef("web"), Target: vmRef("copy"),
			Patches: []string{`{"op": "remove", "path": "/spec/nothing/here"}`}})
		failedWith(e, "c", "error patching VM copy")
	})
	t.Run("source appears later", func(t *testing.T) {
		e := newCDIEnv(t).run(Options{})
		e.createClone("c", clonev1.VirtualMachineCloneSpec{Source: vmRef("late"), Target: vmRef("copy")})
		eventually(t, "source missing condition", func() (bool, string) {
			cl := e.getClone("c")
			for _, c := range cl.Status.Conditions {
				if c.Reason == reasonCloneSourceMissing {
					return cl.Status.Phase == clonev1.PhaseUnset, describeClone(cl)
				}
			}
			return false, describeClone(cl)
		})
		e.createVM(testVM("late", virtv1.RunStrategyHalted))
		e.waitClone("c", clonev1.Succeeded)
		e.waitStopped("copy")
	})
}

func TestCloneDeletedMidwayCleansUp(t *testing.T) {
	// The snapshot would finish only after the test timed out: the clean-up
	// must come from the clone's deletion event.
	e := newCDIEnv(t).run(Options{SnapshotDelay: 2 * waitTimeout})
	e.createVM(testVM("web", virtv1.RunStrategyHalted))
	e.createClone("c", clonev1.VirtualMachineCloneSpec{
		Source: &corev1.TypedLocalObjectReference{APIGroup: ptr("kubevirt.io"), Kind: "VirtualMachine", Name: "web"},
	})
	cl := e.waitClone("c", clonev1.SnapshotInProgress)
	if err := e.kv.CloneV1beta1().VirtualMachineClones(testNS).Delete(e.ctx, "c", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "temporary snapshot", func() bool { return e.getSnapshot(tmpSnapshotName(cl)) != nil })
	e.waitVM("web", "unlocked", func(vm *virtv1.VirtualMachine) bool { return vm.Status.SnapshotInProgress == nil })
}

func TestKeepKey(t *testing.T) {
	cases := []struct {
		key     string
		filters []string
		want    bool
	}{
		{"a", nil, true},
		{"a", []string{"*"}, true},
		{"some/key", []string{"*", "!some/*"}, false},
		{"other/key", []string{"*", "!some/*"}, true},
		{"other/key", []string{"some/*"}, false},
		{"some/key", []string{"some/*"}, true},
		{"some/key", []string{"!some/key"}, false},
		{"x", []string{"!some/key"}, true},
		{"a.b/c", []string{"a?b/*"}, false},
	}
	for _, c := range cases {
		if got := keepKey(c.key, c.filters); got != c.want {
			t.Errorf("keepKey(%q, %q) = %v, want %v", c.key, c.filters, got, c.want)
		}
	}
	if escapePointer("a/b~c") != "a~1b~0c" {
		t.Error(escapePointer("a/b~c"))
	}
}
