package behaviour

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// stateClaims lists the claims KubeVirt's backend storage takes as the
// EFI/TPM state of the VM ns/name (its label).
func stateClaims(t *testing.T, ns, name string) []corev1.PersistentVolumeClaim {
	t.Helper()
	list, err := env.DirectKube.CoreV1().PersistentVolumeClaims(ns).List(context.Background(),
		metav1.ListOptions{LabelSelector: translate.StateClaimLabel + "=" + name})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// TestCloneCarriesEFIState: PVE's clone copies efidisk0 and tpmstate0.
// On the real virt-controller and CDI, the clone of a VM that has run
// gets a copy of the source's state claim, which KubeVirt takes as the
// clone's own when it starts (it makes no claim of its own); a running
// source is refused up front, since CDI copies the claim only once no
// guest uses it.
func TestCloneCarriesEFIState(t *testing.T) {
	r := realOnly(t)
	const src, dst = "7220", "7221"
	must(t, r, "create", r.task("POST", "/nodes/"+firstNode+"/qemu", form("vmid", src, "name", "b-efi-src", "memory", "512",
		"scsi0", "ceph-rbd:1", "bios", "ovmf", "efidisk0", "ceph-rbd:1,efitype=4m,pre-enrolled-keys=0", "tpmstate0", "ceph-rbd:1")))
	t.Cleanup(func() { destroy(src).do(r) })
	must(t, r, "start", r.task("POST", r.vm(src, "status/start"), nil))
	must(t, r, "running", r.waitStatus(src, "running", time.Minute))
	vm := vmObject(t, src)
	made := stateClaims(t, vm.Namespace, vm.Name)
	if len(made) != 1 {
		t.Fatalf("KubeVirt made %d state claims for the running source, want 1", len(made))
	}
	// Its storage lists the claim as PVE lists the VM's efidisk0 and
	// tpmstate0 volumes.
	class := *made[0].Spec.StorageClassName
	var rows []map[string]any
	r.b.api.OK("GET", "/nodes/"+firstNode+"/storage/"+class+"/content", form("vmid", src), &rows)
	var volids []string
	for _, row := range rows {
		volids = append(volids, fmt.Sprint(row["volid"]))
	}
	listed := " " + strings.Join(volids, " ") + " "
	for _, want := range []string{class + ":vm-" + src + "-efidisk", class + ":vm-" + src + "-tpmstate"} {
		if !strings.Contains(listed, " "+want+" ") {
			t.Errorf("VM %s's volumes on %s: %s, want %s among them", src, class, listed, want)
		}
	}
	if strings.Contains(listed, translate.StateClaimLabel) {
		t.Errorf("VM %s's volumes on %s: %s, the state claim under its own name", src, class, listed)
	}
	o := r.task("POST", r.vm(src, "clone"), form("newid", dst, "name", "b-efi-clone", "full", "1"))
	if o["code"] != 500 || !strings.Contains(brief(o), "EFI/TPM state claim") {
		t.Fatalf("clone of the running source: %s, want the refusal", brief(o))
	}
	must(t, r, "stop", r.task("POST", r.vm(src, "status/stop"), nil))

	must(t, r, "clone", r.task("POST", r.vm(src, "clone"), form("newid", dst, "name", "b-efi-clone", "full", "1")))
	t.Cleanup(func() { destroy(dst).do(r) })
	clone := vmObject(t, dst)
	for k := range clone.Annotations {
		// The clone task named the copy it waited for; no marker of it
		// stays on the user's VM.
		if strings.HasPrefix(k, translate.KeyPrefix+"state") {
			t.Errorf("the clone keeps the internal annotation %s=%s", k, clone.Annotations[k])
		}
	}
	want := translate.StateClaimName(clone.Name)
	got := stateClaims(t, clone.Namespace, clone.Name)
	if len(got) != 1 || got[0].Name != want || got[0].Status.Phase != corev1.ClaimBound {
		t.Fatalf("the clone's state after its task: %v, want claim %s bound", got, want)
	}
	must(t, r, "start clone", r.task("POST", r.vm(dst, "status/start"), nil))
	must(t, r, "clone running", r.waitStatus(dst, "running", time.Minute))
	if got := stateClaims(t, clone.Namespace, clone.Name); len(got) != 1 || got[0].Name != want {
		names := []string{}
		for _, c := range got {
			names = append(names, c.Name)
		}
		t.Fatalf("state claims of the started clone: %v, want KubeVirt to have taken %s", names, want)
	}
	vmi, err := env.KubeVirt.KubevirtV1().VirtualMachineInstances(clone.Namespace).Get(context.Background(), clone.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	used := ""
	for _, v := range vmi.Status.VolumeStatus {
		if v.PersistentVolumeClaimInfo != nil && strings.HasPrefix(v.PersistentVolumeClaimInfo.ClaimName, translate.StateClaimLabel) {
			used = v.PersistentVolumeClaimInfo.ClaimName
		}
	}
	if used != want {
		t.Errorf("the clone's instance keeps its state in %q, want %s", used, want)
	}
}
