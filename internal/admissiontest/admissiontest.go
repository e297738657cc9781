// Package admissiontest is one table of what KubeVirt v1.8's validating
// webhooks refuse and admit, in their words, for the writes this project's
// API and its users make. It runs against KubeVirt's own virt-api on the
// test cluster (integration) and against kubevirtsim's stand-in webhooks
// (the embedded simulator), so that the two cannot drift.
package admissiontest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	virtv1 "kubevirt.io/api/core/v1"
	snapshotv1 "kubevirt.io/api/snapshot/v1beta1"
	"kubevirt.io/client-go/kubevirt"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/caddy-proxmox/caddy-proxmox/testenv"
)

// Cluster is where the table runs.
type Cluster struct {
	KubeVirt  kubevirt.Interface
	Namespace string
	// Gates are the KubeVirt feature gates the cluster has on; the
	// table expects Snapshot among them and DeclarativeHotplugVolumes
	// not, as on a cluster that has turned snapshots on.
	Gates []string
	// SetGates turns exactly the given gates on and returns once the
	// cluster's webhooks judge by them.
	SetGates func(t *testing.T, gates ...string)
}

// Webhook names, as kube-apiserver gives them in a denial.
const (
	WebhookVM       = "virtualmachine-validator.kubevirt.io"
	WebhookSnapshot = "virtualmachinesnapshot-validator.snapshot.kubevirt.io"
	WebhookRestore  = "virtualmachinerestore-validator.snapshot.kubevirt.io"
)

// Case is one write of a VirtualMachine: a create of the base VM (halted,
// one core, no devices) as edit shapes it, or, when update is set, an
// update of that VM once created, with lock set on its status first.
type Case struct {
	Name   string
	Edit   func(vm *virtv1.VirtualMachine)
	Lock   func(st *virtv1.VirtualMachineStatus)
	Update func(vm *virtv1.VirtualMachine)
	// Denied is the VM webhook's message ("" when the write is
	// admitted).
	Denied string
}

const (
	disks   = "spec.template.spec.domain.devices.disks"
	sockets = "Number of sockets in CPU topology is greater than the maximum sockets allowed"
)

