// Package fleet makes many VMs as they look in a cluster the plugin
// manages: created through the Proxmox API (translate.BuildVM, with a
// disk, a NIC, cloud-init and the stored PVE config), then reconciled by
// KubeVirt and CDI (finalizer, firmware UUID, statuses, a bound claim),
// every other one running with an instance as virt-controller and
// virt-handler fill it in. Benchmarks and the scale run measure on these
// rather than on bare objects, which would flatter the cache.
package fleet

import (
	"crypto/sha256"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/caddy-proxmox/caddy-proxmox/kubevirtsim"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// Spec says what to make.
type Spec struct {
	Namespace string
	// N VMs with vmids from FirstVMID.
	N, FirstVMID int
	// Nodes are Kubernetes node names; VMs are spread over them.
	Nodes []string
	// StorageClass holds the disks (default "local-lvm").
	StorageClass string
	// Running is every how many VMs one runs (default 2: half of them);
	// 0 or below makes none run.
	Running int
}

// Objects returns, per VM, the VirtualMachine, its DataVolume and claim,
// and for running ones the VirtualMachineInstance, in that order.
func Objects(s Spec) ([]runtime.Object, error) {
	if s.StorageClass == "" {
		s.StorageClass = "local-lvm"
	}
	if s.Running == 0 {
		s.Running = 2
	}
	out := make([]runtime.Object, 0, s.N*4)
	for i := 0; i < s.N; i++ {
		vm, err := VM(s, i)
		if err != nil {
			return nil, err
		}
		out = append(out, vm)
		dv, pvc := Disk(s, vm, i)
		out = append(out, dv, pvc)
		if s.Running > 0 && i%s.Running == 0 {
			out = append(out, Instance(s, vm, i))
		}
	}
	return out, nil
}

var created = metav1.NewTime(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))

func node(s Spec, i int) (pve, kube string) {
	if len(s.Nodes) == 0 {
		return "pve", ""
	}
	n := s.Nodes[i%len(s.Nodes)]
	return translate.NodeName(n), n
}

func mac(i int) string {
	return fmt.Sprintf("BC:24:11:%02X:%02X:%02X", (i>>16)&0xff, (i>>8)&0xff, i&0xff)
}

func uid(kind string, i int) types.UID {
	return types.UID(fmt.Sprintf("0b6f1f5e-%s-4f8e-9a2b-%012d", kind, i))
}

const sshKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHqg3zY4y0Yl1tIaJm6Ww1o0c3m9tLkqfQy2cJc8m0pB ops@example.org"

