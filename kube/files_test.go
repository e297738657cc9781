package kube

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/caddy-proxmox/caddy-proxmox/kubevirtsim"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// isoCluster starts a Cluster with CDI over the seed, and the simulated
// controllers (CDI imports take delay).
func isoCluster(t *testing.T, delay time.Duration) *Cluster {
	t.Helper()
	checkGoroutines(t)
	kc, kv, cdi := kubevirtsim.NewFakeClientsWithCDI(kubevirtsim.Seed()...)
	ctx, cancel := context.WithCancel(context.Background())
	ctrl := kubevirtsim.NewController(kv, kc, kubevirtsim.Options{StartDelay: 50 * time.Millisecond, StopDelay: 50 * time.Millisecond, CDI: cdi, DataVolumeDelay: delay})
	done := make(chan error, 1)
	go func() { done <- ctrl.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(waitTimeout):
			t.Errorf("controller did not stop")
		}
	})
	c := New(kc, kv, nil, Options{AssumeKubeVirtAPIs: true, CDI: cdi})
	c.SetVirtAPI(true)
	c.Tasks.Interval = 20 * time.Millisecond
	sctx, scancel := context.WithTimeout(ctx, waitTimeout)
	defer scancel()
	if err := c.Start(sctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

func isoDV(file, url string) translate.FileImport {
	return translate.FileImport{Content: translate.ContentISO, File: file, URL: url, Namespace: "default", StorageClass: "local-lvm", ClaimBytes: translate.GiB}
}

func TestISODownloadAndDelete(t *testing.T) {
	c := isoCluster(t, 300*time.Millisecond)
	ctx := context.Background()
	if !c.HasCDI() {
		t.Fatal("a cluster with a CDI client and AssumeKubeVirtAPIs watches DataVolumes")
	}
	dv, err := c.CreateFile(ctx, translate.FileDataVolume(isoDV("Alpine.iso", "https://mirror.example/alpine.iso")))
	if err != nil {
		t.Fatal(err)
	}
	if c.DataVolume("default", "alpine-iso") == nil {
		t.Fatal("the new DataVolume is not in the cache right away")
	}
	task, err := c.Tasks.Begin(ctx, TaskSpec{Node: "pve", Type: "download", ID: "Alpine.iso", User: "root@pam", Goal: GoalImported,
		Namespace: dv.Namespace, Name: dv.Name, UID: dv.UID})
	if err != nil {
		t.Fatal(err)
	}
	// While the import runs, the claim exists but is not populated.
	eventually(t, "the claim of the running import", func() (bool, string) {
		pvc := c.CachedPVC("default", "alpine-iso")
		if pvc == nil {
			return false, "no claim"
		}
		return true, ""
	})
	if pvc, dv := c.CachedPVC("default", "alpine-iso"), c.DataVolume("default", "alpine-iso"); dv.Status.Phase != cdiv1.Succeeded && c.ClaimPopulated(pvc) {
		t.Fatalf("a claim whose import is %s counts as populated", dv.Status.Phase)
	}
	ended := waitTaskEnd(t, c, task.UPID.String())
	if ended.ExitStatus != translate.ExitOK || !strings.Contains(strings.Join(ended.Log, "\n"), "download of 'https://mirror.example/alpine.iso' to '/dev/pvc/default/alpine-iso' finished") {
		t.Fatalf("download task: %s %q", ended.ExitStatus, ended.Log)
	}
	pvc := c.CachedPVC("default", "alpine-iso")
	if pvc == nil || pvc.Annotations[translate.AnnotationISOFile] != "Alpine.iso" || !c.ClaimPopulated(pvc) {
		t.Fatalf("claim after the import: %+v", pvc)
	}

	// A second download of the file (or one named alike) is refused.
	var exists *FileExistsError
	if _, err := c.CreateFile(ctx, translate.FileDataVolume(isoDV("alpine.iso", "https://mirror.example/other.iso"))); !errors.As(err, &exists) || exists.Name != "alpine-iso" {
		t.Fatalf("second download: %v", err)
	}
	// A claim an admin made is not overwritten either.
	admin := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "win-iso", Namespace: "default"}}
	if _, err := c.own.kube.CoreV1().PersistentVolumeClaims("default").Create(ctx, admin, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateFile(ctx, translate.FileDataVolume(isoDV("win.iso", "https://mirror.example/win.iso"))); !errors.As(err, &exists) {
		t.Fatalf("download over an admin's claim: %v", err)
	}

	// VMs using the claim are found.
	vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "installer", Namespace: "default", Labels: map[string]string{translate.LabelVMID: "777"}},
		Spec: kubevirtv1.VirtualMachineSpec{RunStrategy: ptr.To(kubevirtv1.RunStrategyHalted), Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{Spec: kubevirtv1.VirtualMachineInstanceSpec{
			Volumes: []kubevirtv1.Volume{{Name: "ide2", VolumeSource: kubevirtv1.VolumeSource{PersistentVolumeClaim: &kubevirtv1.PersistentVolumeClaimVolumeSource{
				PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: "alpine-iso", ReadOnly: true}}}}},
		}}}}
	if _, err := c.CreateVM(ctx, vm); err != nil {
		t.Fatal(err)
	}
	if users := c.FileUsers("default", "alpine-iso"); len(users) != 1 || users[0].VMID != 777 {
		t.Fatalf("users of the claim: %v", users)
	}
	if users := c.FileUsers("lab", "alpine-iso"); len(users) != 0 {
		t.Fatalf("users in another namespace: %v", users)
	}

	// Deleting goes through the DataVolume; the claim follows.
	if err := c.DeleteFile(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	del, err := c.Tasks.Begin(ctx, TaskSpec{Node: "pve", Type: "imgdel", ID: "local-lvm", User: "root@pam", Goal: GoalClaimGone,
		Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID, Object: "local-lvm:iso/Alpine.iso"})
	if err != nil {
		t.Fatal(err)
	}
	gone := waitTaskEnd(t, c, del.UPID.String())
	if gone.ExitStatus != translate.ExitOK || !strings.Contains(strings.Join(gone.Log, "\n"), "Removed volume 'local-lvm:iso/Alpine.iso'") {
		t.Fatalf("delete task: %s %q", gone.ExitStatus, gone.Log)
	}
	if c.DataVolume("default", "alpine-iso") != nil {
		t.Fatal("the DataVolume is still cached")
	}
	// A claim without a DataVolume is deleted itself.
	eventually(t, "the admin's claim in the cache", func() (bool, string) { return c.CachedPVC("default", "win-iso") != nil, "" })
	if err := c.DeleteFile(ctx, c.CachedPVC("default", "win-iso")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the admin's claim to go", func() (bool, string) { return c.CachedPVC("default", "win-iso") == nil, "" })
}

func TestISODownloadFails(t *testing.T) {
	c := isoCluster(t, 100*time.Millisecond)
	ctx := context.Background()
	dv, err := c.CreateFile(ctx, translate.FileDataVolume(isoDV("gone.iso", "http://fail.invalid/gone.iso")))
	if err != nil {
		t.Fatal(err)
	}
	task, err := c.Tasks.Begin(ctx, TaskSpec{Node: "pve", Type: "download", ID: "gone.iso", User: "root@pam", Goal: GoalImported,
		Namespace: dv.Namespace, Name: dv.Name, UID: dv.UID})
	if err != nil {
		t.Fatal(err)
	}
	ended := waitTaskEnd(t, c, task.UPID.String())
	if !strings.HasPrefix(ended.ExitStatus, "download failed: Unable to connect to http data source") || !strings.Contains(ended.ExitStatus, "fail.invalid") {
		t.Fatalf("exit %q", ended.ExitStatus)
	}
	// The failed import's claim does not count as holding the image.
	if pvc := c.CachedPVC("default", "gone-iso"); pvc == nil || c.ClaimPopulated(pvc) {
		t.Fatalf("claim of a failed import: %+v", pvc)
	}

	// A task whose DataVolume never shows (here: a namesake) ends at its
	// deadline, saying where the import stood.
	dv2, err := c.CreateFile(ctx, translate.FileDataVolume(isoDV("slow.iso", "https://mirror.example/slow.iso")))
	if err != nil {
		t.Fatal(err)
	}
	spec := TaskSpec{Node: "pve", Type: "download", ID: "slow.iso", User: "root@pam", Goal: GoalImported, Namespace: dv2.Namespace, Name: dv2.Name, UID: "not-" + dv2.UID, Timeout: 200 * time.Millisecond}
	short, err := c.Tasks.Begin(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if ended := waitTaskEnd(t, c, short.UPID.String()); !strings.HasPrefix(ended.ExitStatus, "download failed: timeout waiting for DataVolume default/slow-iso") {
		t.Fatalf("exit %q", ended.ExitStatus)
	}
}

func TestISOWithoutCDI(t *testing.T) {
	e := newEnv(t, envOptions{})
	c := e.cluster(Options{}, true)
	if c.HasCDI() {
		t.Fatal("HasCDI without a CDI client")
	}
	if _, err := c.CreateFile(e.ctx, translate.FileDataVolume(isoDV("a.iso", "https://x.example/a.iso"))); !errors.Is(err, ErrNoCDI) {
		t.Fatalf("CreateFile: %v", err)
	}
	task, err := c.Tasks.Begin(e.ctx, TaskSpec{Node: "pve", Type: "download", ID: "a.iso", User: "root@pam", Goal: GoalImported, Namespace: "default", Name: "a-iso"})
	if err != nil {
		t.Fatal(err)
	}
	if ended := waitTaskEnd(t, c, task.UPID.String()); ended.ExitStatus != ErrNoCDI.Error() {
		t.Fatalf("exit %q", ended.ExitStatus)
	}
}

func TestFileClaimsAndTransferred(t *testing.T) {
	c := isoCluster(t, 0)
	ctx := context.Background()
	if got := c.DefaultStorageClass(); got != "local-lvm" {
		t.Fatalf("default StorageClass %q (the seed's local-lvm is the cluster default)", got)
	}
	f := isoDV("noble.qcow2", "https://mirror.example/noble.qcow2")
	f.Content, f.Pending, f.FileSize = translate.ContentImport, "checksum", 600*translate.MiB
	if _, err := c.CreateFile(ctx, translate.FileDataVolume(f)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateFile(ctx, translate.FileDataVolume(isoDV("a.iso", "https://mirror.example/a.iso"))); err != nil {
		t.Fatal(err)
	}
	eventually(t, "both claims, indexed by content", func() (bool, string) {
		imp, iso, all := c.FileClaims(translate.ContentImport), c.FileClaims(translate.ContentISO), c.FileClaims("")
		if len(imp) != 1 || len(iso) != 1 || len(all) != 2 {
			return false, fmt.Sprintf("import %d, iso %d, all %d", len(imp), len(iso), len(all))
		}
		if imp[0].Name != "import-noble-qcow2" || all[0].Name != "a-iso" || imp[0].Annotations[translate.AnnotationFilePending] != "checksum" {
			return false, fmt.Sprintf("%s %s %v", imp[0].Name, all[0].Name, imp[0].Annotations)
		}
		return true, ""
	})
	if err := c.FileTransferred(ctx, "default", "import-noble-qcow2", 0, "sha256:abcd"); err != nil {
		t.Fatal(err)
	}
	if pvc := c.CachedPVC("default", "import-noble-qcow2"); pvc.Annotations[translate.AnnotationFilePending] != "" || translate.FileSizeOf(pvc.Annotations) != 600*translate.MiB ||
		pvc.Annotations[translate.AnnotationChecksum] != "sha256:abcd" {
		t.Fatalf("claim after the check: %v", pvc.Annotations)
	}
	if dv, _ := c.own.cdi.CdiV1beta1().DataVolumes("default").Get(ctx, "import-noble-qcow2", metav1.GetOptions{}); dv.Annotations[translate.AnnotationFilePending] != "" || dv.Annotations[translate.AnnotationChecksum] != "sha256:abcd" {
		t.Fatalf("DataVolume after the check: %v", dv.Annotations)
	}
}

// An upload: a worker task runs while the plugin sends the bytes through
// CDI's upload path (simulated: the fake clientset's token, the proxy's
// in-process transport), and ends with the lines it adds.
func TestUploadWithWorker(t *testing.T) {
	kc, kv, cdi := kubevirtsim.NewFakeClientsWithCDI(kubevirtsim.Seed()...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctrl := kubevirtsim.NewController(kv, kc, kubevirtsim.Options{CDI: cdi})
	go func() { _ = ctrl.Run(ctx) }()
	up := cdi.(*kubevirtsim.FakeCDIClientset).UploadProxy()
	c := New(kc, kv, nil, Options{AssumeKubeVirtAPIs: true, CDI: cdi, UploadProxy: &UploadProxyConfig{URL: "https://proxy.example", Client: &http.Client{Transport: up.Transport()}}})
	c.Tasks.Interval = 20 * time.Millisecond
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop()

	f := isoDV("up.iso", "")
	f.Upload = true
	dv, err := c.CreateFile(ctx, translate.FileDataVolume(f))
	if err != nil {
		t.Fatal(err)
	}
	w, task, err := c.Tasks.BeginWorker(ctx, TaskSpec{Node: "pve", Type: "imgcopy", User: "root@pam", Namespace: "default", Name: dv.Name, Log: []string{"starting file import"}})
	if err != nil || !task.Running() {
		t.Fatalf("worker task: %+v %v", task, err)
	}
	data := strings.Repeat("iso ", 4096)
	if err := c.Upload(ctx, "default", dv.Name, dv.UID, strings.NewReader(data), int64(len(data)), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	w.EndWith(ctx, translate.ExitOK, []string{"finished file import successfully"})
	ended := waitTaskEnd(t, c, task.UPID.String())
	if ended.ExitStatus != translate.ExitOK || strings.Join(ended.Log, "|") != "starting file import|finished file import successfully|TASK OK" {
		t.Fatalf("task: %s %q", ended.ExitStatus, ended.Log)
	}
	eventually(t, "the DataVolume to succeed", func() (bool, string) {
		d := c.DataVolume("default", dv.Name)
		return d != nil && d.Status.Phase == cdiv1.Succeeded, fmt.Sprint(d.Status.Phase)
	})
	sum := sha256.Sum256([]byte(data))
	// The simulator's record of what it received is no key of ours: the
	// plugin's cache leaves it out, the apiserver has it.
	pvc, err := kc.CoreV1().PersistentVolumeClaims("default").Get(ctx, dv.Name, metav1.GetOptions{})
	if err != nil || pvc.Annotations[kubevirtsim.AnnotationUploadedSHA256] != hex.EncodeToString(sum[:]) {
		t.Fatalf("the proxy got other bytes: %v %v", pvc.GetAnnotations(), err)
	}
	// A second upload is refused by the proxy, not sent anywhere else.
	if err := c.Upload(ctx, "default", dv.Name, dv.UID, strings.NewReader("x"), 1, time.Second); err == nil || !strings.Contains(err.Error(), "is Succeeded, not waiting for an upload") {
		t.Fatalf("second upload: %v", err)
	}
	// A worker whose replica stops renewing ends with ExitWorkerLost.
	shortLease(t, 200*time.Millisecond, time.Hour)
	lost, task2, err := c.Tasks.BeginWorker(ctx, TaskSpec{Node: "pve", Type: "download", User: "root@pam"})
	if err != nil {
		t.Fatal(err)
	}
	if ended := waitTaskEnd(t, c, task2.UPID.String()); ended.ExitStatus != ExitWorkerLost {
		t.Fatalf("lost worker: %s", ended.ExitStatus)
	}
	lost.End(ctx, translate.ExitOK) // too late: the first answer stands
	if got, _ := c.Tasks.Get(ctx, task2.UPID.String()); got.ExitStatus != ExitWorkerLost {
		t.Fatalf("after a late End: %s", got.ExitStatus)
	}
}

// A file deleted a moment ago whose claim is still going (a finalizer) is
// waited for, not a reason to refuse the new one; a file that stays is.
func TestCreateFileAfterDeletedOne(t *testing.T) {
	c := isoCluster(t, 0)
	ctx := context.Background()
	now := metav1.Now()
	pvcs := c.own.kube.CoreV1().PersistentVolumeClaims("default")
	if _, err := pvcs.Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{
		Name: "a-iso", Namespace: "default", DeletionTimestamp: &now, Finalizers: []string{"kubernetes.io/pvc-protection"},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond) // the protection controller, later
		_ = pvcs.Delete(context.Background(), "a-iso", metav1.DeleteOptions{})
	}()
	if _, err := c.CreateFile(ctx, translate.FileDataVolume(isoDV("a.iso", "https://mirror.example/a.iso"))); err != nil {
		t.Fatalf("a file whose claim was going: %v", err)
	}
	var exists *FileExistsError
	if _, err := c.CreateFile(ctx, translate.FileDataVolume(isoDV("a.iso", "https://mirror.example/a.iso"))); !errors.As(err, &exists) {
		t.Fatalf("a file that exists: %v", err)
	}
}
