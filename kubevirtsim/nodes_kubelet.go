package kubevirtsim

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"
)

// The kubelet's part of Nodes. It follows what kubelet v1.37 reports for
// a pod whose containers start and run without fault: Pending with
// ContainerCreating while a volume cannot be mounted, then Running with
// the init containers Completed, the containers running (ready unless a
// readiness probe has yet to pass), a pod IP from the node's pod network,
// and Ready only when the containers and every readiness gate are; a
// deleted pod is removed (grace 0) once its containers stopped.

// Labels and annotations of CDI's worker pods and of Multus.
const (
	cdiComponentLabel      = "cdi.kubevirt.io"
	cdiImporterComponent   = "importer"
	cdiCloneSourceComp     = "cdi-clone-source"
	cdiUploadServerComp    = "cdi-upload-server"
	cdiCloneRequestAnn     = "k8s.io/CloneRequest"
	cdiCloneSourcePodAnn   = "cdi.kubevirt.io/storage.sourceClonePodName"
	multusNetworksAnn      = "k8s.v1.cni.cncf.io/networks"
	multusNetworkStatusAnn = "k8s.v1.cni.cncf.io/network-status"
	virtHandlerLabelValue  = "virt-handler"
	computeContainer       = "compute"
	defaultPodNetworkName  = "kindnet"
)

func (n *Nodes) syncPod(ctx context.Context, key string) (time.Duration, error) {
	pod := cached[*corev1.Pod](n.pods, key)
	if pod == nil {
		n.forgetWait(nodesKeyPod + key + "/")
		return 0, nil
	}
	// testenv keeps the virt-handler pods itself, at 127.0.0.1.
	if pod.Spec.NodeName == "" || pod.Labels[virtv1.AppLabel] == virtHandlerLabelValue {
		return 0, nil
	}
	node := cached[*corev1.Node](n.nodes, pod.Spec.NodeName)
	if node == nil {
		return 0, nil // pod-gc deletes pods of nodes that are gone
	}
	wait := nodesKeyPod + key + "/" + string(pod.UID) + "/"
	if pod.DeletionTimestamp != nil {
		return n.stopPod(ctx, pod, wait)
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return 0, nil
	}
	if pod.Status.Phase != corev1.PodRunning {
		return n.startPod(ctx, pod, node)
	}
	return n.runPod(ctx, pod, wait)
}

// startPod mounts the pod's volumes and starts its containers, or reports
// why it cannot yet (a kubelet keeps retrying, as the informer events do
// here).
func (n *Nodes) startPod(ctx context.Context, pod *corev1.Pod, node *corev1.Node) (time.Duration, error) {
	now := metav1.Now()
	if why := n.unmountable(pod); why != "" {
		st := pod.Status.DeepCopy()
		st.Phase = corev1.PodPending
		if st.StartTime == nil {
			st.StartTime = &now
		}
		st.HostIP = nodeIP(node)
		setPodCondition(st, corev1.PodReadyToStartContainers, corev1.ConditionFalse, "", now)
		setPodCondition(st, corev1.PodInitialized, corev1.ConditionFalse, "ContainersNotInitialized", now)
		setPodCondition(st, corev1.ContainersReady, corev1.ConditionFalse, "ContainersNotReady", now)
		setPodCondition(st, corev1.PodReady, corev1.ConditionFalse, "ContainersNotReady", now)
		st.ContainerStatuses = containerStatuses(pod.Spec.Containers, func(c corev1.Container) corev1.ContainerState {
			return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}
		}, false)
		n.log.Debug("pod waits for its volumes", zap.String("pod", pod.Namespace+"/"+pod.Name), zap.String("why", why))
		return 0, n.writePodStatus(ctx, pod, st)
	}
	if pod, err := n.attachNetworks(ctx, pod); err != nil || pod == nil {
		return 0, err
	}
	st := pod.Status.DeepCopy()
	st.Phase = corev1.PodRunning
	if st.StartTime == nil {
		st.StartTime = &now
	}
	st.HostIP = nodeIP(node)
	st.HostIPs = []corev1.HostIP{{IP: st.HostIP}}
	ip := n.podIP(pod, node)
	st.PodIP = ip
	st.PodIPs = []corev1.PodIP{{IP: ip}}
	st.InitContainerStatuses = containerStatuses(pod.Spec.InitContainers, func(c corev1.Container) corev1.ContainerState {
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed",
			StartedAt: now, FinishedAt: now, ContainerID: containerID(pod, c.Name)}}
	}, false)
	st.ContainerStatuses = containerStatuses(pod.Spec.Containers, func(c corev1.Container) corev1.ContainerState {
		return corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}
	}, true)
	setPodCondition(st, corev1.PodReadyToStartContainers, corev1.ConditionTrue, "", now)
	setPodCondition(st, corev1.PodInitialized, corev1.ConditionTrue, "", now)
	setPodCondition(st, corev1.ContainersReady, corev1.ConditionTrue, "", now)
	setReady(pod, st, now)
	return 0, n.writePodStatus(ctx, pod, st)
}