// Cases is the table.
var Cases = []Case{
	// I/O threads: virtio only (pkg/storage/admitters/disks.go).
	{Name: "iothread-scsi", Edit: disk(bus(virtv1.DiskBusSCSI), ioThread), Denied: "IOThreads are not supported for disks on a scsi bus"},
	{Name: "iothread-sata", Edit: disk(bus(virtv1.DiskBusSATA), ioThread), Denied: "IOThreads are not supported for disks on a sata bus"},
	{Name: "iothread-virtio", Edit: disk(bus(virtv1.DiskBusVirtio), ioThread)},
	{Name: "iothread-no-bus", Edit: disk(bus(""), ioThread)},
	// Serials.
	{Name: "serial-space", Edit: disk(bus(virtv1.DiskBusSCSI), serial("my disk")),
		Denied: disks + "[0] must be made up of the following characters [A-Za-z0-9_.+-], if specified"},
	{Name: "serial-long", Edit: disk(bus(virtv1.DiskBusSCSI), serial(strings.Repeat("a", 257))),
		Denied: disks + "[0] must be less than or equal to 256 in length, if specified"},
	{Name: "serial-ok", Edit: disk(bus(virtv1.DiskBusSCSI), serial("WD-ABC+1_x.y"))},
	// Buses and modes.
	{Name: "bus-ide", Edit: disk(bus("ide")), Denied: "IDE bus is not supported"},
	{Name: "cdrom-virtio", Edit: func(vm *virtv1.VirtualMachine) {
		addDisk(vm, virtv1.Disk{Name: "cd", DiskDevice: virtv1.DiskDevice{CDRom: &virtv1.CDRomTarget{Bus: virtv1.DiskBusVirtio}}}, true)
	}, Denied: "Bus type virtio is invalid for CD-ROM device"},
	{Name: "cache-unsafe", Edit: disk(bus(virtv1.DiskBusSCSI), func(d *virtv1.Disk) { d.Cache = "unsafe" }),
		Denied: disks + "[0].cache has invalid value unsafe"},
	{Name: "cache-writeback", Edit: disk(bus(virtv1.DiskBusSCSI), func(d *virtv1.Disk) { d.Cache = virtv1.CacheWriteBack })},
	{Name: "boot-order-twice", Edit: func(vm *virtv1.VirtualMachine) {
		one := uint(1)
		addDisk(vm, virtv1.Disk{Name: "a", BootOrder: &one, DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusVirtio}}}, true)
		addDisk(vm, virtv1.Disk{Name: "b", BootOrder: &one, DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusVirtio}}}, true)
	}, Denied: "Boot order for " + disks + "[1].bootOrder already set for a different device."},
	// Disks and volumes.
	{Name: "disk-without-volume", Edit: func(vm *virtv1.VirtualMachine) {
		addDisk(vm, virtv1.Disk{Name: "data", DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusSCSI}}}, false)
	}, Denied: disks + "[0].Name 'data' not found."},
	{Name: "empty-cdrom", Edit: func(vm *virtv1.VirtualMachine) {
		addDisk(vm, virtv1.Disk{Name: "ide2", DiskDevice: virtv1.DiskDevice{CDRom: &virtv1.CDRomTarget{Bus: virtv1.DiskBusSATA}}}, false)
	}, Denied: "DeclarativeHotplugVolumes feature gate not enabled, cannot define an empty CD-ROM disk"},
	{Name: "volume-without-disk", Edit: func(vm *virtv1.VirtualMachine) {
		vm.Spec.Template.Spec.Volumes = append(vm.Spec.Template.Spec.Volumes, claimVolume("data"))
	}},
	// Cloud-init.
	{Name: "cloudinit-inline-and-secret", Edit: cloudInit(virtv1.VolumeSource{CloudInitNoCloud: &virtv1.CloudInitNoCloudSource{
		UserData: "#cloud-config\n", UserDataSecretRef: &corev1.LocalObjectReference{Name: "ci"}}}),
		Denied: "spec.template.spec.volumes[0].cloudInitNoCloud must have only one userdatasource set."},
	{Name: "configdrive-network-twice", Edit: cloudInit(virtv1.VolumeSource{CloudInitConfigDrive: &virtv1.CloudInitConfigDriveSource{
		NetworkDataBase64: "dmVyc2lvbjogMgo=", NetworkDataSecretRef: &corev1.LocalObjectReference{Name: "ci"}}}),
		Denied: "spec.template.spec.volumes[0].cloudInitConfigDrive must have only one networkdata source set."},
	{Name: "cloudinit-empty", Edit: cloudInit(virtv1.VolumeSource{CloudInitNoCloud: &virtv1.CloudInitNoCloudSource{}}),
		Denied: "spec.template.spec.volumes[0].cloudInitNoCloud must have at least one userdatasource or one networkdatasource set."},
	{Name: "cloudinit-bad-base64", Edit: cloudInit(virtv1.VolumeSource{CloudInitNoCloud: &virtv1.CloudInitNoCloudSource{UserDataBase64: "not base64!"}}),
		Denied: "spec.template.spec.volumes[0].cloudInitNoCloud.userDataBase64.cloudInitNoCloud.userDataBase64 is not a valid base64 value."},
	{Name: "cloudinit-too-long", Edit: cloudInit(virtv1.VolumeSource{CloudInitNoCloud: &virtv1.CloudInitNoCloudSource{UserData: strings.Repeat("#", 2049)}}),
		Denied: "spec.template.spec.volumes[0].cloudInitNoCloud userdata exceeds 2048 byte limit. Should use UserDataSecretRef for larger data."},
	{Name: "cloudinit-secrets", Edit: cloudInit(virtv1.VolumeSource{CloudInitNoCloud: &virtv1.CloudInitNoCloudSource{
		UserDataSecretRef: &corev1.LocalObjectReference{Name: "ci"}, NetworkDataSecretRef: &corev1.LocalObjectReference{Name: "ci"}}})},
	// Machine types and CPUs (under KubeVirt's default rollout strategy,
	// LiveUpdate, the socket rule is checked twice).
	{Name: "machine-pinned-q35", Edit: machine("pc-q35-8.1")},
	{Name: "machine-i440fx", Edit: machine("pc-i440fx-9.2"),
		Denied: "spec.template.spec.domain.machine.type is not supported: pc-i440fx-9.2 (allowed values: [q35* pc-q35*])"},
	{Name: "sockets-above-max", Edit: func(vm *virtv1.VirtualMachine) {
		vm.Spec.Template.Spec.Domain.CPU = &virtv1.CPU{Cores: 1, Sockets: 4, MaxSockets: 2}
	}, Denied: sockets + ", " + sockets},
	// DataVolume templates (pkg/storage/admitters/data-volume-template.go).
	{Name: "template-unreferenced", Edit: func(vm *virtv1.VirtualMachine) {
		vm.Spec.DataVolumeTemplates = []virtv1.DataVolumeTemplateSpec{{ObjectMeta: metav1.ObjectMeta{Name: "orphan"}, Spec: blankDataVolume()}}
	}, Denied: "DataVolumeTemplate entry spec.dataVolumeTemplate[0] must be referenced in the VMI template's 'volumes' list"},
	// Run strategies.
	{Name: "running-and-strategy", Edit: func(vm *virtv1.VirtualMachine) { f := false; vm.Spec.Running = &f },
		Denied: "Running and RunStrategy are mutually exclusive. Note that Running is deprecated, please use RunStrategy instead"},
	{Name: "no-run-strategy", Edit: func(vm *virtv1.VirtualMachine) { vm.Spec.RunStrategy = nil }, Denied: "RunStrategy must be specified"},
	// Locks (pkg/storage/admitters/vm-storage-status.go).
	{Name: "snapshot-lock-volumes", Edit: disk(bus(virtv1.DiskBusSCSI)), Lock: snapshotLock,
		Update: func(vm *virtv1.VirtualMachine) {
			vm.Spec.Template.Spec.Domain.Devices.Disks = nil
			vm.Spec.Template.Spec.Volumes = nil
		}, Denied: `Cannot update vm disks or volumes until snapshot "adm-lock" completes`},
	{Name: "snapshot-lock-run-strategy", Lock: snapshotLock, Update: runStrategy(virtv1.RunStrategyAlways),
		Denied: `Cannot update vm running state until snapshot "adm-lock" completes`},
	{Name: "snapshot-lock-cpu", Lock: snapshotLock, Update: cores(2)},
	{Name: "restore-lock-run-strategy", Lock: restoreLock, Update: runStrategy(virtv1.RunStrategyManual),
		Denied: `Cannot update VM runStrategy until restore "adm-lock" completes`},
	{Name: "restore-lock-volumes", Lock: restoreLock, Update: func(vm *virtv1.VirtualMachine) {
		addDisk(vm, virtv1.Disk{Name: "data", DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusSCSI}}}, true)
	}},
	{Name: "restore-lock-cpu", Lock: restoreLock, Update: cores(2)},
	// Detaching a disk made from a template (the API's unusedN): the
	// template must go with the volume.
	{Name: "detach-leaves-template", Edit: templateDisk, Update: detach(false),
		Denied: "DataVolumeTemplate entry spec.dataVolumeTemplate[0] must be referenced in the VMI template's 'volumes' list"},
	{Name: "detach-drops-template", Edit: templateDisk, Update: detach(true)},
}

