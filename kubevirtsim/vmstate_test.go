package kubevirtsim

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
)

// TestStateClaim: a VM with persistent EFI gets, when it first starts, a
// claim labelled persistent-state-for=<vm> on the KubeVirt CR's
// vmStateStorageClass, owned by the VM, as KubeVirt's backend storage
// makes it; a restart keeps it, one without persistent state deletes it;
// a VM that already has a claim of the legacy name gets that one
// labelled, not a second.
func TestStateClaim(t *testing.T) {
	kv := SeedKubeVirt()
	kv.Spec.Configuration.VMStateStorageClass = "ceph-rbd"
	legacy := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "persistent-state-for-old", Namespace: "default"}}
	e := newEnv(t, kv, legacy,
		&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "ceph-rbd"}, Provisioner: "rbd.csi.ceph.com"}).run(Options{})
	efi := func(vm *virtv1.VirtualMachine) *virtv1.VirtualMachine {
		vm.Spec.Template.Spec.Domain.Firmware = &virtv1.Firmware{Bootloader: &virtv1.Bootloader{EFI: &virtv1.EFI{Persistent: ptr(true)}}}
		return vm
	}
	claims := func(vm string) []corev1.PersistentVolumeClaim {
		list, err := e.k8s.CoreV1().PersistentVolumeClaims("default").List(e.ctx, metav1.ListOptions{LabelSelector: stateLabel + "=" + vm})
		if err != nil {
			t.Fatal(err)
		}
		return list.Items
	}

	plain := e.createVM(testVM("plain", virtv1.RunStrategyAlways))
	vm := e.createVM(efi(testVM("uefi", virtv1.RunStrategyAlways)))
	e.waitRunning("uefi")
	e.waitRunning("plain")
	got := claims("uefi")
	if len(got) != 1 {
		t.Fatalf("state claims of uefi: %d, want 1", len(got))
	}
	pvc := got[0]
	if ref := metav1.GetControllerOf(&pvc); ref == nil || ref.UID != vm.UID || *pvc.Spec.StorageClassName != "ceph-rbd" ||
		pvc.Spec.AccessModes[0] != corev1.ReadWriteMany || pvc.Status.Phase != corev1.ClaimBound {
		t.Errorf("state claim %s: owner %v class %s modes %v phase %s", pvc.Name, ref, *pvc.Spec.StorageClassName, pvc.Spec.AccessModes, pvc.Status.Phase)
	}
	if len(claims(plain.Name)) != 0 {
		t.Error("a VM without persistent state got a state claim")
	}

	first := e.getVMI("uefi").UID
	if err := e.sub.Restart(e.ctx, "default", "uefi", &virtv1.RestartOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitVMI("uefi", "a new instance", func(vmi *virtv1.VirtualMachineInstance) bool {
		return vmi.Status.Phase == virtv1.Running && vmi.UID != first
	})
	if got := claims("uefi"); len(got) != 1 || got[0].Name != pvc.Name {
		t.Errorf("after a restart: %d claims (%v), want %s kept", len(got), got, pvc.Name)
	}

	// Without persistent EFI any more, the next start deletes the state.
	cur := e.getVM("uefi")
	cur.Spec.Template.Spec.Domain.Firmware.Bootloader.EFI.Persistent = ptr(false)
	if _, err := e.kv.KubevirtV1().VirtualMachines("default").Update(e.ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	second := e.getVMI("uefi").UID
	if err := e.sub.Restart(e.ctx, "default", "uefi", &virtv1.RestartOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitVMI("uefi", "a third instance", func(vmi *virtv1.VirtualMachineInstance) bool {
		return vmi.Status.Phase == virtv1.Running && vmi.UID != second
	})
	if got := claims("uefi"); len(got) != 0 {
		t.Errorf("a VM without persistent state kept %d state claims", len(got))
	}

	e.createVM(efi(testVM("old", virtv1.RunStrategyAlways)))
	e.waitRunning("old")
	if got := claims("old"); len(got) != 1 || got[0].Name != legacy.Name {
		t.Errorf("VM old: state claims %v, want the legacy claim labelled", got)
	}
}
