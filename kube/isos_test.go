package kube

import (
	"context"
	"errors"
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

func isoDV(file, url string) translate.ISODownload {
	return translate.ISODownload{File: file, URL: url, Namespace: "default", StorageClass: "local-lvm", Bytes: translate.GiB}
}

func TestISODownloadAndDelete(t *testing.T) {
	c := isoCluster(t, 300*time.Millisecond)
	ctx := context.Background()
	if !c.HasCDI() {
		t.Fatal("a cluster with a CDI client and AssumeKubeVirtAPIs watches DataVolumes")
	}
	dv, err := c.CreateISO(ctx, translate.ISODataVolume(isoDV("Alpine.iso", "https://mirror.example/alpine.iso")))
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
	var exists *ISOExistsError
	if _, err := c.CreateISO(ctx, translate.ISODataVolume(isoDV("alpine.iso", "https://mirror.example/other.iso"))); !errors.As(err, &exists) || exists.Name != "alpine-iso" {
		t.Fatalf("second download: %v", err)
	}
	// A claim an admin made is not overwritten either.
	admin := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "win-iso", Namespace: "default"}}
	if _, err := c.own.kube.CoreV1().PersistentVolumeClaims("default").Create(ctx, admin, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateISO(ctx, translate.ISODataVolume(isoDV("win.iso", "https://mirror.example/win.iso"))); !errors.As(err, &exists) {
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
	if users := c.ISOUsers("default", "alpine-iso"); len(users) != 1 || users[0].VMID != 777 {
		t.Fatalf("users of the claim: %v", users)
	}
	if users := c.ISOUsers("lab", "alpine-iso"); len(users) != 0 {
		t.Fatalf("users in another namespace: %v", users)
	}

	// Deleting goes through the DataVolume; the claim follows.
	if err := c.DeleteISO(ctx, pvc); err != nil {
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
	if err := c.DeleteISO(ctx, c.CachedPVC("default", "win-iso")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the admin's claim to go", func() (bool, string) { return c.CachedPVC("default", "win-iso") == nil, "" })
}

func TestISODownloadFails(t *testing.T) {
	c := isoCluster(t, 100*time.Millisecond)
	ctx := context.Background()
	dv, err := c.CreateISO(ctx, translate.ISODataVolume(isoDV("gone.iso", "http://fail.invalid/gone.iso")))
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
	dv2, err := c.CreateISO(ctx, translate.ISODataVolume(isoDV("slow.iso", "https://mirror.example/slow.iso")))
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
	if _, err := c.CreateISO(e.ctx, translate.ISODataVolume(isoDV("a.iso", "https://x.example/a.iso"))); !errors.Is(err, ErrNoCDI) {
		t.Fatalf("CreateISO: %v", err)
	}
	task, err := c.Tasks.Begin(e.ctx, TaskSpec{Node: "pve", Type: "download", ID: "a.iso", User: "root@pam", Goal: GoalImported, Namespace: "default", Name: "a-iso"})
	if err != nil {
		t.Fatal(err)
	}
	if ended := waitTaskEnd(t, c, task.UPID.String()); ended.ExitStatus != ErrNoCDI.Error() {
		t.Fatalf("exit %q", ended.ExitStatus)
	}
}
