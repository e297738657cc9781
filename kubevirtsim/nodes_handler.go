package kubevirtsim

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	virtv1 "kubevirt.io/api/core/v1"
)

// virt-handler's part of Nodes, for the VMIs virt-controller has handed
// to a node (status.nodeName, after the virt-launcher pod became ready).
// It writes what KubeVirt v1.8.0's virt-handler writes from the libvirt
// domain (pkg/virt-handler/vm.go updateVMIStatus, migration-source.go,
// migration-target.go; pkg/network/setup/netstat.go):
//
//   - Scheduled → Running once the guest has booted (BootDelay), with the
//     domain's machine type, the disks' target devices in volumeStatus
//     (sorted by name, as virt-handler sorts them), the current guest
//     memory, the NICs, LiveMigratable and StorageLiveMigratable with
//     virt-handler's rules, and the migration method;
//   - the guest agent (kubevirtsim's AnnotationAgent) connects AgentDelay
//     after boot: AgentConnected, guestOSInfo, and guest interface names
//     and addresses;
//   - a deleted VMI shuts down (StopDelay, capped by its grace period) and
//     becomes Succeeded; one that never booted Failed;
//   - both handlers' part of a live migration: the target advertises its
//     address and ports, the source starts (startTimestamp), and after
//     MigrationDelay the target takes the VMI over (nodeName, label) and
//     marks the migration completed.

// Addresses and ports the stand-in virt-handler reports.
const (
	migrationListenerPort = "49152"
	migrationDirectPort   = 49153
)

func (n *Nodes) syncVMI(ctx context.Context, key string) (time.Duration, error) {
	vmi := cached[*virtv1.VirtualMachineInstance](n.vmis, key)
	if vmi == nil {
		n.forgetWait(nodesKeyVMI + key + "/")
		return 0, nil
	}
	if vmi.Status.NodeName == "" || vmi.IsFinal() {
		return 0, nil
	}
	wait := nodesKeyVMI + key + "/" + string(vmi.UID) + "/"
	now := time.Now()
	cur := vmi.DeepCopy()
	var after time.Duration
	switch {
	case vmi.DeletionTimestamp != nil:
		after = n.shutdown(cur, wait, now)
	case vmi.Status.Phase == virtv1.Scheduled:
		if n.launcherPod(vmi, vmi.Status.NodeName) == nil {
			return 0, nil
		}
		if left := n.waited(wait+"boot", n.opts.BootDelay); left > 0 {
			return left, nil
		}
		setVMIPhase(cur, virtv1.Running, now)
		n.refreshDomain(cur, wait, now)
		after = n.agentWait(cur, wait)
	case vmi.Status.Phase == virtv1.Running:
		n.refreshDomain(cur, wait, now)
		after = minPositive(n.agentWait(cur, wait), n.migrate(cur, wait, now))
	}
	if equality.Semantic.DeepEqual(vmi, cur) {
		return after, nil
	}
	_, err := n.opts.KubeVirt.KubevirtV1().VirtualMachineInstances(cur.Namespace).Update(ctx, cur, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	return after, err
}

// shutdown shuts a deleted VMI's guest down: after StopDelay, or its
// grace period if shorter, the domain is gone and the VMI Succeeded (one
// that never booted Failed). It returns when to look again.
func (n *Nodes) shutdown(vmi *virtv1.VirtualMachineInstance, wait string, now time.Time) time.Duration {
	if vmi.Status.Phase != virtv1.Running {
		setVMIPhase(vmi, virtv1.Failed, now)
		return 0
	}
	delay := n.opts.StopDelay
	if g := vmi.Spec.TerminationGracePeriodSeconds; g != nil && time.Duration(*g)*time.Second < delay {
		delay = time.Duration(*g) * time.Second
	}
	if left := n.waited(wait+"shutdown", delay); left > 0 {
		return left
	}
	setVMIPhase(vmi, virtv1.Succeeded, now)
	return 0
}

// GuestShutdown simulates a power-off from inside the guest of a running
// VMI: virt-handler reports the domain shut off and the VMI Succeeded; its
// virt-launcher pod completes; the run strategy decides what follows.
func (n *Nodes) GuestShutdown(ctx context.Context, ns, name string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		// virt-handler may list and watch instances, not get them.
		list, err := n.opts.KubeVirt.KubevirtV1().VirtualMachineInstances(ns).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		if err != nil {
			return err
		}
		if len(list.Items) != 1 {
			return apierrors.NewNotFound(vmiGroupResource, name)
		}
		vmi := &list.Items[0]
		if vmi.Status.Phase != virtv1.Running {
			return apierrors.NewConflict(vmiGroupResource, name, errors.New(msgVMINotRunning))
		}
		setVMIPhase(vmi, virtv1.Succeeded, time.Now())
		_, err = n.opts.KubeVirt.KubevirtV1().VirtualMachineInstances(ns).Update(ctx, vmi, metav1.UpdateOptions{})
		return err
	})
}

