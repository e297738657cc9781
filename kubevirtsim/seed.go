package kubevirtsim

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// Seed returns a small lab for simulate mode: three Ready nodes, the
// StorageClasses local-lvm (default) and ceph-rbd, the namespaces default
// and lab, the PVCs backing the VM disks, and three VirtualMachines:
//
//   - default/debian-12 (vmid 100, runStrategy Always, guest agent) runs
//     once a Controller processes it;
//   - default/win-11 (vmid 101, runStrategy Manual) stays stopped;
//   - lab/legacy-app (no vmid: a VM that predates the plugin,
//     runStrategy RerunOnFailure) starts once.
//
// Each call returns fresh objects.
func Seed() []runtime.Object {
	created := metav1.NewTime(time.Date(2025, 3, 14, 9, 26, 53, 0, time.UTC))
	var objs []runtime.Object

	nodes := []struct {
		name, ip       string
		cpu, memory    string
		allocCPU       string
		allocMemory    string
		machineID, uid string
	}{
		{"kv-node-1.lab.internal", "192.0.2.11", "16", "64Gi", "15800m", "62Gi", "3f1c0a9e5b7d4e21a6c8f0d2b4e6a8c1", "0b6f1f5e-3c1d-4f8e-9a2b-1c3d5e7f9a01"},
		{"kv-node-2.lab.internal", "192.0.2.12", "32", "128Gi", "31800m", "125Gi", "7a2d4c6e8f0b4a1c9e3d5f7a9c1e3b52", "0b6f1f5e-3c1d-4f8e-9a2b-1c3d5e7f9a02"},
		{"kv-node-3.lab.internal", "192.0.2.13", "16", "64Gi", "15800m", "62Gi", "c4e6a8b0d2f44c6e8a0b2d4f6a8c0e73", "0b6f1f5e-3c1d-4f8e-9a2b-1c3d5e7f9a03"},
	}
	for _, n := range nodes {
		capacity := corev1.ResourceList{
			corev1.ResourceCPU:              resource.MustParse(n.cpu),
			corev1.ResourceMemory:           resource.MustParse(n.memory),
			corev1.ResourcePods:             resource.MustParse("110"),
			corev1.ResourceEphemeralStorage: resource.MustParse("458Gi"),
			"devices.kubevirt.io/kvm":       resource.MustParse("1k"),
		}
		allocatable := capacity.DeepCopy()
		allocatable[corev1.ResourceCPU] = resource.MustParse(n.allocCPU)
		allocatable[corev1.ResourceMemory] = resource.MustParse(n.allocMemory)
		allocatable[corev1.ResourceEphemeralStorage] = resource.MustParse("421Gi")
		heartbeat := metav1.NewTime(time.Now().Truncate(time.Second))
		cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
			return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg,
				LastHeartbeatTime: heartbeat, LastTransitionTime: created}
		}
		objs = append(objs, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:              n.name,
				UID:               types.UID(n.uid),
				CreationTimestamp: created,
				Labels: map[string]string{
					"kubernetes.io/hostname":                         n.name,
					"kubernetes.io/os":                               "linux",
					"kubernetes.io/arch":                             "amd64",
					"beta.kubernetes.io/os":                          "linux",
					"beta.kubernetes.io/arch":                        "amd64",
					"kubevirt.io/schedulable":                        "true",
					"cpu-model.node.kubevirt.io/Skylake-Server-IBRS": "true",
					// virt-handler's node labeller: the machine types QEMU offers.
					virtv1.SupportedMachineTypeLabel + "q35":              "true",
					virtv1.SupportedMachineTypeLabel + defaultMachineType: "true",
				},
				Annotations: map[string]string{
					"kubevirt.io/heartbeat": heartbeat.UTC().Format(time.RFC3339),
				},
			},
			Spec: corev1.NodeSpec{PodCIDR: fmt.Sprintf("10.244.%s.0/24", n.ip[len(n.ip)-1:])},
			Status: corev1.NodeStatus{
				Capacity:    capacity,
				Allocatable: allocatable,
				Phase:       corev1.NodeRunning,
				Conditions: []corev1.NodeCondition{
					cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
					cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
					cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
					cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
				},
				Addresses: []corev1.NodeAddress{
					{Type: corev1.NodeInternalIP, Address: n.ip},
					{Type: corev1.NodeHostName, Address: n.name},
				},
				NodeInfo: corev1.NodeSystemInfo{
					MachineID:               n.machineID,
					SystemUUID:              n.uid,
					BootID:                  n.uid[:24] + n.machineID[:12],
					KernelVersion:           "6.1.0-28-amd64",
					OSImage:                 "Debian GNU/Linux 12 (bookworm)",
					ContainerRuntimeVersion: "containerd://1.7.24",
					KubeletVersion:          "v1.37.2",
					OperatingSystem:         "linux",
					Architecture:            "amd64",
				},
			},
		})
	}

	expand := true
	reclaim := corev1.PersistentVolumeReclaimDelete
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	immediate := storagev1.VolumeBindingImmediate
	objs = append(objs,
		&storagev1.StorageClass{
			ObjectMeta: metav1.ObjectMeta{
				Name: "local-lvm", UID: "5d0c6d8e-2b7a-4f1e-8c3d-6a9b0e1f2a31", CreationTimestamp: created,
				Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"},
			},
			Provisioner:          "topolvm.io",
			Parameters:           map[string]string{"csi.storage.k8s.io/fstype": "xfs"},
			ReclaimPolicy:        &reclaim,
			AllowVolumeExpansion: &expand,
			VolumeBindingMode:    &wffc,
		},
		&storagev1.StorageClass{
			ObjectMeta: metav1.ObjectMeta{
				Name: "ceph-rbd", UID: "5d0c6d8e-2b7a-4f1e-8c3d-6a9b0e1f2a32", CreationTimestamp: created,
			},
			Provisioner: "rbd.csi.ceph.com",
			Parameters: map[string]string{
				"clusterID":                 "3b9c6e2a-5d7f-4a1b-8c0e-2f4a6b8d0c1e",
				"pool":                      "kubevirt",
				"imageFeatures":             "layering",
				"csi.storage.k8s.io/fstype": "ext4",
			},
			ReclaimPolicy:        &reclaim,
			AllowVolumeExpansion: &expand,
			VolumeBindingMode:    &immediate,
		},
	)

	for _, n := range [][2]string{{"default", "7e2f4a6c-8b0d-4e1f-a3c5-000000000001"}, {"lab", "7e2f4a6c-8b0d-4e1f-a3c5-000000000002"}} {
		ns, uid := n[0], n[1]
		objs = append(objs, &corev1.Namespace{
			ObjectMeta: metav1.ObjectMeta{
				Name: ns, CreationTimestamp: created, UID: types.UID(uid),
				Labels: map[string]string{"kubernetes.io/metadata.name": ns},
			},
			Spec:   corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{corev1.FinalizerKubernetes}},
			Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive},
		})
	}

	pvc := func(ns, name, sc, size, uid string) *corev1.PersistentVolumeClaim {
		// What CDI's StorageProfile of the class gives a disk.
		access, mode := claimProperties(map[string]string{"local-lvm": "topolvm.io", "ceph-rbd": "rbd.csi.ceph.com"}[sc], nil)
		return &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: ns, UID: types.UID(uid), CreationTimestamp: created,
				Annotations: map[string]string{
					"pv.kubernetes.io/bind-completed":               "yes",
					"volume.kubernetes.io/storage-provisioner":      map[string]string{"local-lvm": "topolvm.io", "ceph-rbd": "rbd.csi.ceph.com"}[sc],
					"volume.kubernetes.io/selected-node":            "kv-node-1.lab.internal",
					"pv.kubernetes.io/bound-by-controller":          "yes",
					"volume.beta.kubernetes.io/storage-provisioner": map[string]string{"local-lvm": "topolvm.io", "ceph-rbd": "rbd.csi.ceph.com"}[sc],
				},
				Finalizers: []string{"kubernetes.io/pvc-protection"},
			},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes:      []corev1.PersistentVolumeAccessMode{access},
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
				StorageClassName: &sc,
				VolumeMode:       &mode,
				VolumeName:       "pvc-" + uid,
			},
			Status: corev1.PersistentVolumeClaimStatus{
				Phase:       corev1.ClaimBound,
				AccessModes: []corev1.PersistentVolumeAccessMode{access},
				Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
			},
		}
	}
	objs = append(objs,
		pvc("default", "vm-100-disk-0", "local-lvm", "32Gi", "9a1b2c3d-4e5f-4a6b-8c7d-0e1f2a3b4c01"),
		pvc("default", "vm-101-disk-0", "ceph-rbd", "64Gi", "9a1b2c3d-4e5f-4a6b-8c7d-0e1f2a3b4c02"),
	)

	always := virtv1.RunStrategyAlways
	manual := virtv1.RunStrategyManual
	rerun := virtv1.RunStrategyRerunOnFailure
	objs = append(objs,
		&virtv1.VirtualMachine{
			ObjectMeta: metav1.ObjectMeta{
				Name: "debian-12", Namespace: "default", UID: "2c5e8f1a-4b7d-4e0a-9c3f-6d8b1e4a7c10",
				CreationTimestamp: created, Generation: 1,
				Labels:      map[string]string{labelVMID: "100"},
				Annotations: map[string]string{annotationNode: "kv-node-1-lab-internal"},
			},
			Spec: virtv1.VirtualMachineSpec{
				RunStrategy: &always,
				Template: &virtv1.VirtualMachineInstanceTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{
						Labels:      map[string]string{"kubevirt.io/domain": "debian-12"},
						Annotations: map[string]string{AnnotationAgent: "true"},
					},
					Spec: virtv1.VirtualMachineInstanceSpec{
						Affinity: preferNode("kv-node-1.lab.internal"),
						Domain: virtv1.DomainSpec{
							CPU:     &virtv1.CPU{Sockets: 1, Cores: 2, Threads: 1},
							Memory:  &virtv1.Memory{Guest: ptr(resource.MustParse("2048Mi"))},
							Machine: &virtv1.Machine{Type: "q35"},
							Devices: virtv1.Devices{
								Disks: []virtv1.Disk{{Name: "scsi0", DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusSCSI}}, BootOrder: ptr(uint(1))}},
								Interfaces: []virtv1.Interface{{
									Name: "net0", Model: "virtio", MacAddress: "BC:24:11:5E:A0:01",
									InterfaceBindingMethod: virtv1.InterfaceBindingMethod{Masquerade: &virtv1.InterfaceMasquerade{}},
								}},
							},
						},
						Networks:                      []virtv1.Network{{Name: "net0", NetworkSource: virtv1.NetworkSource{Pod: &virtv1.PodNetwork{}}}},
						Volumes:                       []virtv1.Volume{{Name: "scsi0", VolumeSource: virtv1.VolumeSource{PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: "vm-100-disk-0"}}}}},
						TerminationGracePeriodSeconds: ptr(int64(180)),
					},
				},
			},
		},
		&virtv1.VirtualMachine{
			ObjectMeta: metav1.ObjectMeta{
				Name: "win-11", Namespace: "default", UID: "2c5e8f1a-4b7d-4e0a-9c3f-6d8b1e4a7c11",
				CreationTimestamp: created, Generation: 1,
				Labels:      map[string]string{labelVMID: "101"},
				Annotations: map[string]string{annotationNode: "kv-node-2-lab-internal"},
			},
			Spec: virtv1.VirtualMachineSpec{
				RunStrategy: &manual,
				Template: &virtv1.VirtualMachineInstanceTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{
						Labels:      map[string]string{"kubevirt.io/domain": "win-11"},
						Annotations: map[string]string{AnnotationGuestOS: "windows"},
					},
					Spec: virtv1.VirtualMachineInstanceSpec{
						Affinity: preferNode("kv-node-2.lab.internal"),
						Domain: virtv1.DomainSpec{
							CPU:     &virtv1.CPU{Sockets: 1, Cores: 4, Threads: 1},
							Memory:  &virtv1.Memory{Guest: ptr(resource.MustParse("8Gi"))},
							Machine: &virtv1.Machine{Type: "q35"},
							Firmware: &virtv1.Firmware{Bootloader: &virtv1.Bootloader{
								EFI: &virtv1.EFI{SecureBoot: ptr(true), Persistent: ptr(true)},
							}},
							Features: &virtv1.Features{SMM: &virtv1.FeatureState{Enabled: ptr(true)}},
							Devices: virtv1.Devices{
								TPM:   &virtv1.TPMDevice{Persistent: ptr(true)},
								Disks: []virtv1.Disk{{Name: "sata0", DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusSATA}}, BootOrder: ptr(uint(1))}},
								Interfaces: []virtv1.Interface{{
									Name: "net0", Model: "e1000e", MacAddress: "BC:24:11:5E:A1:01",
									InterfaceBindingMethod: virtv1.InterfaceBindingMethod{Masquerade: &virtv1.InterfaceMasquerade{}},
								}},
							},
						},
						Networks: []virtv1.Network{{Name: "net0", NetworkSource: virtv1.NetworkSource{Pod: &virtv1.PodNetwork{}}}},
						Volumes:  []virtv1.Volume{{Name: "sata0", VolumeSource: virtv1.VolumeSource{PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: "vm-101-disk-0"}}}}},
					},
				},
			},
		},
		&virtv1.VirtualMachine{
			ObjectMeta: metav1.ObjectMeta{
				Name: "legacy-app", Namespace: "lab", UID: "2c5e8f1a-4b7d-4e0a-9c3f-6d8b1e4a7c12",
				CreationTimestamp: metav1.NewTime(created.Add(-90 * 24 * time.Hour)), Generation: 3,
				Labels: map[string]string{"app.kubernetes.io/name": "legacy-app"},
			},
			Spec: virtv1.VirtualMachineSpec{
				RunStrategy: &rerun,
				Template: &virtv1.VirtualMachineInstanceTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"kubevirt.io/domain": "legacy-app"}},
					Spec: virtv1.VirtualMachineInstanceSpec{
						Domain: virtv1.DomainSpec{
							CPU:       &virtv1.CPU{Cores: 1},
							Resources: virtv1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}},
							Devices: virtv1.Devices{
								Disks: []virtv1.Disk{
									{Name: "rootdisk", DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusVirtio}}},
									{Name: "cloudinitdisk", DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusVirtio}}},
								},
								Interfaces: []virtv1.Interface{{
									Name:                   "default",
									InterfaceBindingMethod: virtv1.InterfaceBindingMethod{Masquerade: &virtv1.InterfaceMasquerade{}},
								}},
							},
						},
						Networks: []virtv1.Network{*virtv1.DefaultPodNetwork()},
						Volumes: []virtv1.Volume{
							{Name: "rootdisk", VolumeSource: virtv1.VolumeSource{ContainerDisk: &virtv1.ContainerDiskSource{Image: "quay.io/containerdisks/fedora:41"}}},
							{Name: "cloudinitdisk", VolumeSource: virtv1.VolumeSource{CloudInitNoCloud: &virtv1.CloudInitNoCloudSource{
								UserData: "#cloud-config\nhostname: legacy-app\n"}}},
						},
					},
				},
			},
		},
	)
	return objs
}

