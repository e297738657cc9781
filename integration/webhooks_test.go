package integration

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	snapshotv1 "kubevirt.io/api/snapshot/v1beta1"

	"github.com/caddy-proxmox/caddy-proxmox/internal/admissiontest"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// TestWebhookDenialIsPVEShaped: a change KubeVirt's own VM webhook refuses
// and the API cannot tell beforehand (sockets above the maxSockets a
// kubectl user set for CPU hotplug) is answered as PVE answers a refusal:
// a 500 whose message and reason phrase give KubeVirt's reason; never a
// raw 422, nor a 503 "keeps changing" after retrying a write that cannot
// succeed. The VM is left as it was.
func TestWebhookDenialIsPVEShaped(t *testing.T) {
	vm := kubectlVM(t, "it-max-sockets", func(spec *kubevirtv1.VirtualMachineInstanceSpec) {
		spec.Domain.CPU = &kubevirtv1.CPU{Sockets: 1, Cores: 1, MaxSockets: 2}
	})
	rows := waitRows(t, func(r map[string][]map[string]any) bool { return len(r["it-max-sockets"]) == 1 })
	row := rows["it-max-sockets"][0]
	path := "/nodes/" + row["node"].(string) + "/qemu/" + strconv.Itoa(int(row["vmid"].(float64)))
	a := pve(t)
	const reason = "Number of sockets in CPU topology is greater than the maximum sockets allowed"
	ans := a.Do("PUT", path+"/config", form("sockets", "4"))
	if ans.Code != 500 || !strings.HasPrefix(ans.Message, reason) || !strings.Contains(ans.Status, reason) ||
		!strings.Contains(ans.Message, "virtualmachine-validator.kubevirt.io") {
		t.Fatalf("sockets above maxSockets: %s %s", ans.Status, ans.Raw)
	}
	if strings.Count(ans.Message, reason) != 1 {
		t.Errorf("the reason is given more than once: %s", ans.Message)
	}
	got, err := env.KubeVirt.KubevirtV1().VirtualMachines("default").Get(context.Background(), vm.Name, metav1.GetOptions{})
	if err != nil || got.Spec.Template.Spec.Domain.CPU.Sockets != 1 || got.Generation != vm.Generation {
		t.Fatalf("the VM changed: %v %+v", err, got.Spec.Template.Spec.Domain.CPU)
	}
}

// kubectlVM creates a stopped VM the way a kubectl user would, with edit
// shaping its template, and deletes it when the test ends.
func kubectlVM(t *testing.T, name string, edit func(*kubevirtv1.VirtualMachineInstanceSpec)) *kubevirtv1.VirtualMachine {
	t.Helper()
	rs := kubevirtv1.RunStrategyHalted
	vm := &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: kubevirtv1.VirtualMachineSpec{RunStrategy: &rs, Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
			Spec: kubevirtv1.VirtualMachineInstanceSpec{Domain: kubevirtv1.DomainSpec{CPU: &kubevirtv1.CPU{Cores: 1}}},
		}},
	}
	edit(&vm.Spec.Template.Spec)
	out, err := env.KubeVirt.KubevirtV1().VirtualMachines("default").Create(context.Background(), vm, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.KubeVirt.KubevirtV1().VirtualMachines("default").Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return out
}