// refreshDomain writes what virt-handler reads from the running domain.
func (n *Nodes) refreshDomain(vmi *virtv1.VirtualMachineInstance, wait string, now time.Time) {
	spec := &vmi.Spec
	vmi.Status.Machine = &virtv1.Machine{Type: machineType(spec)}
	if vmi.Status.Memory != nil {
		if guest := guestMemory(spec); guest != nil && vmi.Status.Memory.GuestCurrent == nil {
			vmi.Status.Memory.GuestCurrent = ptr(guest.DeepCopy())
		}
	}
	if vmi.Status.SelinuxContext == "" {
		vmi.Status.SelinuxContext = "none"
	}
	n.volumeTargets(vmi)
	agent := n.agentConnected(vmi) && n.waited(wait+"agent", n.opts.AgentDelay) == 0
	vmi.Status.Interfaces = n.interfaces(vmi, agent)
	if agent {
		vmi.Status.Interfaces = append(vmi.Status.Interfaces, guestOnlyInterfaces(vmi)...)
	}
	migrationConditions(vmi)
	if agent {
		if findVMICondition(vmi, virtv1.VirtualMachineInstanceAgentConnected) == nil {
			setVMICondition(vmi, virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceAgentConnected,
				Status: corev1.ConditionTrue, LastProbeTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now)})
		}
		vmi.Status.GuestOSInfo = guestOSFixture(guestOS(vmi))
	} else {
		removeVMICondition(vmi, virtv1.VirtualMachineInstanceAgentConnected)
		vmi.Status.GuestOSInfo = virtv1.VirtualMachineInstanceGuestOSInfo{}
	}
}

// agentWait is how long until the guest agent of a VMI that has one
// connects (0: no agent, or connected).
func (n *Nodes) agentWait(vmi *virtv1.VirtualMachineInstance, wait string) time.Duration {
	if !n.agentConnected(vmi) {
		return 0
	}
	return n.waited(wait+"agent", n.opts.AgentDelay)
}

