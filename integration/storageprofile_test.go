package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A disk on storage whose provisioner CDI does not know, and whose admin
// has not set its StorageProfile's claim properties: CDI cannot render the
// DataVolume's claim and retries forever (ErrClaimNotValid), so the
// create task fails at once with CDI's reason instead of running into its
// timeout.
func TestCreateOnStorageWithoutClaimProperties(t *testing.T) {
	skipOnSim(t, "kubevirtsim's CDI gives claims of provisioners CDI does not know ReadWriteOnce and Filesystem, where CDI leaves them Pending")
	ctx := context.Background()
	a := pve(t)
	node := firstNode(a)
	class := "it-no-profile"
	immediate := storagev1.VolumeBindingImmediate
	if _, err := env.DirectKube.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: class}, Provisioner: "storage.example.com/unknown-to-cdi",
		ReclaimPolicy: ptrTo(corev1.PersistentVolumeReclaimDelete), VolumeBindingMode: &immediate,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.DirectKube.StorageV1().StorageClasses().Delete(ctx, class, metav1.DeleteOptions{}) })
	// The plugin serves the class as a storage once its cache has it.
	for deadline := time.Now().Add(15 * time.Second); ; {
		if ans := a.Do("GET", "/nodes/"+node+"/storage/"+class+"/status", nil); ans.Code == 200 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("storage %s: %s %s", class, ans.Status, ans.Raw)
		}
		time.Sleep(200 * time.Millisecond)
	}

	id := nextID(a)
	var upid string
	a.OK("POST", "/nodes/"+node+"/qemu", form("vmid", id, "name", "it-no-profile", "scsi0", class+":1"), &upid)
	t.Cleanup(func() {
		var u string
		a.OK("DELETE", "/nodes/"+node+"/qemu/"+id, nil, &u)
		a.WaitTask(u)
	})
	exit := a.WaitTask(upid)
	if !strings.Contains(exit, "volume provisioning failed") || !strings.Contains(exit, "no accessMode specified in StorageProfile "+class) {
		t.Fatalf("create task: %q, want CDI's reason", exit)
	}
}
