package testenv

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// SeedNode describes one Node that Options.Seed creates.
type SeedNode struct {
	Name     string
	CPU      string // capacity, e.g. "16"
	Memory   string // capacity, e.g. "64Gi"
	Storage  string // ephemeral-storage capacity
	Pods     string
	IP       string // InternalIP
	NotReady bool   // Ready condition False instead of True
}

// SeedNodes are the Nodes created by Options.Seed: Ready, schedulable for
// KubeVirt (kubevirt.io/schedulable=true), with capacity and allocatable.
var SeedNodes = []SeedNode{
	{Name: "node-1", CPU: "16", Memory: "64Gi", Storage: "500Gi", Pods: "110", IP: "192.168.100.11"},
	{Name: "node-2", CPU: "16", Memory: "64Gi", Storage: "500Gi", Pods: "110", IP: "192.168.100.12"},
	{Name: "node-3", CPU: "8", Memory: "32Gi", Storage: "250Gi", Pods: "110", IP: "192.168.100.13"},
}

// DefaultStorageClass is the seeded StorageClass marked as the default.
const DefaultStorageClass = "local-path"

// SeedStorageClasses are the StorageClasses created by Options.Seed.
var SeedStorageClasses = []storagev1.StorageClass{
	{
		ObjectMeta:        metav1.ObjectMeta{Name: DefaultStorageClass, Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}},
		Provisioner:       "rancher.io/local-path",
		ReclaimPolicy:     ptr(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: ptr(storagev1.VolumeBindingWaitForFirstConsumer),
	},
	{
		ObjectMeta:           metav1.ObjectMeta{Name: "ceph-block"},
		Provisioner:          "rbd.csi.ceph.com",
		Parameters:           map[string]string{"clusterID": "ceph", "pool": "kubevirt"},
		ReclaimPolicy:        ptr(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode:    ptr(storagev1.VolumeBindingImmediate),
		AllowVolumeExpansion: ptr(true),
	},
	{
		ObjectMeta:        metav1.ObjectMeta{Name: "nfs-iso"},
		Provisioner:       "nfs.csi.k8s.io",
		Parameters:        map[string]string{"server": "nfs.example.test", "share": "/iso"},
		ReclaimPolicy:     ptr(corev1.PersistentVolumeReclaimRetain),
		VolumeBindingMode: ptr(storagev1.VolumeBindingImmediate),
	},
}

func ptr[T any](v T) *T { return &v }

// SeedCluster creates SeedNodes and SeedStorageClasses (Options.Seed does
// this at start). Existing objects are left alone.
func SeedCluster(ctx context.Context, kube kubernetes.Interface) error {
	for _, sn := range SeedNodes {
		if err := createNode(ctx, kube, sn); err != nil {
			return err
		}
	}
	for i := range SeedStorageClasses {
		sc := SeedStorageClasses[i].DeepCopy()
		if _, err := kube.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("testenv: seed StorageClass %s: %w", sc.Name, err)
		}
	}
	return nil
}

// SeedCSIDrivers are the drivers of the seeded CSI storage, which register
// themselves as CSIDriver objects when deployed (Options.Seed creates
// them). CDI fills DataVolumes on a class whose provisioner has one
// through volume populators.
var SeedCSIDrivers = []string{"rbd.csi.ceph.com", "nfs.csi.k8s.io"}

// SeedSnapshotClasses are the VolumeSnapshotClasses Options.Seed creates:
// ceph's, the default for its driver. The other seeded classes have none,
// as local-path and NFS storage commonly do not.
var SeedSnapshotClasses = []*unstructured.Unstructured{{Object: map[string]any{
	"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
	"metadata": map[string]any{"name": "ceph-block",
		"annotations": map[string]any{"snapshot.storage.kubernetes.io/is-default-class": "true"}},
	"driver": "rbd.csi.ceph.com", "deletionPolicy": "Delete",
	"parameters": map[string]any{"clusterID": "ceph"},
}}}

// SeedStorage creates CSIDrivers for drivers and the VolumeSnapshotClasses
// classes (Options.Seed does this at start with SeedCSIDrivers and
// SeedSnapshotClasses). Existing objects are left alone.
func SeedStorage(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, drivers []string, classes []*unstructured.Unstructured) error {
	for _, d := range drivers {
		_, err := kube.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{
			ObjectMeta: metav1.ObjectMeta{Name: d},
			Spec: storagev1.CSIDriverSpec{AttachRequired: ptr(true), PodInfoOnMount: ptr(false),
				VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}},
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("testenv: seed CSIDriver %s: %w", d, err)
		}
	}
	gvr := schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotclasses"}
	for _, c := range classes {
		if _, err := dyn.Resource(gvr).Create(ctx, c.DeepCopy(), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("testenv: seed VolumeSnapshotClass %s: %w", c.GetName(), err)
		}
	}
	return nil
}