// agentConnected decides as the simulated cluster does whether the guest
// of vmi runs an agent (agentConnected): its owning VM, read once per
// instance, counts too, so that a guest whose PVE config enables the
// agent runs one on both.
func (n *Nodes) agentConnected(vmi *virtv1.VirtualMachineInstance) bool {
	if _, ok := vmi.Annotations[AnnotationAgent]; ok || n.opts.Dynamic == nil {
		return agentConnected(vmi, nil)
	}
	n.mu.Lock()
	has, ok := n.agents[vmi.UID]
	n.mu.Unlock()
	if ok {
		return has
	}
	ref := metav1.GetControllerOf(vmi)
	if ref == nil || ref.Kind != "VirtualMachine" {
		return agentConnected(vmi, nil)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	u, err := n.opts.Dynamic.Resource(vmGVR).Namespace(vmi.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	var vm virtv1.VirtualMachine
	if err != nil || runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &vm) != nil || vm.UID != ref.UID {
		return agentConnected(vmi, nil)
	}
	has = agentConnected(vmi, &vm)
	n.mu.Lock()
	n.agents[vmi.UID] = has
	n.mu.Unlock()
	return has
}

// volumeTargets fills the target device of each volume status entry the
// VMI controller created, and sorts the entries by name
// (updateVolumeStatusesFromDomain).
func (n *Nodes) volumeTargets(vmi *virtv1.VirtualMachineInstance) {
	targets := map[string]string{}
	for _, st := range volumeStatus(&vmi.Spec) {
		targets[st.Name] = st.Target
	}
	for i := range vmi.Status.VolumeStatus {
		vmi.Status.VolumeStatus[i].Target = targets[vmi.Status.VolumeStatus[i].Name]
	}
	sort.SliceStable(vmi.Status.VolumeStatus, func(i, j int) bool {
		return vmi.Status.VolumeStatus[i].Name < vmi.Status.VolumeStatus[j].Name
	})
}

// interfaces is netstat.UpdateStatus for the stand-in domain: one entry
// per NIC of the domain (spec interfaces that are not absent), with the
// pod addresses on the pod network, the guest agent's interface names and
// addresses when it is connected, the pod interface names the VMI
// controller recorded, and the primary NIC first.
func (n *Nodes) interfaces(vmi *virtv1.VirtualMachineInstance, agent bool) []virtv1.VirtualMachineInstanceNetworkInterface {
	prev := map[string]virtv1.VirtualMachineInstanceNetworkInterface{}
	for _, st := range vmi.Status.Interfaces {
		if st.Name != "" {
			prev[st.Name] = st
		}
	}
	nets := map[string]virtv1.Network{}
	for _, net := range vmi.Spec.Networks {
		nets[net.Name] = net
	}
	var podIPs []string
	if pod := n.launcherPod(vmi, vmi.Status.NodeName); pod != nil {
		for _, ip := range pod.Status.PodIPs {
			podIPs = append(podIPs, ip.IP)
		}
	}
	var out []virtv1.VirtualMachineInstanceNetworkInterface
	for i, iface := range vmi.Spec.Domain.Devices.Interfaces {
		if iface.State == virtv1.InterfaceStateAbsent {
			continue
		}
		st := virtv1.VirtualMachineInstanceNetworkInterface{
			Name: iface.Name, MAC: strings.ToLower(iface.MacAddress), InfoSource: "domain",
			QueueCount: 1, LinkState: "up", PodInterfaceName: prev[iface.Name].PodInterfaceName,
		}
		if st.MAC == "" {
			h := hashBytes(string(vmi.UID), iface.Name)
			st.MAC = fmt.Sprintf("52:54:00:%02x:%02x:%02x", h[0], h[1], h[2])
		}
		if iface.State == virtv1.InterfaceStateLinkDown {
			st.LinkState = "down"
		}
		net := nets[iface.Name]
		if net.Pod != nil && len(podIPs) > 0 {
			st.IP, st.IPs = podIPs[0], podIPs
		}
		if agent {
			st.InfoSource = "domain, guest-agent"
			st.InterfaceName = guestNICName(guestOS(vmi), i)
			if net.Pod == nil {
				h := hashBytes(string(vmi.UID), iface.Name)
				ip := fmt.Sprintf("192.168.%d.%d", 100+i, 10+int(h[4])%240)
				st.IP, st.IPs = ip, []string{ip}
			}
		}
		if net.Multus != nil && strings.Contains(prev[iface.Name].InfoSource, "multus-status") {
			st.InfoSource += ", multus-status"
		}
		if net.Pod != nil {
			out = append([]virtv1.VirtualMachineInstanceNetworkInterface{st}, out...)
		} else {
			out = append(out, st)
		}
	}
	return out
}

// migrationConditions sets LiveMigratable, StorageLiveMigratable and the
// migration method as virt-handler calculates them
// (calculateLiveMigrationCondition, checkVolumesForMigration): every
// claim, the read-only CD-ROM's included, must be ReadWriteMany; bridge
// binding on the pod network and host devices are not migratable; other
// node-local disks make it a block migration.
func migrationConditions(vmi *virtv1.VirtualMachineInstance) {
	block, storageErr := volumesMigratable(vmi)
	cond := virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceIsMigratable, Status: corev1.ConditionTrue}
	storage := virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceIsStorageLiveMigratable, Status: corev1.ConditionTrue}
	switch reason, msg := notMigratable(&vmi.Spec); {
	case reason != "":
		cond = virtv1.VirtualMachineInstanceCondition{Type: cond.Type, Status: corev1.ConditionFalse, Reason: reason, Message: msg}
		storage = virtv1.VirtualMachineInstanceCondition{Type: storage.Type, Status: corev1.ConditionFalse,
			Reason: virtv1.VirtualMachineInstanceReasonNotMigratable, Message: reason + ": " + msg}
	case len(vmi.Spec.Domain.Devices.HostDevices) > 0 || len(vmi.Spec.Domain.Devices.GPUs) > 0:
		msg := "VMI uses a PCI host devices"
		cond = virtv1.VirtualMachineInstanceCondition{Type: cond.Type, Status: corev1.ConditionFalse,
			Reason: virtv1.VirtualMachineInstanceReasonHostDeviceNotMigratable, Message: msg}
		storage = virtv1.VirtualMachineInstanceCondition{Type: storage.Type, Status: corev1.ConditionFalse,
			Reason: virtv1.VirtualMachineInstanceReasonNotMigratable, Message: virtv1.VirtualMachineInstanceReasonHostDeviceNotMigratable + ": " + msg}
	case storageErr != nil:
		cond = virtv1.VirtualMachineInstanceCondition{Type: cond.Type, Status: corev1.ConditionFalse,
			Reason: virtv1.VirtualMachineInstanceReasonDisksNotMigratable, Message: storageErr.Error()}
	}
	for _, c := range []virtv1.VirtualMachineInstanceCondition{cond, storage} {
		if old := findVMICondition(vmi, c.Type); old != nil && old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message {
			continue
		}
		removeVMICondition(vmi, c.Type)
		vmi.Status.Conditions = append(vmi.Status.Conditions, c)
	}
	vmi.Status.MigrationMethod = virtv1.LiveMigration
	if block {
		vmi.Status.MigrationMethod = virtv1.BlockMigration
	}
}