// preferNode is a preferred node affinity for the node's hostname label: the
// VM normally runs on its "home" node but may run elsewhere.
func preferNode(node string) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
			Weight: 100,
			Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{node},
			}}},
		}},
	}}
}

// SeedSnapshotClasses are the VolumeSnapshotClasses of the simulated
// lab: ceph's (RBD snapshots), the default for its driver. local-lvm has
// none: topolvm's thick volumes cannot snapshot, so KubeVirt takes
// snapshots of its disks without their data, and the Proxmox API refuses
// them ("snapshot feature is not available"). Each call returns fresh
// objects.
func SeedSnapshotClasses() []*unstructured.Unstructured {
	return []*unstructured.Unstructured{{Object: map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
		"metadata": map[string]any{"name": "ceph-rbd",
			"annotations": map[string]any{"snapshot.storage.kubernetes.io/is-default-class": "true"}},
		"driver": "rbd.csi.ceph.com", "deletionPolicy": "Delete",
	}}}
}

// NewFakeDynamic returns an in-memory dynamic client holding the
// VolumeSnapshotClasses given, for Options.Dynamic over NewFakeClients.
func NewFakeDynamic(classes ...*unstructured.Unstructured) dynamic.Interface {
	objs := make([]runtime.Object, 0, len(classes))
	for _, c := range classes {
		objs = append(objs, c.DeepCopy())
	}
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{volumeSnapshotClassGVR: "VolumeSnapshotClassList"}, objs...)
}