// Run writes every case's VM on c and checks the answer, then checks that
// snapshots and restores are refused with the Snapshot gate off.
func Run(t *testing.T, c Cluster) {
	t.Helper()
	for _, tc := range Cases {
		t.Run(tc.Name, func(t *testing.T) { runCase(t, c, tc) })
	}
	t.Run("snapshot-gate-off", func(t *testing.T) { runGateOff(t, c) })
}

func runCase(t *testing.T, c Cluster, tc Case) {
	ctx := context.Background()
	vms := c.KubeVirt.KubevirtV1().VirtualMachines(c.Namespace)
	vm := baseVM("adm-"+tc.Name, c.Namespace)
	if tc.Edit != nil {
		tc.Edit(vm)
	}
	created, err := vms.Create(ctx, vm, metav1.CreateOptions{})
	if err == nil {
		t.Cleanup(func() { _ = vms.Delete(context.Background(), vm.Name, metav1.DeleteOptions{}) })
	}
	if tc.Update == nil {
		checkAnswer(t, "create", err, WebhookVM, 422, tc.Denied)
		return
	}
	if err != nil {
		t.Fatalf("create before the update: %v", err)
	}
	if tc.Lock != nil {
		if err := retry.RetryOnConflict(testenv.ConflictBackoff, func() error {
			cur, err := vms.Get(ctx, vm.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			tc.Lock(&cur.Status)
			_, err = vms.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatalf("lock: %v", err)
		}
	}
	// A conflict is a write of someone else's (the cluster's controllers
	// keep the VM's status): take the VM again.
	err = retry.RetryOnConflict(testenv.ConflictBackoff, func() error {
		cur, err := vms.Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		tc.Update(cur)
		_, err = vms.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	checkAnswer(t, "update", err, WebhookVM, 422, tc.Denied)
}

func runGateOff(t *testing.T, c Cluster) {
	ctx := context.Background()
	c.SetGates(t)
	t.Cleanup(func() { c.SetGates(t, c.Gates...) })
	group := virtv1.SchemeGroupVersion.Group
	snap := &snapshotv1.VirtualMachineSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: "adm-gate", Namespace: c.Namespace},
		Spec: snapshotv1.VirtualMachineSnapshotSpec{Source: corev1.TypedLocalObjectReference{
			APIGroup: &group, Kind: "VirtualMachine", Name: "adm-gate"}},
	}
	_, err := c.KubeVirt.SnapshotV1beta1().VirtualMachineSnapshots(c.Namespace).Create(ctx, snap, metav1.CreateOptions{})
	checkAnswer(t, "snapshot", err, WebhookSnapshot, 400, "snapshot feature gate not enabled")
	restore := &snapshotv1.VirtualMachineRestore{
		ObjectMeta: metav1.ObjectMeta{Name: "adm-gate", Namespace: c.Namespace},
		Spec: snapshotv1.VirtualMachineRestoreSpec{
			Target:                     corev1.TypedLocalObjectReference{APIGroup: &group, Kind: "VirtualMachine", Name: "adm-gate"},
			VirtualMachineSnapshotName: "adm-gate",
		},
	}
	_, err = c.KubeVirt.SnapshotV1beta1().VirtualMachineRestores(c.Namespace).Create(ctx, restore, metav1.CreateOptions{})
	checkAnswer(t, "restore", err, WebhookRestore, 400, "Snapshot/Restore feature gate not enabled")
}

// checkAnswer: err is nil when denied is "", else kube-apiserver's words
// for webhook's denial, with its status code.
func checkAnswer(t *testing.T, what string, err error, webhook string, code int32, denied string) {
	t.Helper()
	if denied == "" {
		if err != nil {
			t.Fatalf("%s refused: %v", what, err)
		}
		return
	}
	want := fmt.Sprintf("admission webhook %q denied the request: %s", webhook, denied)
	if err == nil {
		t.Fatalf("%s admitted, want %q", what, want)
	}
	var st *apierrors.StatusError
	if !errors.As(err, &st) || st.ErrStatus.Message != want || st.ErrStatus.Code != code {
		t.Fatalf("%s: %v (%T), want %d %q", what, err, err, code, want)
	}
}

// baseVM is a halted VM KubeVirt admits.
func baseVM(name, ns string) *virtv1.VirtualMachine {
	rs := virtv1.RunStrategyHalted
	return &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: virtv1.VirtualMachineSpec{RunStrategy: &rs, Template: &virtv1.VirtualMachineInstanceTemplateSpec{
			Spec: virtv1.VirtualMachineInstanceSpec{Domain: virtv1.DomainSpec{CPU: &virtv1.CPU{Cores: 1}}},
		}},
	}
}

// disk adds a disk "data" on a claim, shaped by edits.
func disk(edits ...func(*virtv1.Disk)) func(*virtv1.VirtualMachine) {
	return func(vm *virtv1.VirtualMachine) {
		d := virtv1.Disk{Name: "data", DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{}}}
		for _, e := range edits {
			e(&d)
		}
		addDisk(vm, d, true)
	}
}