// TestCloneKeepsInlineCloudInit: cloning VMs made with kubectl whose
// cloud-init data is inline (NoCloud with base64 network data, ConfigDrive
// user data) passes KubeVirt's VM webhook, which refuses a drive with both
// inline data and a Secret: the clone keeps the source's own data, as
// PVE's clone keeps cicustom snippets, and gets no Secret for it.
func TestCloneKeepsInlineCloudInit(t *testing.T) {
	const user = "#cloud-config\npackages: [nginx]\n"
	network := base64.StdEncoding.EncodeToString([]byte("version: 2\nethernets:\n  eth0:\n    dhcp4: true\n"))
	disk := func(spec *kubevirtv1.VirtualMachineInstanceSpec, src kubevirtv1.VolumeSource) {
		spec.Domain.Devices.Disks = []kubevirtv1.Disk{{Name: "cloudinitdisk", DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusVirtio}}}}
		spec.Volumes = []kubevirtv1.Volume{{Name: "cloudinitdisk", VolumeSource: src}}
	}
	sources := map[string]kubevirtv1.VolumeSource{
		"it-ci-nocloud": {CloudInitNoCloud: &kubevirtv1.CloudInitNoCloudSource{UserData: user, NetworkDataBase64: network}},
		"it-ci-configdrive": {CloudInitConfigDrive: &kubevirtv1.CloudInitConfigDriveSource{
			UserDataBase64: base64.StdEncoding.EncodeToString([]byte(user))}},
	}
	a := pve(t)
	for name, src := range sources {
		kubectlVM(t, name, func(spec *kubevirtv1.VirtualMachineInstanceSpec) { disk(spec, src) })
		rows := waitRows(t, func(r map[string][]map[string]any) bool { return len(r[name]) == 1 })
		row := rows[name][0]
		node := row["node"].(string)
		newID := nextID(a)
		var upid string
		a.OK("POST", "/nodes/"+node+"/qemu/"+strconv.Itoa(int(row["vmid"].(float64)))+"/clone", form("newid", newID, "name", name+"-copy"), &upid)
		if exit := a.WaitTask(upid); exit != "OK" {
			t.Fatalf("%s: clone: %s", name, exit)
		}
		clone := vmByID(t, newID)
		t.Cleanup(func() {
			var u string
			a.OK("DELETE", "/nodes/"+node+"/qemu/"+newID, nil, &u)
			a.WaitTask(u)
		})
		var got kubevirtv1.VolumeSource
		for _, v := range clone.Spec.Template.Spec.Volumes {
			if v.Name == "cloudinitdisk" {
				got = v.VolumeSource
			}
		}
		if !equality.Semantic.DeepEqual(got, src) {
			t.Errorf("%s: the clone's cloud-init %+v %+v, want the source's", name, got.CloudInitNoCloud, got.CloudInitConfigDrive)
		}
		// A Secret of the name may be left from an earlier VM of the id
		// (the test cluster has no garbage collector): none may be the
		// clone's.
		s, err := env.Kube.CoreV1().Secrets("default").Get(context.Background(), "vm-"+newID+"-cloudinit", metav1.GetOptions{})
		if err == nil && slices.ContainsFunc(s.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == clone.UID }) {
			t.Errorf("%s: a Secret was made for data the clone does not read", name)
		} else if err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	}
}

// TestPinnedMachineTypesRun: PVE's pinned machine types (the PVE 8 GUI
// pins pc-q35-8.1 for Windows guests; +pveN revisions) pass KubeVirt's
// webhook but no node is labelled for them, so such a VM would never
// schedule: the VM runs as q35, and the config keeps PVE's value.
func TestPinnedMachineTypesRun(t *testing.T) {
	a := pve(t)
	node := firstNode(a)
	for _, machine := range []string{"pc-q35-8.1", "pc-q35-9.2+pve1,viommu=intel", "pc-i440fx-9.2+pve1"} {
		id := nextID(a)
		path := "/nodes/" + node + "/qemu/" + id
		var upid string
		a.OK("POST", "/nodes/"+node+"/qemu", form("vmid", id, "name", "pinned", "machine", machine), &upid)
		if exit := a.WaitTask(upid); exit != "OK" {
			t.Fatalf("%s: create: %s", machine, exit)
		}
		if m := vmByID(t, id).Spec.Template.Spec.Domain.Machine; m == nil || m.Type != "q35" {
			t.Errorf("%s: KubeVirt machine %+v, want q35", machine, m)
		}
		var cfg map[string]any
		a.OK("GET", path+"/config", nil, &cfg)
		if cfg["machine"] != machine {
			t.Errorf("config machine %v, want %q", cfg["machine"], machine)
		}
		a.OK("POST", path+"/status/start", form("timeout", "60"), &upid)
		if exit := a.WaitTask(upid); exit != "OK" {
			t.Errorf("%s: start: %s", machine, exit)
		}
		a.OK("POST", path+"/status/stop", nil, &upid)
		a.WaitTask(upid)
		a.OK("DELETE", path, nil, &upid)
		a.WaitTask(upid)
	}
	// qemu-server's format holds; a machine for aarch64 is refused up front.
	ans := a.Do("POST", "/nodes/"+node+"/qemu", form("vmid", nextID(a), "machine", "virt"))
	if ans.Code != 400 || !strings.Contains(ans.Errors["machine"], "aarch64") {
		t.Errorf("machine=virt: %s %s", ans.Status, ans.Raw)
	}
}

