package behaviour

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"kubevirt.io/client-go/containerizeddataimporter"
)

// TestUnknownProvisioner: CDI's StorageProfile of a class whose
// provisioner CDI does not know has no access or volume modes, and CDI
// leaves a DataVolume that names neither Pending for ever
// (ErrClaimNotValid "no accessMode specified in StorageProfile"). A disk
// on such storage is made ReadWriteOnce and Filesystem, and the create
// task ends.
func TestUnknownProvisioner(t *testing.T) {
	ctx := context.Background()
	const class, id = "unknown-csi", "7220"
	immediate := storagev1.VolumeBindingImmediate
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: class}, Provisioner: "csi.example.com", VolumeBindingMode: &immediate}
	if _, err := env.DirectKube.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.DirectKube.StorageV1().StorageClasses().Delete(ctx, class, metav1.DeleteOptions{}) })
	cdi := containerizeddataimporter.NewForConfigOrDie(env.DirectConfig)
	deadline := time.Now().Add(time.Minute)
	for {
		p, err := cdi.CdiV1beta1().StorageProfiles().Get(ctx, class, metav1.GetOptions{})
		if err == nil {
			if len(p.Status.ClaimPropertySets) > 0 {
				t.Fatalf("CDI knows the provisioner: %+v", p.Status.ClaimPropertySets)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no StorageProfile %s: %v", class, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	r := realOnly(t)
	r.timeout = time.Minute
	must(t, r, "create", r.task("POST", "/nodes/"+firstNode+"/qemu", form("vmid", id, "name", "b-unknown-sc", "memory", "512", "scsi0", class+":1")))
	t.Cleanup(func() { destroy(id).do(r) })
	vm := vmObject(t, id)
	pvc, err := env.DirectKube.CoreV1().PersistentVolumeClaims(vm.Namespace).Get(ctx, "vm-"+id+"-disk-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pvc.Spec.AccessModes) != 1 || pvc.Spec.AccessModes[0] != corev1.ReadWriteOnce || pvc.Spec.VolumeMode == nil || *pvc.Spec.VolumeMode != corev1.PersistentVolumeFilesystem {
		t.Errorf("the disk's claim: %v %v", pvc.Spec.AccessModes, pvc.Spec.VolumeMode)
	}
}