// volumesMigratable is virt-handler's checkVolumesForMigration.
func volumesMigratable(vmi *virtv1.VirtualMachineInstance) (block bool, err error) {
	status := map[string]virtv1.VolumeStatus{}
	for _, st := range vmi.Status.VolumeStatus {
		status[st.Name] = st
	}
	readOnlyCDROM := map[string]bool{}
	for _, d := range vmi.Spec.Domain.Devices.Disks {
		if d.CDRom != nil && (d.CDRom.ReadOnly == nil || *d.CDRom.ReadOnly) {
			readOnlyCDROM[d.Name] = true
		}
	}
	for _, v := range vmi.Spec.Volumes {
		switch {
		case v.PersistentVolumeClaim != nil || v.DataVolume != nil:
			claim := ""
			if v.PersistentVolumeClaim != nil {
				claim = v.PersistentVolumeClaim.ClaimName
			} else {
				claim = v.DataVolume.Name
			}
			st, ok := status[v.Name]
			if !ok || st.PersistentVolumeClaimInfo == nil {
				return true, fmt.Errorf("cannot migrate VMI: Unable to determine if PVC %v is shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)", claim)
			}
			if !hasAccessMode(st.PersistentVolumeClaimInfo.AccessModes, corev1.ReadWriteMany) {
				return true, fmt.Errorf("cannot migrate VMI: PVC %v is not shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)", claim)
			}
		case v.HostDisk != nil:
			if v.HostDisk.Shared == nil || !*v.HostDisk.Shared {
				return true, errors.New("cannot migrate VMI with non-shared HostDisk")
			}
		case readOnlyCDROM[v.Name]:
		default:
			block = true
		}
	}
	return block, nil
}

func hasAccessMode(modes []corev1.PersistentVolumeAccessMode, m corev1.PersistentVolumeAccessMode) bool {
	for _, x := range modes {
		if x == m {
			return true
		}
	}
	return false
}