// SeedCDIConfig is the simulated lab's CDIConfig as CDI's config
// controller leaves it: the default 6% filesystem overhead, by which CDI
// inflates the claims of Filesystem-mode spec.storage DataVolumes.
func SeedCDIConfig() *cdiv1.CDIConfig {
	return &cdiv1.CDIConfig{
		ObjectMeta: metav1.ObjectMeta{Name: cdiConfigName},
		Status: cdiv1.CDIConfigStatus{FilesystemOverhead: &cdiv1.FilesystemOverhead{
			Global:       "0.06",
			StorageClass: map[string]cdiv1.Percent{"local-lvm": "0.06", "ceph-rbd": "0.06"},
		}},
	}
}

// SeedKubeVirt is the simulated lab's KubeVirt CR: deployed, with the
// Snapshot feature gate on (the lab shows snapshots) and ExpandDisks off,
// as KubeVirt v1.8 leaves it, and VMs' EFI/TPM state on ceph-rbd.
func SeedKubeVirt() *virtv1.KubeVirt {
	return &virtv1.KubeVirt{
		ObjectMeta: metav1.ObjectMeta{Name: "kubevirt", Namespace: "kubevirt"},
		Spec: virtv1.KubeVirtSpec{Configuration: virtv1.KubeVirtConfiguration{
			DeveloperConfiguration: &virtv1.DeveloperConfiguration{FeatureGates: slices.Clone(labGates)},
			// VMs' persistent EFI/TPM state on the Ceph pool, which clones
			// it by CSI.
			VMStateStorageClass: "ceph-rbd",
		}},
		Status: virtv1.KubeVirtStatus{Phase: virtv1.KubeVirtPhaseDeployed},
	}
}