// runPod keeps Ready in line with the readiness gates and lets CDI's
// worker pods complete.
func (n *Nodes) runPod(ctx context.Context, pod *corev1.Pod, wait string) (time.Duration, error) {
	st := pod.Status.DeepCopy()
	now := metav1.Now()
	if podVMIName(pod) != "" && n.guestLeft(pod) && n.launched(pod) {
		// virt-launcher exits with its guest.
		st.Phase = corev1.PodSucceeded
		st.ContainerStatuses = containerStatuses(pod.Spec.Containers, func(c corev1.Container) corev1.ContainerState {
			return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed",
				StartedAt: now, FinishedAt: now, ContainerID: containerID(pod, c.Name)}}
		}, false)
		setPodCondition(st, corev1.ContainersReady, corev1.ConditionFalse, "PodCompleted", now)
		setPodCondition(st, corev1.PodReady, corev1.ConditionFalse, "PodCompleted", now)
		return 0, n.writePodStatus(ctx, pod, st)
	}
	if msg, done := n.workerDone(pod); done {
		if left := n.waited(wait+"work", n.opts.ImportDelay); left > 0 {
			return left, nil
		}
		st.Phase = corev1.PodSucceeded
		st.ContainerStatuses = containerStatuses(pod.Spec.Containers, func(c corev1.Container) corev1.ContainerState {
			t := &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now,
				ContainerID: containerID(pod, c.Name)}
			if c.Name == pod.Spec.Containers[0].Name {
				t.Message = msg
			}
			return corev1.ContainerState{Terminated: t}
		}, false)
		setPodCondition(st, corev1.ContainersReady, corev1.ConditionFalse, "PodCompleted", now)
		setPodCondition(st, corev1.PodReady, corev1.ConditionFalse, "PodCompleted", now)
		setPodCondition(st, corev1.PodReadyToStartContainers, corev1.ConditionFalse, "", now)
		return 0, n.writePodStatus(ctx, pod, st)
	}
	setReady(pod, st, now)
	return 0, n.writePodStatus(ctx, pod, st)
}

// stopPod stops a deleted pod's containers and removes it. A virt-launcher
// pod stops once its guest has left it (see guestLeft) or its grace
// period ran out, as virt-launcher exits then.
func (n *Nodes) stopPod(ctx context.Context, pod *corev1.Pod, wait string) (time.Duration, error) {
	if pod.Status.Phase == corev1.PodRunning && podVMIName(pod) != "" {
		left := time.Until(pod.DeletionTimestamp.Time)
		if left > 0 && !n.guestLeft(pod) {
			return left, nil
		}
	}
	uid := pod.UID
	err := n.opts.Kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr(int64(0)), Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		err = nil
	}
	n.forgetWait(wait)
	return 0, err
}