func addDisk(vm *virtv1.VirtualMachine, d virtv1.Disk, withVolume bool) {
	spec := &vm.Spec.Template.Spec
	spec.Domain.Devices.Disks = append(spec.Domain.Devices.Disks, d)
	if withVolume {
		spec.Volumes = append(spec.Volumes, claimVolume(d.Name))
	}
}

func claimVolume(name string) virtv1.Volume {
	return virtv1.Volume{Name: name, VolumeSource: virtv1.VolumeSource{PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{
		PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: "adm-" + name}}}}
}

func bus(b virtv1.DiskBus) func(*virtv1.Disk) {
	return func(d *virtv1.Disk) { d.Disk.Bus = b }
}

func ioThread(d *virtv1.Disk) { t := true; d.DedicatedIOThread = &t }

func serial(s string) func(*virtv1.Disk) { return func(d *virtv1.Disk) { d.Serial = s } }

func cloudInit(src virtv1.VolumeSource) func(*virtv1.VirtualMachine) {
	return func(vm *virtv1.VirtualMachine) {
		vm.Spec.Template.Spec.Domain.Devices.Disks = append(vm.Spec.Template.Spec.Domain.Devices.Disks,
			virtv1.Disk{Name: "cloudinit", DiskDevice: virtv1.DiskDevice{CDRom: &virtv1.CDRomTarget{Bus: virtv1.DiskBusSATA}}})
		vm.Spec.Template.Spec.Volumes = append(vm.Spec.Template.Spec.Volumes, virtv1.Volume{Name: "cloudinit", VolumeSource: src})
	}
}