// VM is the i-th VirtualMachine: what POST /nodes/{n}/qemu writes, plus
// what KubeVirt's VM controller adds.
func VM(s Spec, i int) (*kubevirtv1.VirtualMachine, error) {
	vmid := s.FirstVMID + i
	pveNode, _ := node(s, i)
	cfg := map[string]string{
		"name": fmt.Sprintf("web-%05d", i), "cores": "2", "sockets": "1", "memory": "2048",
		"scsihw": "virtio-scsi-single", "scsi0": s.StorageClass + ":32,discard=on,iothread=1,ssd=1",
		"net0":   "virtio=" + mac(i) + ",bridge=vmbr0,firewall=1",
		"ide2":   s.StorageClass + ":cloudinit",
		"ciuser": "debian", "sshkeys": strings.ReplaceAll(url.QueryEscape(sshKey), "+", "%20"), "ipconfig0": "ip=dhcp",
		"agent": "1", "tags": "prod;web", "onboot": "1", "boot": "order=scsi0;net0", "ostype": "l26",
	}
	vm, errs := translate.BuildVM(translate.VMRequest{
		VMID: vmid, Node: pveNode, Namespace: s.Namespace, Config: cfg,
		StorageExists: func(string) bool { return true },
		VolumeTaken:   func(string) (bool, error) { return false, nil },
	})
	if len(errs) > 0 {
		return nil, fmt.Errorf("fleet: VM %d: %v", vmid, errs)
	}
	vm.UID = uid("0001", i)
	vm.ResourceVersion = strconv.Itoa(1000 + i)
	vm.Generation = 1
	vm.CreationTimestamp = created
	vm.Finalizers = []string{kubevirtv1.VirtualMachineControllerFinalizer}
	vm.Annotations["kubevirt.io/latest-observed-api-version"] = "v1"
	vm.Annotations["kubevirt.io/storage-observed-api-version"] = "v1"
	// The guest runs qemu-guest-agent; the simulator's virt-handler reads
	// this to report what the agent would.
	vm.Spec.Template.ObjectMeta.Annotations = map[string]string{kubevirtsim.AnnotationAgent: "true"}
	tmpl := &vm.Spec.Template.Spec
	if tmpl.Domain.Firmware == nil {
		tmpl.Domain.Firmware = &kubevirtv1.Firmware{}
	}
	tmpl.Domain.Firmware.UUID = types.UID(fmt.Sprintf("5c3a8f2e-1d4b-5e6f-8a9b-%012d", i))
	running := s.Running > 0 && i%s.Running == 0
	st := kubevirtv1.VirtualMachineStatus{
		PrintableStatus: kubevirtv1.VirtualMachineStatusStopped, DesiredGeneration: 1, ObservedGeneration: 1,
		RunStrategy: kubevirtv1.RunStrategyManual,
		Conditions: []kubevirtv1.VirtualMachineCondition{{
			Type: kubevirtv1.VirtualMachineReady, Status: corev1.ConditionFalse, Reason: "VMINotExists",
			Message: "VMI does not exist", LastTransitionTime: created,
		}},
		VolumeSnapshotStatuses: []kubevirtv1.VolumeSnapshotStatus{
			{Name: "ide2", Enabled: false, Reason: "Snapshot is not supported for this volumeSource type [ide2]"},
			{Name: "scsi0", Enabled: true},
		},
	}
	if running {
		st.PrintableStatus = kubevirtv1.VirtualMachineStatusRunning
		st.Created, st.Ready = true, true
		st.Conditions = []kubevirtv1.VirtualMachineCondition{
			{Type: kubevirtv1.VirtualMachineReady, Status: corev1.ConditionTrue, LastTransitionTime: created},
			{Type: kubevirtv1.VirtualMachineConditionType(kubevirtv1.VirtualMachineInstanceIsMigratable), Status: corev1.ConditionTrue, LastTransitionTime: created},
			{Type: kubevirtv1.VirtualMachineConditionType(kubevirtv1.VirtualMachineInstanceIsStorageLiveMigratable), Status: corev1.ConditionTrue, LastTransitionTime: created},
		}
	}
	vm.Status = st
	return vm, nil
}

// Disk is the DataVolume CDI made from the VM's first DataVolume template
// and the claim it populated.
func Disk(s Spec, vm *kubevirtv1.VirtualMachine, i int) (*cdiv1.DataVolume, *corev1.PersistentVolumeClaim) {
	t := vm.Spec.DataVolumeTemplates[0]
	ctrl := true
	dv := &cdiv1.DataVolume{
		TypeMeta: metav1.TypeMeta{APIVersion: "cdi.kubevirt.io/v1beta1", Kind: "DataVolume"},
		ObjectMeta: metav1.ObjectMeta{
			Name: t.Name, Namespace: vm.Namespace, UID: uid("0002", i), CreationTimestamp: created,
			ResourceVersion: strconv.Itoa(2000 + i), Labels: t.Labels,
			Annotations: map[string]string{
				"cdi.kubevirt.io/storage.usePopulator": "true", "cdi.kubevirt.io/storage.prePopulated": t.Name,
			},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: vm.Name, UID: vm.UID, Controller: &ctrl, BlockOwnerDeletion: &ctrl}},
		},
		Spec: *t.Spec.DeepCopy(),
		Status: cdiv1.DataVolumeStatus{
			Phase: cdiv1.Succeeded, Progress: "100.0%", ClaimName: t.Name,
			Conditions: []cdiv1.DataVolumeCondition{
				{Type: cdiv1.DataVolumeBound, Status: corev1.ConditionTrue, Reason: "Bound", Message: "PVC " + t.Name + " Bound", LastTransitionTime: created, LastHeartbeatTime: created},
				{Type: cdiv1.DataVolumeReady, Status: corev1.ConditionTrue, LastTransitionTime: created, LastHeartbeatTime: created},
				{Type: cdiv1.DataVolumeRunning, Status: corev1.ConditionFalse, Reason: "Completed", LastTransitionTime: created, LastHeartbeatTime: created},
			},
		},
	}
	size := resource.MustParse("32Gi")
	if t.Spec.Storage != nil {
		if q, ok := t.Spec.Storage.Resources.Requests[corev1.ResourceStorage]; ok {
			size = q
		}
	}
	sc := s.StorageClass
	fs := corev1.PersistentVolumeFilesystem
	_, kubeNode := node(s, i)
	pvc := &corev1.PersistentVolumeClaim{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		ObjectMeta: metav1.ObjectMeta{
			Name: t.Name, Namespace: vm.Namespace, UID: uid("0003", i), CreationTimestamp: created,
			ResourceVersion: strconv.Itoa(3000 + i),
			Labels: map[string]string{
				"app": "containerized-data-importer", "app.kubernetes.io/component": "storage",
				"app.kubernetes.io/managed-by": "cdi-controller",
			},
			Annotations: map[string]string{
				"cdi.kubevirt.io/createdForDataVolume":             string(dv.UID),
				"cdi.kubevirt.io/storage.condition.running":        "false",
				"cdi.kubevirt.io/storage.condition.running.reason": "Completed",
				"cdi.kubevirt.io/storage.contentType":              "kubevirt",
				"cdi.kubevirt.io/storage.pod.phase":                "Succeeded",
				"cdi.kubevirt.io/storage.populator.progress":       "100.0%",
				"cdi.kubevirt.io/storage.preallocation.requested":  "false",
				"cdi.kubevirt.io/storage.usePopulator":             "true",
				"pv.kubernetes.io/bind-completed":                  "yes",
				"pv.kubernetes.io/bound-by-controller":             "yes",
				"volume.beta.kubernetes.io/storage-provisioner":    "topolvm.io",
				"volume.kubernetes.io/selected-node":               kubeNode,
				"volume.kubernetes.io/storage-provisioner":         "topolvm.io",
			},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "cdi.kubevirt.io/v1beta1", Kind: "DataVolume", Name: dv.Name, UID: dv.UID, Controller: &ctrl, BlockOwnerDeletion: &ctrl}},
			Finalizers:      []string{"kubernetes.io/pvc-protection"},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
			StorageClassName: &sc, VolumeMode: &fs, VolumeName: "pvc-" + string(uid("0003", i)),
		},
		Status: corev1.PersistentVolumeClaimStatus{
			Phase:       corev1.ClaimBound,
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: size},
		},
	}
	return dv, pvc
}