// TestDiskSerials: PVE's serial= is url-encoded; KubeVirt's VM webhook
// takes only [A-Za-z0-9_.+-]. An encoded serial whose decoded form fits is
// given to the guest decoded (as QEMU gets it on PVE) and the config keeps
// PVE's value; one KubeVirt cannot give is refused up front with a
// parameter error saying why.
func TestDiskSerials(t *testing.T) {
	a := pve(t)
	node := firstNode(a)
	id := nextID(a)
	createVM(t, a, node, id, "name", "serials", "scsi0", "local-path:1,serial=WD-ABC%2B1")
	path := "/nodes/" + node + "/qemu/" + id
	if d := vmByID(t, id).Spec.Template.Spec.Domain.Devices.Disks; len(d) != 1 || d[0].Serial != "WD-ABC+1" {
		t.Fatalf("disks %+v", d)
	}
	var cfg map[string]any
	a.OK("GET", path+"/config", nil, &cfg)
	if !strings.Contains(cfg["scsi0"].(string), ",serial=WD-ABC%2B1") {
		t.Fatalf("config scsi0 %v", cfg["scsi0"])
	}
	ans := a.Do("PUT", path+"/config", form("scsi1", "local-path:1,serial=my%20disk"))
	if ans.Code != 400 || !strings.Contains(ans.Errors["scsi1"], "serial 'my disk' is not supported") {
		t.Fatalf("a serial KubeVirt cannot give: %s %s", ans.Status, ans.Raw)
	}
}

// TestSnapshotGateOff: with KubeVirt's Snapshot feature gate off (Beta in
// v1.8, off by default; the snapshot API is served all the same) taking
// and rolling back snapshots are refused as PVE refuses them on storage
// that cannot snapshot, saying what to turn on; listing still works.
func TestSnapshotGateOff(t *testing.T) {
	ctx := context.Background()
	a := pve(t)
	node := firstNode(a)
	id := nextID(a)
	path := "/nodes/" + node + "/qemu/" + id
	var upid string
	createVM(t, a, node, id, "name", "gate", "scsi0", "ceph-block:1")
	a.OK("POST", path+"/snapshot", form("snapname", "before"), &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("snapshot with the gate on: %s", exit)
	}
	setGates(t, "Snapshot", false)
	t.Cleanup(func() { setGates(t, "Snapshot", true) })

	const refusal = "snapshot feature is not available: KubeVirt's Snapshot feature gate is off"
	ans := a.Do("POST", path+"/snapshot", form("snapname", "after"))
	if ans.Code != 500 || !strings.HasPrefix(ans.Message, refusal) || !strings.HasPrefix(ans.Status, "500 "+refusal) {
		t.Errorf("snapshot with the gate off: %s %s", ans.Status, ans.Raw)
	}
	ans = a.Do("POST", path+"/snapshot/before/rollback", nil)
	if ans.Code != 500 || !strings.HasPrefix(ans.Message, refusal) {
		t.Errorf("rollback with the gate off: %s %s", ans.Status, ans.Raw)
	}
	var snaps []map[string]any
	a.OK("GET", path+"/snapshot", nil, &snaps)
	if len(snaps) != 2 || snaps[0]["name"] != "before" || snaps[1]["name"] != "current" {
		t.Errorf("listing with the gate off: %v", snaps)
	}
	// An earlier VM of the same id may have left snapshots: count this
	// VM's own.
	vm := vmByID(t, id)
	l, err := env.KubeVirt.SnapshotV1beta1().VirtualMachineSnapshots(vm.Namespace).List(ctx, metav1.ListOptions{LabelSelector: translate.LabelVMID + "=" + id})
	own := 0
	for _, s := range l.Items {
		if s.Status != nil && s.Status.SourceUID != nil && *s.Status.SourceUID == vm.UID {
			own++
		}
	}
	if err != nil || own != 1 {
		t.Errorf("snapshots of the VM in the cluster: %d of %d, %v", own, len(l.Items), err)
	}
}