// guestLeft reports whether the guest of a virt-launcher pod is no longer
// in it, so that virt-launcher exits: the VMI is gone or final (shut
// down), never got to run, migrated away from this pod, or this pod was
// the target of a migration that failed.
func (n *Nodes) guestLeft(pod *corev1.Pod) bool {
	vmi := cached[*virtv1.VirtualMachineInstance](n.vmis, pod.Namespace+"/"+podVMIName(pod))
	if vmi == nil || vmi.UID != podVMIUID(pod) || vmi.IsFinal() {
		return true
	}
	switch vmi.Status.Phase {
	case virtv1.VmPhaseUnset, virtv1.Pending, virtv1.Scheduling:
		return true
	}
	ms := vmi.Status.MigrationState
	if ms == nil {
		return false
	}
	if ms.Completed && !ms.Failed && ms.TargetPod != pod.Name && ms.SourceNode == pod.Spec.NodeName {
		return true
	}
	return ms.Failed && ms.TargetPod == pod.Name
}

// podVMIUID is the UID of the VMI a virt-launcher pod runs.
func podVMIUID(pod *corev1.Pod) types.UID {
	if ref := metav1.GetControllerOf(pod); ref != nil {
		return ref.UID
	}
	return ""
}

// launched reports whether the guest of a running virt-launcher pod has
// ever run in it: before that, a guest that is not there has not left.
func (n *Nodes) launched(pod *corev1.Pod) bool {
	vmi := cached[*virtv1.VirtualMachineInstance](n.vmis, pod.Namespace+"/"+podVMIName(pod))
	if vmi == nil || vmi.UID != podVMIUID(pod) {
		return true
	}
	if _, ok := vmi.Status.ActivePods[pod.UID]; ok {
		return vmi.Status.Phase != virtv1.VmPhaseUnset && vmi.Status.Phase != virtv1.Pending && vmi.Status.Phase != virtv1.Scheduling
	}
	return false
}

// workerDone tells whether a CDI worker pod has done its work, and the
// termination message its container writes then (cmd/cdi-importer,
// cmd/cdi-cloner, cmd/cdi-uploadserver). An upload server completes as the
// target of a host-assisted clone once the source pod has sent everything,
// and for an upload once a client's data is in: the stand-in upload
// server (NewCDIUploadProxy) records it on the claim.
func (n *Nodes) workerDone(pod *corev1.Pod) (string, bool) {
	switch pod.Labels[cdiComponentLabel] {
	case cdiImporterComponent:
		return `{"preallocationApplied":false,"scratchSpaceRequired":false,"message":"Import Complete"}`, true
	case cdiCloneSourceComp:
		return "Clone Complete", true
	case cdiUploadServerComp:
		for _, v := range pod.Spec.Volumes {
			if v.PersistentVolumeClaim == nil {
				continue
			}
			pvc := cached[*corev1.PersistentVolumeClaim](n.pvcs, pod.Namespace+"/"+v.PersistentVolumeClaim.ClaimName)
			if pvc != nil && pvc.Annotations[AnnotationUploadedSHA256] != "" {
				return `{"preallocationApplied":false,"message":"Upload Complete"}`, true
			}
			if pvc == nil || pvc.Annotations[cdiCloneRequestAnn] == "" {
				continue
			}
			srcNS, _, _ := strings.Cut(pvc.Annotations[cdiCloneRequestAnn], "/")
			src := cached[*corev1.Pod](n.pods, srcNS+"/"+pvc.Annotations[cdiCloneSourcePodAnn])
			if src != nil && src.Status.Phase == corev1.PodSucceeded {
				return `{"preallocationApplied":false,"message":"Clone Complete"}`, true
			}
		}
	}
	return "", false
}