// migrate plays both virt-handlers of a live migration the migration
// controller has handed a target pod: the target advertises its address,
// the source starts, and after MigrationDelay the guest runs on the
// target. It returns when to look again.
func (n *Nodes) migrate(vmi *virtv1.VirtualMachineInstance, wait string, now time.Time) time.Duration {
	ms := vmi.Status.MigrationState
	if ms == nil || ms.Completed || ms.Failed || ms.MigrationUID == "" || ms.TargetNode == "" || ms.TargetPod == "" {
		return 0
	}
	target := cached[*corev1.Pod](n.pods, vmi.Namespace+"/"+ms.TargetPod)
	if target == nil || target.Status.Phase != corev1.PodRunning {
		return 0
	}
	mt := metav1.NewTime(now)
	switch {
	case ms.TargetNodeAddress == "":
		node := cached[*corev1.Node](n.nodes, ms.TargetNode)
		if node == nil {
			return 0
		}
		ms.TargetNodeAddress = nodeIP(node)
		ms.TargetDirectMigrationNodePorts = map[string]int{migrationListenerPort: 0, strconv.Itoa(migrationDirectPort): migrationDirectPort}
		if ms.TargetState != nil {
			ms.TargetState.NodeAddress = ptr(ms.TargetNodeAddress)
			ms.TargetState.DirectMigrationNodePorts = ms.TargetDirectMigrationNodePorts
		}
		return 0
	}
	// The memory transfer starts with the first look after the target is
	// ready.
	transfer := n.waited(wait+"migration/"+string(ms.MigrationUID), n.opts.MigrationDelay)
	if ms.StartTimestamp == nil {
		ms.StartTimestamp = &mt
		ms.Mode = virtv1.MigrationPreCopy
		return max(transfer, time.Millisecond)
	}
	if transfer > 0 {
		return transfer
	}
	ms.TargetNodeDomainDetected = true
	ms.TargetNodeDomainReadyTimestamp = &mt
	ms.EndTimestamp = &mt
	if ms.TargetState != nil {
		ms.TargetState.DomainDetected = true
		ms.TargetState.DomainReadyTimestamp = &mt
	}
	removeVMICondition(vmi, virtv1.VirtualMachineInstanceMigrationRequired)
	hotplugOnTarget(vmi)
	if vmi.Labels == nil {
		vmi.Labels = map[string]string{}
	}
	vmi.Labels[virtv1.NodeNameLabel] = ms.TargetNode
	delete(vmi.Labels, virtv1.OutdatedLauncherImageLabel)
	vmi.Status.LauncherContainerImageVersion = ""
	vmi.Status.NodeName = ms.TargetNode
	vmi.Status.EvacuationNodeName = ""
	vmi.Status.MigrationTransport = virtv1.MigrationTransportUnix
	ms.Completed = true
	return 0
}

// launcherPod is the running virt-launcher pod of vmi on node.
func (n *Nodes) launcherPod(vmi *virtv1.VirtualMachineInstance, node string) *corev1.Pod {
	objs, err := n.pods.GetIndexer().ByIndex(nodesIndexVMI, vmi.Namespace+"/"+vmi.Name)
	if err != nil {
		return nil
	}
	for _, o := range objs {
		pod := o.(*corev1.Pod)
		if pod.Spec.NodeName == node && pod.Status.Phase == corev1.PodRunning && podVMIUID(pod) == vmi.UID {
			if _, active := vmi.Status.ActivePods[pod.UID]; active {
				return pod
			}
		}
	}
	return nil
}

// setVMIPhase sets the phase and records its transition time, as
// virt-handler does (controller.SetVMIPhaseTransitionTimestamp).
func setVMIPhase(vmi *virtv1.VirtualMachineInstance, phase virtv1.VirtualMachineInstancePhase, now time.Time) {
	if vmi.Status.Phase == phase {
		return
	}
	vmi.Status.Phase = phase
	vmi.Status.PhaseTransitionTimestamps = append(vmi.Status.PhaseTransitionTimestamps,
		virtv1.VirtualMachineInstancePhaseTransitionTimestamp{Phase: phase, PhaseTransitionTimestamp: metav1.NewTime(now)})
}