// setGates turns a KubeVirt feature gate on or off for the suite's
// cluster and waits until virt-api judges by it (its snapshot webhook
// answers a dry run accordingly).
func setGates(t *testing.T, gate string, on bool) {
	t.Helper()
	ctx := context.Background()
	var gates []string
	if on {
		gates = []string{gate}
	}
	if err := env.SetFeatureGates(ctx, gates...); err != nil {
		t.Fatal(err)
	}
	probe := &snapshotv1.VirtualMachineSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: "gate-probe", Namespace: "default"},
		Spec: snapshotv1.VirtualMachineSnapshotSpec{Source: corev1.TypedLocalObjectReference{
			APIGroup: ptrTo("kubevirt.io"), Kind: "VirtualMachine", Name: "gate-probe"}},
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := env.KubeVirt.SnapshotV1beta1().VirtualMachineSnapshots("default").Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		off := err != nil && strings.Contains(err.Error(), "feature gate not enabled")
		if off != on {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("virt-api did not take up %s=%v: %v", gate, on, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestLockedWhileSnapshotting: while KubeVirt takes or restores a
// snapshot it locks the VM (status.snapshotInProgress, restoreInProgress)
// and its webhook refuses run-state and volume changes. The API holds
// PVE's "snapshot" and "rollback" locks for that time, from the call on:
// power and config calls meanwhile are refused as PVE refuses them ("VM is
// locked (snapshot)"), never with a raw 422, and the snapshot and rollback
// tasks end only once KubeVirt has let go of the VM, so that the next call
// of a client that waited for them succeeds.
func TestLockedWhileSnapshotting(t *testing.T) {
	ctx := context.Background()
	a := pve(t)
	node := firstNode(a)
	id := nextID(a)
	path := "/nodes/" + node + "/qemu/" + id
	var upid string
	createVM(t, a, node, id, "name", "locks", "scsi0", "ceph-block:1")
	t.Cleanup(func() {
		var u string
		a.OK("POST", path+"/status/stop", nil, &u)
		a.WaitTask(u)
	})
	locked := func(lock string) {
		t.Helper()
		for _, c := range []struct{ method, path, key, value string }{
			{"POST", "/status/start", "", ""},
			{"PUT", "/config", "delete", "scsi0"},
			{"POST", "/snapshot", "snapname", "second"},
		} {
			ans := a.Do(c.method, path+c.path, form(c.key, c.value))
			if want := "VM is locked (" + lock + ")"; ans.Code != 500 || ans.Message != want+"\n" || ans.Status != "500 "+want {
				t.Errorf("%s %s during the %s: %s %s", c.method, c.path, lock, ans.Status, ans.Raw)
			}
		}
		if st := a.Status(node, id); st["lock"] != lock {
			t.Errorf("status/current lock %v, want %s", st["lock"], lock)
		}
		// The listing shows it too, although no VM or instance changed.
		var rows []map[string]any
		a.OK("GET", "/cluster/resources", url.Values{"type": {"vm"}}, &rows)
		for _, r := range rows {
			if fmt.Sprint(r["vmid"]) == id && r["lock"] != lock {
				t.Errorf("/cluster/resources lock %v, want %s", r["lock"], lock)
			}
		}
	}
	unlocked := func(what string) {
		t.Helper()
		vm, err := env.KubeVirt.KubevirtV1().VirtualMachines(vmByID(t, id).Namespace).Get(ctx, vmByID(t, id).Name, metav1.GetOptions{})
		if err != nil || vm.Status.SnapshotInProgress != nil || vm.Status.RestoreInProgress != nil {
			t.Fatalf("the %s task ended while KubeVirt still locks the VM: %v %+v", what, err, vm.Status)
		}
		// The client's next call goes through.
		a.OK("POST", path+"/status/start", nil, &upid)
		if exit := a.WaitTask(upid); exit != "OK" {
			t.Fatalf("start right after the %s: %s", what, exit)
		}
		if st := a.Status(node, id); st["lock"] != nil {
			t.Errorf("status/current lock %v after the %s", st["lock"], what)
		}
	}

	a.OK("POST", path+"/snapshot", form("snapname", "first"), &upid)
	locked("snapshot")
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("snapshot: %s", exit)
	}
	unlocked("snapshot")

	a.OK("POST", path+"/snapshot/first/rollback", nil, &upid)
	locked("rollback")
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("rollback: %s", exit)
	}
	unlocked("rollback")
}

// TestAdmissionTableOnVirtAPI: KubeVirt's own virt-api refuses and admits
// the table's writes in the words the table gives; kubevirtsim's
// TestAdmissionTable runs the same table on the simulator's stand-in
// webhooks, so that the two cannot drift.
func TestAdmissionTableOnVirtAPI(t *testing.T) {
	admissiontest.Run(t, admissiontest.Cluster{
		KubeVirt:  env.KubeVirt,
		Namespace: "default",
		Gates:     []string{"Snapshot"},
		SetGates: func(t *testing.T, gates ...string) {
			setGates(t, "Snapshot", slices.Contains(gates, "Snapshot"))
		},
	})
}