// unmountable names a volume of pod the kubelet could not mount yet, or
// returns "".
func (n *Nodes) unmountable(pod *corev1.Pod) string {
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.PersistentVolumeClaim != nil:
			pvc := cached[*corev1.PersistentVolumeClaim](n.pvcs, pod.Namespace+"/"+v.PersistentVolumeClaim.ClaimName)
			if pvc == nil {
				return fmt.Sprintf("persistentvolumeclaim %q not found", v.PersistentVolumeClaim.ClaimName)
			}
			if pvc.Status.Phase != corev1.ClaimBound || cached[*corev1.PersistentVolume](n.pvs, pvc.Spec.VolumeName) == nil {
				return fmt.Sprintf("persistentvolumeclaim %q is not bound", pvc.Name)
			}
		case v.Secret != nil && (v.Secret.Optional == nil || !*v.Secret.Optional):
			if _, err := n.opts.Kube.CoreV1().Secrets(pod.Namespace).Get(context.Background(), v.Secret.SecretName, metav1.GetOptions{}); err != nil {
				return fmt.Sprintf("secret %q: %v", v.Secret.SecretName, err)
			}
		case v.ConfigMap != nil && (v.ConfigMap.Optional == nil || !*v.ConfigMap.Optional):
			if _, err := n.opts.Kube.CoreV1().ConfigMaps(pod.Namespace).Get(context.Background(), v.ConfigMap.Name, metav1.GetOptions{}); err != nil {
				return fmt.Sprintf("configmap %q: %v", v.ConfigMap.Name, err)
			}
		}
	}
	return ""
}

// multusNetwork is one entry of the k8s.v1.cni.cncf.io/networks
// annotation.
type multusNetwork struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
	Interface string `json:"interface,omitempty"`
}

// multusStatus is one entry of the k8s.v1.cni.cncf.io/network-status
// annotation Multus writes.
type multusStatus struct {
	Name      string         `json:"name"`
	Interface string         `json:"interface,omitempty"`
	IPs       []string       `json:"ips,omitempty"`
	MAC       string         `json:"mac,omitempty"`
	Default   bool           `json:"default,omitempty"`
	DNS       map[string]any `json:"dns"`
}

// attachNetworks is Multus: a pod that asks for secondary networks gets
// their network-status, or stays ContainerCreating while one of their
// NetworkAttachmentDefinitions is missing (nil pod, no error). It returns
// the pod as updated.
func (n *Nodes) attachNetworks(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	raw := pod.Annotations[multusNetworksAnn]
	if raw == "" || pod.Annotations[multusNetworkStatusAnn] != "" || n.opts.Dynamic == nil {
		return pod, nil
	}
	var nets []multusNetwork
	if err := json.Unmarshal([]byte(raw), &nets); err != nil {
		// Multus also accepts "a,b" lists.
		for _, name := range strings.Split(raw, ",") {
			nets = append(nets, multusNetwork{Name: strings.TrimSpace(name)})
		}
	}
	status := []multusStatus{{Name: defaultPodNetworkName, Interface: "eth0", Default: true, DNS: map[string]any{}}}
	for i, net := range nets {
		ns := net.Namespace
		if ns == "" {
			ns, net.Name, _ = cutLast(net.Name, "/", pod.Namespace)
		}
		if _, err := n.opts.Dynamic.Resource(nadGVR).Namespace(ns).Get(ctx, net.Name, metav1.GetOptions{}); err != nil {
			n.log.Debug("pod waits for a network attachment definition", zap.String("pod", pod.Namespace+"/"+pod.Name),
				zap.String("network", ns+"/"+net.Name), zap.Error(err))
			return nil, nil
		}
		iface := net.Interface
		if iface == "" {
			iface = fmt.Sprintf("net%d", i+1)
		}
		status = append(status, multusStatus{Name: ns + "/" + net.Name, Interface: iface,
			MAC: macFor(string(pod.UID), iface), DNS: map[string]any{}})
	}
	b, err := json.Marshal(status)
	if err != nil {
		return nil, err
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{multusNetworkStatusAnn: string(b)}}})
	return n.opts.Kube.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
}

// cutLast splits "ns/name" (Multus' short form); without a slash the
// namespace is def.
func cutLast(s, sep, def string) (string, string, bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+1:], true
	}
	return def, s, false
}

