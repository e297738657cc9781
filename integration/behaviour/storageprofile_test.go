package behaviour

import (
	"context"
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"kubevirt.io/client-go/containerizeddataimporter"
)

// TestUnknownProvisioner: CDI's StorageProfile of a class whose
// provisioner CDI does not know has no access or volume modes, and CDI
// leaves a DataVolume that names neither Pending for ever
// (ErrClaimNotValid "no accessMode specified in StorageProfile"). A file
// downloaded to a directory storage on such a class fails its task at
// once with CDI's reason (a disk's create task does the same:
// integration's TestCreateOnStorageWithoutClaimProperties).
func TestUnknownProvisioner(t *testing.T) {
	ctx := context.Background()
	const class, iso = "unknown-csi", "unknown.iso"
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
	r := realOnly(t, "local_storage {\n\t\t\tstorage_class "+class+"\n\t\t}")
	r.timeout = time.Minute
	o := r.task("POST", "/nodes/"+firstNode+"/storage/local/download-url", form("content", "iso", "filename", iso, "url", "http://iso.example.com/"+iso))
	t.Cleanup(func() { deleteISO("local", iso).do(r) })
	// A file's claim names its volume mode (Filesystem), so CDI looks for
	// access modes of that mode: "no matching accessMode specified …".
	if exit, _ := o["exit"].(string); exit != "download failed: no matching accessMode specified in StorageProfile "+class {
		t.Errorf("download to storage without claim properties: %s", brief(o))
	}
}