// ConflictBackoff is how long a test's write retries on conflict with the
// real controllers of the test cluster: about 17 s. Their first writes to a
// new object come within half a second on a quiet machine (virt-controller
// writes a VM with a DataVolume template up to six times), but spread over
// seconds on a loaded one, and client-go's DefaultRetry gives up after some
// 50 ms. No Cap: wait.Backoff ends its steps once Cap is reached.
var ConflictBackoff = wait.Backoff{Duration: 20 * time.Millisecond, Factor: 1.5, Jitter: 0.1, Steps: 15}

// CreateNodes creates nodes with their status, as kubelets register
// themselves, and lifts the not-ready taint from the Ready ones as the node
// lifecycle controller would. Existing nodes are left alone.
func CreateNodes(ctx context.Context, kube kubernetes.Interface, nodes ...*corev1.Node) error {
	for _, n := range nodes {
		node := n.DeepCopy()
		status := node.Status
		node.Status = corev1.NodeStatus{}
		node.ResourceVersion, node.UID = "", ""
		created, err := kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("testenv: create Node %s: %w", node.Name, err)
		}
		// Node stand-ins may label a new node at once, several times, and
		// on a loaded machine over longer than DefaultRetry's 50 ms.
		cur := created
		err = retry.RetryOnConflict(ConflictBackoff, func() error {
			if cur == nil {
				fresh, err := kube.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				cur = fresh
			}
			cur.Status = status
			updated, err := kube.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
			if err == nil {
				err = untaintReady(ctx, kube, updated)
			}
			cur = nil // whatever conflicted, the next try starts from the node as it is now
			return err
		})
		if err != nil {
			return fmt.Errorf("testenv: Node %s status: %w", node.Name, err)
		}
	}
	return nil
}

// untaintReady removes the not-ready taint that the TaintNodesByCondition
// admission plugin puts on every new node, once it reports Ready (the node
// lifecycle controller's part, which does not run here).
func untaintReady(ctx context.Context, kube kubernetes.Interface, node *corev1.Node) error {
	ready := false
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	if !ready {
		return nil
	}
	var keep []corev1.Taint
	for _, t := range node.Spec.Taints {
		if t.Key != corev1.TaintNodeNotReady {
			keep = append(keep, t)
		}
	}
	if len(keep) == len(node.Spec.Taints) {
		return nil
	}
	node.Spec.Taints = keep
	_, err := kube.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
	return err
}

func createNode(ctx context.Context, kube kubernetes.Interface, sn SeedNode) error {
	res := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse(sn.CPU),
		corev1.ResourceMemory:           resource.MustParse(sn.Memory),
		corev1.ResourceEphemeralStorage: resource.MustParse(sn.Storage),
		corev1.ResourcePods:             resource.MustParse(sn.Pods),
		"devices.kubevirt.io/kvm":       resource.MustParse("1k"),
		"devices.kubevirt.io/tun":       resource.MustParse("1k"),
		"devices.kubevirt.io/vhost-net": resource.MustParse("1k"),
	}
	now := metav1.NewTime(time.Now())
	ready := corev1.ConditionTrue
	if sn.NotReady {
		ready = corev1.ConditionFalse
	}
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: sn.Name,
			Labels: map[string]string{
				"kubernetes.io/hostname":         sn.Name,
				"kubernetes.io/os":               "linux",
				"kubernetes.io/arch":             "amd64",
				"node-role.kubernetes.io/worker": "",
				"kubevirt.io/schedulable":        "true",
				// virt-handler's node labeller: the machine types the
				// launcher's QEMU offers (q35 is its alias of the newest).
				"machine-type.node.kubevirt.io/q35":              "true",
				"machine-type.node.kubevirt.io/pc-q35-rhel9.6.0": "true",
			},
		},
		Spec: corev1.NodeSpec{PodCIDR: "", ProviderID: "testenv://" + sn.Name},
	}
	node.Status = corev1.NodeStatus{
		Capacity:    res,
		Allocatable: res.DeepCopy(),
		Phase:       corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{
			cond(corev1.NodeReady, ready, "KubeletReady"),
			cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory"),
			cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure"),
			cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID"),
		},
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: sn.IP},
			{Type: corev1.NodeHostName, Address: sn.Name},
		},
		NodeInfo: corev1.NodeSystemInfo{
			MachineID:               "testenv-" + sn.Name,
			SystemUUID:              "testenv-" + sn.Name,
			BootID:                  "testenv-" + sn.Name,
			KernelVersion:           "6.12.0-testenv",
			OSImage:                 "Debian GNU/Linux 13 (trixie)",
			ContainerRuntimeVersion: "containerd://2.1.0",
			KubeletVersion:          "v1.37.2",
			OperatingSystem:         "linux",
			Architecture:            "amd64",
		},
	}
	return CreateNodes(ctx, kube, node)
}