func (n *Nodes) writePodStatus(ctx context.Context, pod *corev1.Pod, st *corev1.PodStatus) error {
	if equality.Semantic.DeepEqual(&pod.Status, st) {
		return nil
	}
	cp := pod.DeepCopy()
	cp.Status = *st
	_, err := n.opts.Kube.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, cp, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// podIP hands out the pod's address on its node's pod network
// (10.244.<node>.<n>/24; the node's spec.podCIDR when it has one), or the
// AnnotationPodIP a test gave the VMI of a virt-launcher pod
// (virt-controller copies the VMI's annotations to its pod).
func (n *Nodes) podIP(pod *corev1.Pod, node *corev1.Node) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if ip, ok := n.podIPs[string(pod.UID)]; ok {
		return ip
	}
	if ip := pod.Annotations[AnnotationPodIP]; ip != "" && podVMIName(pod) != "" {
		n.podIPs[string(pod.UID)] = ip
		return ip
	}
	prefix := ""
	if cidr := node.Spec.PodCIDR; strings.HasSuffix(cidr, ".0/24") {
		prefix = strings.TrimSuffix(cidr, "0/24")
	} else {
		h := fnv.New32a()
		h.Write([]byte(node.Name))
		prefix = fmt.Sprintf("10.244.%d.", h.Sum32()%250+1)
	}
	n.nextIP[node.Name]++
	ip := fmt.Sprintf("%s%d", prefix, n.nextIP[node.Name]%250+2)
	n.podIPs[string(pod.UID)] = ip
	return ip
}

func nodeIP(node *corev1.Node) string {
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return "127.0.0.1"
}

// setReady sets Ready: the containers ready and every readiness gate's
// condition True (kubelet's GeneratePodReadyCondition).
func setReady(pod *corev1.Pod, st *corev1.PodStatus, now metav1.Time) {
	ready := true
	reason := ""
	for _, c := range st.ContainerStatuses {
		if !c.Ready {
			ready, reason = false, "ContainersNotReady"
		}
	}
	if ready {
		for _, g := range pod.Spec.ReadinessGates {
			if c := podCondition(st, g.ConditionType); c == nil || c.Status != corev1.ConditionTrue {
				ready, reason = false, "ReadinessGatesNotReady"
				break
			}
		}
	}
	status := corev1.ConditionTrue
	if !ready {
		status = corev1.ConditionFalse
	}
	setPodCondition(st, corev1.PodReady, status, reason, now)
}

func podCondition(st *corev1.PodStatus, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			return &st.Conditions[i]
		}
	}
	return nil
}

// setPodCondition sets a condition, keeping its transition time while its
// status stays.
func setPodCondition(st *corev1.PodStatus, t corev1.PodConditionType, status corev1.ConditionStatus, reason string, now metav1.Time) {
	if c := podCondition(st, t); c != nil {
		if c.Status != status {
			c.LastTransitionTime = now
		}
		c.Status, c.Reason = status, reason
		return
	}
	st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: status, Reason: reason, LastTransitionTime: now})
}

// containerStatuses reports every container in state; ready marks the
// running ones ready (no readiness probe, or one that passed).
func containerStatuses(cs []corev1.Container, state func(corev1.Container) corev1.ContainerState, ready bool) []corev1.ContainerStatus {
	out := make([]corev1.ContainerStatus, 0, len(cs))
	for _, c := range cs {
		s := state(c)
		started := s.Running != nil
		out = append(out, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image + "@sha256:" + strings.Repeat("0", 64),
			State: s, Ready: ready && s.Running != nil, Started: &started,
		})
	}
	return out
}

func containerID(pod *corev1.Pod, name string) string {
	h := fnv.New64a()
	h.Write([]byte(string(pod.UID) + "/" + name))
	return fmt.Sprintf("containerd://%016x", h.Sum64())
}

// macFor is a stable locally administered MAC for a pod interface.
func macFor(parts ...string) string {
	b := hashBytes(parts...)
	return fmt.Sprintf("0a:58:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3])
}