// Instance is the running VirtualMachineInstance of VM i, as
// virt-controller creates it from the template and virt-handler and the
// guest agent fill in its status.
func Instance(s Spec, vm *kubevirtv1.VirtualMachine, i int) *kubevirtv1.VirtualMachineInstance {
	_, kubeNode := node(s, i)
	ctrl := true
	spec := vm.Spec.Template.Spec.DeepCopy()
	spec.Domain.Machine = &kubevirtv1.Machine{Type: "q35"}
	spec.Domain.CPU.Model = "host-model"
	spec.Domain.Features = &kubevirtv1.Features{ACPI: kubevirtv1.FeatureState{}}
	spec.Domain.Firmware.Serial = fmt.Sprintf("7b1e2d3c-%012d", i)
	if spec.Domain.Resources.Requests == nil {
		spec.Domain.Resources.Requests = corev1.ResourceList{}
	}
	spec.Domain.Resources.Requests[corev1.ResourceMemory] = resource.MustParse("2Gi")
	spec.Architecture = "amd64"
	grace := int64(180)
	spec.TerminationGracePeriodSeconds = &grace
	// Pod addresses as the simulator hands them out, so that it finds
	// nothing to correct.
	h := sha256.Sum256([]byte(string(uid("0004", i)) + "\x00net0\x00"))
	ip, ip6 := fmt.Sprintf("10.244.%d.%d", h[3], 2+int(h[4])%252), fmt.Sprintf("fd00:10:244:%x::%x", h[3], 2+int(h[4])%252)
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(created.Add(d)) }
	guest := resource.MustParse("2Gi")
	vmi := &kubevirtv1.VirtualMachineInstance{
		TypeMeta: metav1.TypeMeta{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachineInstance"},
		ObjectMeta: metav1.ObjectMeta{
			Name: vm.Name, Namespace: vm.Namespace, UID: uid("0004", i), CreationTimestamp: created,
			ResourceVersion: strconv.Itoa(4000 + i), Generation: 12,
			Labels: map[string]string{
				translate.LabelVMID: vm.Labels[translate.LabelVMID], "kubevirt.io/nodeName": kubeNode,
				"kubevirt.io/vm": vm.Name,
			},
			Annotations: map[string]string{
				"kubevirt.io/latest-observed-api-version":  "v1",
				"kubevirt.io/storage-observed-api-version": "v1",
				"kubevirt.io/vm-generation":                "1",
			},
			Finalizers:      []string{"kubevirt.io/virtualMachineControllerFinalize", "foregroundDeleteVirtualMachine"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: vm.Name, UID: vm.UID, Controller: &ctrl, BlockOwnerDeletion: &ctrl}},
		},
		Spec: *spec,
		Status: kubevirtv1.VirtualMachineInstanceStatus{
			Phase: kubevirtv1.Running, NodeName: kubeNode, QOSClass: qos(corev1.PodQOSBurstable),
			LauncherContainerImageVersion: "quay.io/kubevirt/virt-launcher:v1.8.0",
			MigrationMethod:               kubevirtv1.BlockMigration, MigrationTransport: kubevirtv1.MigrationTransportUnix,
			SelinuxContext: "none", RuntimeUser: 107, VirtualMachineRevisionName: "revision-start-vm-" + string(vm.UID) + "-1",
			ActivePods: map[types.UID]string{uid("0005", i): kubeNode},
			Conditions: []kubevirtv1.VirtualMachineInstanceCondition{
				{Type: kubevirtv1.VirtualMachineInstanceReady, Status: corev1.ConditionTrue, LastTransitionTime: at(9 * time.Second)},
				{Type: kubevirtv1.VirtualMachineInstanceIsMigratable, Status: corev1.ConditionTrue, LastTransitionTime: at(0)},
				{Type: kubevirtv1.VirtualMachineInstanceIsStorageLiveMigratable, Status: corev1.ConditionTrue, LastTransitionTime: at(0)},
				{Type: kubevirtv1.VirtualMachineInstanceAgentConnected, Status: corev1.ConditionTrue, LastTransitionTime: at(30 * time.Second)},
			},
			PhaseTransitionTimestamps: []kubevirtv1.VirtualMachineInstancePhaseTransitionTimestamp{
				{Phase: kubevirtv1.Pending, PhaseTransitionTimestamp: at(0)},
				{Phase: kubevirtv1.Scheduling, PhaseTransitionTimestamp: at(time.Second)},
				{Phase: kubevirtv1.Scheduled, PhaseTransitionTimestamp: at(7 * time.Second)},
				{Phase: kubevirtv1.Running, PhaseTransitionTimestamp: at(9 * time.Second)},
			},
			Interfaces: []kubevirtv1.VirtualMachineInstanceNetworkInterface{{
				Name: "net0", MAC: strings.ToLower(mac(i)), IP: ip, IPs: []string{ip, ip6}, LinkState: "up",
				InterfaceName: "enp1s0", InfoSource: "domain, guest-agent", QueueCount: 1, PodInterfaceName: "eth0",
			}},
			GuestOSInfo: kubevirtv1.VirtualMachineInstanceGuestOSInfo{
				Name: "Debian GNU/Linux", KernelRelease: "6.1.0-28-amd64", Version: "12 (bookworm)",
				PrettyName: "Debian GNU/Linux 12 (bookworm)", VersionID: "12",
				KernelVersion: "#1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1 (2024-11-22)", Machine: "x86_64", ID: "debian",
			},
			CurrentCPUTopology: &kubevirtv1.CPUTopology{Cores: 2, Sockets: 1, Threads: 1},
			Memory:             &kubevirtv1.MemoryStatus{GuestAtBoot: &guest, GuestCurrent: &guest, GuestRequested: &guest},
			Machine:            &kubevirtv1.Machine{Type: "pc-q35-rhel9.6.0"},
			VolumeStatus: []kubevirtv1.VolumeStatus{
				{Name: "ide2", Target: "sdb", Size: 1048576},
				{Name: "scsi0", Target: "sda", PersistentVolumeClaimInfo: &kubevirtv1.PersistentVolumeClaimInfo{
					ClaimName: vm.Spec.DataVolumeTemplates[0].Name, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					VolumeMode: volumeMode(), Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("32Gi")},
					Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("32Gi")}, FilesystemOverhead: overhead(),
				}},
			},
		},
	}
	return vmi
}

func qos(c corev1.PodQOSClass) *corev1.PodQOSClass { return &c }

func volumeMode() *corev1.PersistentVolumeMode {
	m := corev1.PersistentVolumeFilesystem
	return &m
}

func overhead() *kubevirtv1.Percent {
	p := kubevirtv1.Percent("0.055")
	return &p
}
