package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/containerizeddataimporter"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// TestDisksOfAKubectlVM: on the real apiserver, a VM made with kubectl
// shows its disks, a disk added through the API takes a name no claim of
// the namespace has and leaves the others alone, and unlink with force=1
// deletes the new disk's DataVolume only.
func TestDisksOfAKubectlVM(t *testing.T) {
	ctx := context.Background()
	a := pve(t)
	id := nextID(a)
	claim := func(name string) {
		sc := "local-path"
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: &sc,
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("5Gi")}},
			},
		}
		if _, err := env.Kube.CoreV1().PersistentVolumeClaims("default").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = env.Kube.CoreV1().PersistentVolumeClaims("default").Delete(ctx, name, metav1.DeleteOptions{})
		})
	}
	own, stray := "vm-"+id+"-disk-0", "vm-"+id+"-disk-1" // stray: no VM refers to it
	// Named after its vmid: a VM of an earlier run (-count) may still be
	// being deleted.
	name := "it-kubectl-disks-" + id
	claim(own)
	claim(stray)
	rs := kubevirtv1.RunStrategyHalted
	vm := &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{translate.LabelVMID: id}},
		Spec:       kubevirtv1.VirtualMachineSpec{RunStrategy: &rs, Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{}},
	}
	vm.Spec.Template.Spec.Domain.CPU = &kubevirtv1.CPU{Cores: 1}
	vm.Spec.Template.Spec.Domain.Devices.Disks = []kubevirtv1.Disk{
		{Name: "rootdisk", DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusVirtio}}},
		{Name: "sata0", DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusSATA}}},
	}
	vm.Spec.Template.Spec.Volumes = []kubevirtv1.Volume{
		{Name: "rootdisk", VolumeSource: kubevirtv1.VolumeSource{ContainerDisk: &kubevirtv1.ContainerDiskSource{Image: "quay.io/containerdisks/fedora:41"}}},
		{Name: "sata0", VolumeSource: kubevirtv1.VolumeSource{PersistentVolumeClaim: &kubevirtv1.PersistentVolumeClaimVolumeSource{
			PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: own}}}},
	}
	vm, err := env.KubeVirt.KubevirtV1().VirtualMachines("default").Create(ctx, vm, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.KubeVirt.KubevirtV1().VirtualMachines("default").Delete(ctx, name, metav1.DeleteOptions{})
	})
	before := vm.Spec.Template.Spec.DeepCopy()
	rows := waitRows(t, func(r map[string][]map[string]any) bool { return len(r[name]) == 1 })
	node := rows[name][0]["node"].(string)
	path := "/nodes/" + node + "/qemu/" + id
	config := func() map[string]any {
		var cfg map[string]any
		deadline := time.Now().Add(10 * time.Second)
		for {
			a.OK("GET", path+"/config", nil, &cfg)
			if cfg["sata0"] != nil || time.Now().After(deadline) {
				return cfg
			}
			time.Sleep(100 * time.Millisecond) // the cache has not seen the update yet
		}
	}
	cfg := config()
	if cfg["sata0"] != "local-path:"+own+",size=5G" || cfg["virtio0"] != "containerdisk:quay.io/containerdisks/fedora:41,snapshot=1" {
		t.Fatalf("config %v", cfg)
	}

	a.OK("PUT", path+"/config", form("scsi1", "local-path:1"), nil)
	cfg = config()
	added := "vm-" + id + "-disk-2"
	if cfg["scsi1"] != "local-path:"+added+",size=1G" || cfg["sata0"] != "local-path:"+own+",size=5G" || cfg["virtio0"] == nil {
		t.Fatalf("after adding scsi1: %v", cfg)
	}
	got, err := env.KubeVirt.KubevirtV1().VirtualMachines("default").Get(ctx, vm.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec := got.Spec.Template.Spec
	for i, d := range before.Domain.Devices.Disks {
		if spec.Domain.Devices.Disks[i].Name != d.Name || spec.Volumes[i].Name != before.Volumes[i].Name {
			t.Fatalf("disks before %+v, after %+v", before.Domain.Devices.Disks, spec.Domain.Devices.Disks)
		}
	}
	if len(got.Spec.DataVolumeTemplates) != 1 || got.Spec.DataVolumeTemplates[0].Name != added {
		t.Fatalf("templates %+v", got.Spec.DataVolumeTemplates)
	}

	// Let the DataVolume appear, then delete the disk with its volume.
	cdi, err := containerizeddataimporter.NewForConfig(env.DirectConfig)
	if err != nil {
		t.Fatal(err)
	}
	waitDV := func(exists bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			_, err := cdi.CdiV1beta1().DataVolumes("default").Get(ctx, added, metav1.GetOptions{})
			if (err == nil) == exists {
				return
			}
			if err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("DataVolume %s exists=%v, want %v", added, err == nil, exists)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	a.OK("POST", path+"/status/start", nil, nil) // KubeVirt creates DataVolumes for a VM it runs
	waitDV(true)
	var upid string
	// Stopped at once: KubeVirt may not have created the instance yet (it
	// waits for the new disk's DataVolume), and the stop must still win.
	a.OK("POST", path+"/status/stop", nil, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("stop: %s", exit)
	}
	if vmi, err := env.KubeVirt.KubevirtV1().VirtualMachineInstances("default").Get(ctx, name, metav1.GetOptions{}); err == nil && !vmi.IsFinal() {
		t.Fatalf("after the stop, the VMI is %s", vmi.Status.Phase)
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	a.OK("PUT", path+"/unlink", form("idlist", "scsi1", "force", "1"), nil)
	waitDV(false)
	for _, n := range []string{own, stray} {
		if _, err := env.Kube.CoreV1().PersistentVolumeClaims("default").Get(ctx, n, metav1.GetOptions{}); err != nil {
			t.Fatalf("claim %s: %v", n, err)
		}
	}
	if cfg := config(); cfg["scsi1"] != nil || cfg["unused0"] != nil || cfg["sata0"] == nil {
		t.Fatalf("after unlink: %v", cfg)
	}
}

// TestDetachKeepsTheDataVolume: on KubeVirt's own VM webhook, detaching a
// disk (delete=, unlink without force) keeps its data as unusedN, as PVE
// does: the template leaves the spec (the webhook refuses one no volume
// uses), the DataVolume stays, still the VM's; the disk can be attached
// again, and deleting its unusedN deletes the DataVolume.
func TestDetachKeepsTheDataVolume(t *testing.T) {
	ctx := context.Background()
	a := pve(t)
	node := firstNode(a)
	id := nextID(a)
	path := "/nodes/" + node + "/qemu/" + id
	createVM(t, a, node, id, "name", "detach", "scsi0", "local-path:1", "scsi1", "local-path:1", "scsi2", "local-path:1")
	vm := vmByID(t, id)
	cdi, err := containerizeddataimporter.NewForConfig(env.DirectConfig)
	if err != nil {
		t.Fatal(err)
	}
	disk := func(n int) string { return fmt.Sprintf("vm-%s-disk-%d", id, n) }
	// dataVolume waits for the DataVolume and its claim (the cache must
	// know the claim to re-attach it), or for both to be gone.
	dataVolume := func(name string, exists bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			dv, err := cdi.CdiV1beta1().DataVolumes(vm.Namespace).Get(ctx, name, metav1.GetOptions{})
			_, perr := env.Kube.CoreV1().PersistentVolumeClaims(vm.Namespace).Get(ctx, name, metav1.GetOptions{})
			if exists && err == nil && perr == nil {
				if !metav1.IsControlledBy(dv, vm) {
					t.Fatalf("DataVolume %s is not the VM's: %v", name, dv.OwnerReferences)
				}
				return
			}
			if !exists && apierrors.IsNotFound(err) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("DataVolume %s: %v, claim: %v; want exists=%v", name, err, perr, exists)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for i := 0; i < 3; i++ {
		dataVolume(disk(i), true)
	}
	templates := func() []string {
		var names []string
		for _, dv := range vmByID(t, id).Spec.DataVolumeTemplates {
			names = append(names, dv.Name)
		}
		return names
	}
	config := func() map[string]any {
		var cfg map[string]any
		a.OK("GET", path+"/config", nil, &cfg)
		return cfg
	}

	a.OK("PUT", path+"/config", form("delete", "scsi1"), nil)
	if cfg := config(); cfg["scsi1"] != nil || cfg["unused0"] != "local-path:"+disk(1) {
		t.Fatalf("after delete=scsi1: %v", cfg)
	}
	if got := templates(); !slices.Equal(got, []string{disk(0), disk(2)}) {
		t.Fatalf("templates after detaching scsi1: %v", got)
	}
	a.OK("PUT", path+"/unlink", form("idlist", "scsi2"), nil)
	if cfg := config(); cfg["scsi2"] != nil || cfg["unused1"] != "local-path:"+disk(2) {
		t.Fatalf("after unlink scsi2: %v", cfg)
	}
	if got := templates(); !slices.Equal(got, []string{disk(0)}) {
		t.Fatalf("templates after unlinking scsi2: %v", got)
	}
	// The DataVolumes are kept, and stay the VM's.
	dataVolume(disk(1), true)
	dataVolume(disk(2), true)

	// Attached again from unused0, under another key.
	a.OK("PUT", path+"/config", form("virtio1", "local-path:"+disk(1), "delete", "unused0"), nil)
	if cfg := config(); cfg["virtio1"] != "local-path:"+disk(1)+",size=1G" || cfg["unused0"] != nil || cfg["unused1"] != "local-path:"+disk(2) {
		t.Fatalf("after re-attaching: %v", cfg)
	}
	var vol *kubevirtv1.Volume
	for _, v := range vmByID(t, id).Spec.Template.Spec.Volumes {
		if v.Name == "virtio1" {
			vol = &v
		}
	}
	if vol == nil || vol.DataVolume == nil || vol.DataVolume.Name != disk(1) {
		t.Fatalf("re-attached volume %+v", vol)
	}
	// Deleting an unusedN deletes its data.
	a.OK("PUT", path+"/config", form("delete", "unused1"), nil)
	dataVolume(disk(2), false)
	dataVolume(disk(1), true)
}