func machine(m string) func(*virtv1.VirtualMachine) {
	return func(vm *virtv1.VirtualMachine) { vm.Spec.Template.Spec.Domain.Machine = &virtv1.Machine{Type: m} }
}

func snapshotLock(st *virtv1.VirtualMachineStatus) { l := "adm-lock"; st.SnapshotInProgress = &l }
func restoreLock(st *virtv1.VirtualMachineStatus)  { l := "adm-lock"; st.RestoreInProgress = &l }

func runStrategy(rs virtv1.VirtualMachineRunStrategy) func(*virtv1.VirtualMachine) {
	return func(vm *virtv1.VirtualMachine) { vm.Spec.RunStrategy = &rs }
}

// templateDisk adds a disk "data" on the DataVolume of a template.
func templateDisk(vm *virtv1.VirtualMachine) {
	name := vm.Name + "-data"
	vm.Spec.DataVolumeTemplates = append(vm.Spec.DataVolumeTemplates, virtv1.DataVolumeTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: blankDataVolume()})
	spec := &vm.Spec.Template.Spec
	spec.Domain.Devices.Disks = append(spec.Domain.Devices.Disks, virtv1.Disk{Name: "data",
		DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusSCSI}}})
	spec.Volumes = append(spec.Volumes, virtv1.Volume{Name: "data", VolumeSource: virtv1.VolumeSource{
		DataVolume: &virtv1.DataVolumeSource{Name: name}}})
}

// detach removes the disk "data" and its volume, and with template its
// DataVolume template.
func detach(template bool) func(*virtv1.VirtualMachine) {
	return func(vm *virtv1.VirtualMachine) {
		vm.Spec.Template.Spec.Domain.Devices.Disks = nil
		vm.Spec.Template.Spec.Volumes = nil
		if template {
			vm.Spec.DataVolumeTemplates = nil
		}
	}
}

func blankDataVolume() cdiv1.DataVolumeSpec {
	return cdiv1.DataVolumeSpec{
		Source: &cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}},
		Storage: &cdiv1.StorageSpec{Resources: corev1.VolumeResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
	}
}

func cores(n uint32) func(*virtv1.VirtualMachine) {
	return func(vm *virtv1.VirtualMachine) { vm.Spec.Template.Spec.Domain.CPU.Cores = n }
}
