package kubevirtsim

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	virtv1 "kubevirt.io/api/core/v1"
)

// syncVMI plays virt-controller's VMI controller and virt-handler for one
// VMI: it moves the VMI through Pending → Scheduling → Scheduled → Running,
// keeps the guest-side status (agent, pause) current and shuts the guest down
// when the VMI is deleted. It does not remove finalizers; see releaseVMI.
//
// It returns the VMI as last written (nil when it no longer exists) and, when
// the VMI needs attention later, the delay after which to look again.
func (c *Controller) syncVMI(ctx context.Context, vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance) (*virtv1.VirtualMachineInstance, time.Duration, error) {
	now := time.Now()
	if vm != nil && !isControlledBy(vmi, vm) {
		vm = nil
	}

	// Garbage collection: a VMI whose owning VM is gone is deleted (the
	// kube-controller-manager's garbage collector does this in a cluster).
	if ref := metav1.GetControllerOf(vmi); ref != nil && ref.Kind == virtv1.VirtualMachineGroupVersionKind.Kind &&
		vmi.DeletionTimestamp == nil && vm == nil {
		gone, err := c.ownerGone(ctx, vmi.Namespace, ref)
		if err != nil {
			return vmi, 0, err
		}
		if gone {
			c.log.Info("deleting VMI whose VM is gone", zapKey(vmi))
			uid := vmi.UID
			err := c.kv.KubevirtV1().VirtualMachineInstances(vmi.Namespace).Delete(ctx, vmi.Name,
				metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return vmi, 0, err
			}
			return c.refetchVMI(ctx, vmi)
		}
	}

	if vmi.DeletionTimestamp != nil {
		return c.syncDeletingVMI(ctx, vmi, now)
	}
	if vmi.IsFinal() {
		return vmi, 0, nil
	}

	orig := vmi.DeepCopy()
	agent := agentConnected(vmi, vm)
	switch vmi.Status.Phase {
	case virtv1.VmPhaseUnset:
		// Created without KubeVirt's mutating webhook (e.g. a bare VMI):
		// apply what the webhook adds on create.
		if !hasFinalizer(vmi, virtv1.VirtualMachineInstanceFinalizer) {
			vmi.Finalizers = append(vmi.Finalizers, virtv1.VirtualMachineInstanceFinalizer)
		}
		vmi.Status.RuntimeUser = nonRootUser
		setPhase(vmi, virtv1.Pending, now)
		setVMICondition(vmi, readyCondition(corev1.ConditionFalse, virtv1.PodNotExistsReason, messagePodNotExists, now))
		c.seen.since(vmi.UID, now)
		return c.writeVMI(ctx, orig, vmi, time.Millisecond)

	case virtv1.Pending:
		// virt-controller creates the virt-launcher pod right away, once it
		// can render it.
		if reason, msg := c.renderError(vmi); reason != "" {
			syncFailure(vmi, reason, msg, now)
			if reason == reasonFailedPvcNotFound {
				setVMICondition(vmi, virtv1.VirtualMachineInstanceCondition{Type: podScheduledCondition, Status: corev1.ConditionFalse,
					Reason: corev1.PodReasonUnschedulable, Message: msg, LastTransitionTime: metav1.NewTime(now)})
			}
			// The VMI controller retries with backoff.
			return c.writeVMI(ctx, orig, vmi, 5*time.Second)
		}
		removeVMICondition(vmi, virtv1.VirtualMachineInstanceSynchronized)
		removeVMICondition(vmi, podScheduledCondition)
		c.seen.since(vmi.UID, now)
		setPhase(vmi, virtv1.Scheduling, now)
		setVMICondition(vmi, readyCondition(corev1.ConditionFalse, virtv1.GuestNotRunningReason, messageGuestNotRunning, now))
		return c.writeVMI(ctx, orig, vmi, time.Millisecond)

	case virtv1.Scheduling:
		node, why := c.pickNode(vmi)
		if node == "" {
			setVMICondition(vmi, virtv1.VirtualMachineInstanceCondition{
				Type:               podScheduledCondition,
				Status:             corev1.ConditionFalse,
				Reason:             corev1.PodReasonUnschedulable,
				Message:            why,
				LastProbeTime:      metav1.Time{},
				LastTransitionTime: metav1.NewTime(now),
			})
			// Node events requeue unschedulable VMIs; poll slowly as well.
			return c.writeVMI(ctx, orig, vmi, 5*time.Second)
		}
		removeVMICondition(vmi, podScheduledCondition)
		if wait := c.seen.since(vmi.UID, now).Add(c.opts.StartDelay).Sub(now); wait > 0 {
			return c.writeVMI(ctx, orig, vmi, wait)
		}
		c.schedule(vmi, node, now)
		written, _, err := c.writeVMI(ctx, orig, vmi, 0)
		if err != nil || written == nil {
			// A conflict may mean an earlier pass placed the VMI already
			// and the cache has not caught up: the assumption stays until
			// the retry, which picks again (and replaces it) or finds the
			// VMI placed. Only a VMI that is gone places nothing.
			if err == nil {
				c.unassume(vmi.UID)
			}
			return written, 0, err
		}
		// virt-handler starts the domain right after the pod is ready.
		orig = written.DeepCopy()
		vmi = written
		c.startDomain(vmi, false, now)
		agentUp, wait := c.agentPolled(vmi, agent, now)
		c.refreshGuest(vmi, agentUp, now)
		return c.writeVMI(ctx, orig, vmi, wait)

	case virtv1.Scheduled:
		c.startDomain(vmi, false, now)
		agentUp, wait := c.agentPolled(vmi, agent, now)
		c.refreshGuest(vmi, agentUp, now)
		return c.writeVMI(ctx, orig, vmi, wait)

	case virtv1.Running:
		agentUp, wait := c.agentPolled(vmi, agent, now)
		c.refreshGuest(vmi, agentUp, now)
		return c.writeVMI(ctx, orig, vmi, wait)
	}
	return vmi, 0, nil
}

// syncDeletingVMI shuts the guest down after a VMI was deleted: the
// virt-launcher pod terminates, the guest gets StopDelay (capped by the VMI's
// terminationGracePeriodSeconds; 0 stops at once) and the VMI becomes
// Succeeded. A VMI that never ran fails right away.
func (c *Controller) syncDeletingVMI(ctx context.Context, vmi *virtv1.VirtualMachineInstance, now time.Time) (*virtv1.VirtualMachineInstance, time.Duration, error) {
	if vmi.IsFinal() {
		return vmi, 0, nil
	}
	orig := vmi.DeepCopy()
	if !vmi.IsRunning() {
		markFinal(vmi, virtv1.Failed, now)
		return c.writeVMI(ctx, orig, vmi, 0)
	}
	delay := c.opts.StopDelay
	if g := vmi.Spec.TerminationGracePeriodSeconds; g != nil && time.Duration(*g)*time.Second < delay {
		delay = time.Duration(*g) * time.Second
	}
	if delay < 0 {
		delay = 0
	}
	if wait := c.stopping.since(vmi.UID, now).Add(delay).Sub(now); wait > 0 {
		setVMICondition(vmi, readyCondition(corev1.ConditionFalse, virtv1.PodTerminatingReason, messagePodTerminating, now))
		return c.writeVMI(ctx, orig, vmi, wait)
	}
	c.log.Debug("guest shut down", zapKey(vmi))
	markFinal(vmi, virtv1.Succeeded, now)
	return c.writeVMI(ctx, orig, vmi, 0)
}

// releaseVMI removes KubeVirt's finalizers from a final VMI once its state
// has been recorded on the VM (the VM controller's finalizer) and the
// launcher pod is gone (the VMI controller's). A deleted VMI disappears
// with that; a final VMI that was not deleted stays, as in KubeVirt.
func (c *Controller) releaseVMI(ctx context.Context, vmi *virtv1.VirtualMachineInstance) (*virtv1.VirtualMachineInstance, error) {
	if vmi == nil || !vmi.IsFinal() {
		return vmi, nil
	}
	fins := withoutFinalizers(vmi.Finalizers, kubevirtFinalizers...)
	now := time.Now()
	orig := vmi.DeepCopy()
	vmi.Finalizers = fins
	vmi.Status.LauncherContainerImageVersion = ""
	setVMICondition(vmi, readyCondition(corev1.ConditionFalse, virtv1.PodNotExistsReason, messagePodNotExists, now))
	if equality.Semantic.DeepEqual(orig, vmi) {
		return vmi, nil
	}
	written, _, err := c.writeVMI(ctx, orig, vmi, 0)
	return written, err
}

// writeVMI updates the VMI when it changed and passes requeue through. A VMI
// that vanished while being written is reported as nil.
func (c *Controller) writeVMI(ctx context.Context, orig, vmi *virtv1.VirtualMachineInstance, requeue time.Duration) (*virtv1.VirtualMachineInstance, time.Duration, error) {
	if equality.Semantic.DeepEqual(orig, vmi) {
		return vmi, requeue, nil
	}
	// The VMI has no status subresource: status is written with the object.
	updated, err := c.kv.KubevirtV1().VirtualMachineInstances(vmi.Namespace).Update(ctx, vmi, metav1.UpdateOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, 0, nil
		}
		return orig, 0, err
	}
	if updated.DeletionTimestamp != nil && len(updated.Finalizers) == 0 {
		// Removing the last finalizer of a deleted object deletes it.
		return nil, 0, nil
	}
	return updated, requeue, nil
}

func (c *Controller) refetchVMI(ctx context.Context, vmi *virtv1.VirtualMachineInstance) (*virtv1.VirtualMachineInstance, time.Duration, error) {
	cur, err := c.kv.KubevirtV1().VirtualMachineInstances(vmi.Namespace).Get(ctx, vmi.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, 0, nil
	}
	if err != nil {
		return vmi, 0, err
	}
	return cur, 0, nil
}

// ownerGone reports whether the VM a VMI's controller reference points to no
// longer exists (checked against the API server, not the cache).
func (c *Controller) ownerGone(ctx context.Context, ns string, ref *metav1.OwnerReference) (bool, error) {
	vm, err := c.kv.KubevirtV1().VirtualMachines(ns).Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return vm.UID != ref.UID, nil
}

func isControlledBy(vmi *virtv1.VirtualMachineInstance, vm *virtv1.VirtualMachine) bool {
	return ownedBy(vmi, vm.UID)
}

// schedule binds the VMI to node: what the VMI controller records once the
// virt-launcher pod is scheduled and ready.
func (c *Controller) schedule(vmi *virtv1.VirtualMachineInstance, node string, now time.Time) {
	setPhase(vmi, virtv1.Scheduled, now)
	vmi.Status.NodeName = node
	if vmi.Labels == nil {
		vmi.Labels = map[string]string{}
	}
	vmi.Labels[virtv1.NodeNameLabel] = node
	qos := corev1.PodQOSBurstable
	vmi.Status.QOSClass = &qos
	vmi.Status.MigrationTransport = virtv1.MigrationTransportUnix
	vmi.Status.LauncherContainerImageVersion = launcherImage
	vmi.Status.ActivePods = map[types.UID]string{podUID(vmi): node}
	vmi.Status.SelinuxContext = "none"
	if vmi.Status.RuntimeUser == 0 {
		vmi.Status.RuntimeUser = nonRootUser
	}
}

// startDomain is virt-handler starting the guest: the VMI becomes Running
// with its guest-visible status.
func (c *Controller) startDomain(vmi *virtv1.VirtualMachineInstance, agent bool, now time.Time) {
	setPhase(vmi, virtv1.Running, now)
	spec := &vmi.Spec
	vmi.Status.Machine = &virtv1.Machine{Type: machineType(spec)}
	vmi.Status.CurrentCPUTopology = cpuTopology(spec)
	if guest := guestMemory(spec); guest != nil {
		vmi.Status.Memory = &virtv1.MemoryStatus{
			GuestAtBoot:    ptr(guest.DeepCopy()),
			GuestCurrent:   ptr(guest.DeepCopy()),
			GuestRequested: ptr(guest.DeepCopy()),
		}
	}
	vmi.Status.VolumeStatus = volumeStatus(spec)
	c.claimInfo(vmi)
	setVMICondition(vmi, readyCondition(corev1.ConditionTrue, "", "", now))
	migrationConditions(vmi)
	if spec.StartStrategy != nil && *spec.StartStrategy == virtv1.StartStrategyPaused {
		setPaused(vmi, true, now)
	}
	c.refreshGuest(vmi, agent, now)
}

// refreshGuest keeps the guest-agent driven parts of a running VMI's status
// in line with the simulated agent, and Ready in line with Paused.
func (c *Controller) refreshGuest(vmi *virtv1.VirtualMachineInstance, agent bool, now time.Time) {
	if agent {
		if findVMICondition(vmi, virtv1.VirtualMachineInstanceAgentConnected) == nil {
			setVMICondition(vmi, virtv1.VirtualMachineInstanceCondition{
				Type:          virtv1.VirtualMachineInstanceAgentConnected,
				Status:        corev1.ConditionTrue,
				LastProbeTime: metav1.NewTime(now),
			})
		}
		vmi.Status.GuestOSInfo = guestOSFixture(guestOS(vmi))
	} else {
		removeVMICondition(vmi, virtv1.VirtualMachineInstanceAgentConnected)
	}
	vmi.Status.Interfaces = interfaceStatus(vmi, agent)
	if agent {
		vmi.Status.Interfaces = append(vmi.Status.Interfaces, guestOnlyInterfaces(vmi)...)
	}
	if isPaused(vmi) {
		setVMICondition(vmi, readyCondition(corev1.ConditionFalse, reasonReadinessGates, messageUnpausedGate, now))
	} else {
		setVMICondition(vmi, readyCondition(corev1.ConditionTrue, "", "", now))
	}
}

// agentPolled tells whether virt-handler has polled a running guest's
// agent yet: AgentDelay after the guest started running. Until then it
// says when to look again.
func (c *Controller) agentPolled(vmi *virtv1.VirtualMachineInstance, agent bool, now time.Time) (bool, time.Duration) {
	if !agent || findVMICondition(vmi, virtv1.VirtualMachineInstanceAgentConnected) != nil {
		return agent, 0
	}
	var running time.Time
	for _, t := range vmi.Status.PhaseTransitionTimestamps {
		if t.Phase == virtv1.Running {
			running = t.PhaseTransitionTimestamp.Time
		}
	}
	if wait := running.Add(c.opts.AgentDelay).Sub(now); wait > 0 && !running.IsZero() {
		return false, wait
	}
	return true, 0
}

// agentConnected decides whether the simulated guest runs an agent: the
// VMI's AnnotationAgent wins, then the owning VM's template and the VM;
// without any, a guest whose PVE config (the caddy-proxmox API's
// annotation) enables the agent runs one, as the guest of a PVE user who
// sets agent=1 does.
func agentConnected(vmi *virtv1.VirtualMachineInstance, vm *virtv1.VirtualMachine) bool {
	if v, ok := vmi.Annotations[AnnotationAgent]; ok {
		return v == "true"
	}
	if vm == nil {
		return false
	}
	if vm.Spec.Template != nil {
		if v, ok := vm.Spec.Template.ObjectMeta.Annotations[AnnotationAgent]; ok {
			return v == "true"
		}
	}
	if v, ok := vm.Annotations[AnnotationAgent]; ok {
		return v == "true"
	}
	return pveAgentEnabled(vm.Annotations[annotationConfig])
}

// pveAgentEnabled reads the agent key of a PVE config stored by the
// caddy-proxmox API ("1", "enabled=1,fstrim_cloned_disks=1", ...).
func pveAgentEnabled(config string) bool {
	if config == "" {
		return false
	}
	var cfg map[string]string
	if json.Unmarshal([]byte(config), &cfg) != nil {
		return false
	}
	first, _, _ := strings.Cut(cfg["agent"], ",")
	switch strings.TrimPrefix(first, "enabled=") {
	case "1", "on", "yes", "true":
		return true
	}
	return false
}

func guestOS(vmi *virtv1.VirtualMachineInstance) string {
	return strings.ToLower(vmi.Annotations[AnnotationGuestOS])
}

func guestOSFixture(os string) virtv1.VirtualMachineInstanceGuestOSInfo {
	if os == "windows" {
		return virtv1.VirtualMachineInstanceGuestOSInfo{
			Name:          "Microsoft Windows",
			KernelRelease: "26100",
			Version:       "11",
			PrettyName:    "Windows 11 Pro",
			VersionID:     "11",
			KernelVersion: "10.0",
			Machine:       "x86_64",
			ID:            "mswindows",
		}
	}
	return virtv1.VirtualMachineInstanceGuestOSInfo{
		Name:          "Debian GNU/Linux",
		KernelRelease: "6.1.0-28-amd64",
		Version:       "12 (bookworm)",
		PrettyName:    "Debian GNU/Linux 12 (bookworm)",
		VersionID:     "12",
		KernelVersion: "#1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1 (2024-11-22)",
		Machine:       "x86_64",
		ID:            "debian",
	}
}

// interfaceStatus reports one entry per spec interface. Pod-network
// interfaces get the (dual-stack) pod addresses even without an agent; other
// networks only report addresses through the agent, which also reports the
// guest's interface name.
func interfaceStatus(vmi *virtv1.VirtualMachineInstance, agent bool) []virtv1.VirtualMachineInstanceNetworkInterface {
	nets := map[string]virtv1.Network{}
	for _, n := range vmi.Spec.Networks {
		nets[n.Name] = n
	}
	var out []virtv1.VirtualMachineInstanceNetworkInterface
	for i, iface := range vmi.Spec.Domain.Devices.Interfaces {
		if iface.State == virtv1.InterfaceStateAbsent {
			continue
		}
		h := hashBytes(string(vmi.UID), iface.Name)
		st := virtv1.VirtualMachineInstanceNetworkInterface{
			Name:       iface.Name,
			MAC:        strings.ToLower(iface.MacAddress),
			InfoSource: "domain",
			QueueCount: 1,
			LinkState:  "up",
		}
		if st.MAC == "" {
			st.MAC = fmt.Sprintf("52:54:00:%02x:%02x:%02x", h[0], h[1], h[2])
		}
		if iface.State == virtv1.InterfaceStateLinkDown {
			st.LinkState = "down"
		}
		n := nets[iface.Name]
		var ips []string
		if n.Pod != nil {
			st.PodInterfaceName = "eth0"
			ips = []string{
				fmt.Sprintf("10.244.%d.%d", h[3], 2+int(h[4])%252),
				fmt.Sprintf("fd00:10:244:%x::%x", h[3], 2+int(h[4])%252),
			}
			if ip := vmi.Annotations[AnnotationPodIP]; ip != "" {
				ips[0] = ip
			}
		} else {
			st.PodInterfaceName = fmt.Sprintf("pod%x", h[5:10])
			if agent {
				ips = []string{fmt.Sprintf("192.168.%d.%d", 100+i, 10+int(h[4])%240)}
			}
		}
		if agent {
			st.InfoSource = "domain, guest-agent"
			st.InterfaceName = guestNICName(guestOS(vmi), i)
		}
		if len(ips) > 0 {
			st.IP = ips[0]
			st.IPs = ips
		}
		out = append(out, st)
	}
	return out
}

// guestOnlyInterfaces are the interfaces of AnnotationGuestInterfaces as
// virt-handler reports what the guest agent lists beyond the VMI's NICs
// (pkg/network/setup/netstat.go ifacesStatusFromGuestAgent): no name,
// the guest's interface name, its MAC and addresses, infoSource
// guest-agent, at most ten.
func guestOnlyInterfaces(vmi *virtv1.VirtualMachineInstance) []virtv1.VirtualMachineInstanceNetworkInterface {
	const guestOnlyInterfaceLimit = 10
	var out []virtv1.VirtualMachineInstanceNetworkInterface
	for _, entry := range strings.Split(vmi.Annotations[AnnotationGuestInterfaces], ",") {
		name, addrs, _ := strings.Cut(strings.TrimSpace(entry), "=")
		name, mac, fixed := strings.Cut(name, "@")
		if name == "" || len(out) == guestOnlyInterfaceLimit {
			continue
		}
		if !fixed {
			h := hashBytes(string(vmi.UID), "guest/"+name)
			mac = fmt.Sprintf("02:42:%02x:%02x:%02x:%02x", h[0], h[1], h[2], h[3])
		}
		st := virtv1.VirtualMachineInstanceNetworkInterface{InterfaceName: name, InfoSource: "guest-agent", MAC: mac}
		for _, ip := range strings.Split(addrs, ";") {
			if ip = strings.TrimSpace(ip); ip != "" {
				st.IPs = append(st.IPs, ip)
			}
		}
		if len(st.IPs) > 0 {
			st.IP = st.IPs[0]
		}
		out = append(out, st)
	}
	return out
}

func guestNICName(os string, i int) string {
	if os == "windows" {
		if i == 0 {
			return "Ethernet"
		}
		return fmt.Sprintf("Ethernet %d", i+1)
	}
	return fmt.Sprintf("enp%ds0", i+1)
}

func machineType(spec *virtv1.VirtualMachineInstanceSpec) string {
	if spec.Domain.Machine != nil && spec.Domain.Machine.Type != "" && spec.Domain.Machine.Type != "q35" {
		return spec.Domain.Machine.Type
	}
	return defaultMachineType
}

func cpuTopology(spec *virtv1.VirtualMachineInstanceSpec) *virtv1.CPUTopology {
	t := &virtv1.CPUTopology{Sockets: 1, Cores: 1, Threads: 1}
	if cpu := spec.Domain.CPU; cpu != nil {
		if cpu.Sockets > 0 {
			t.Sockets = cpu.Sockets
		}
		if cpu.Cores > 0 {
			t.Cores = cpu.Cores
		}
		if cpu.Threads > 0 {
			t.Threads = cpu.Threads
		}
	}
	return t
}

func guestMemory(spec *virtv1.VirtualMachineInstanceSpec) *resource.Quantity {
	if m := spec.Domain.Memory; m != nil && m.Guest != nil {
		return m.Guest
	}
	if q, ok := spec.Domain.Resources.Requests[corev1.ResourceMemory]; ok {
		return &q
	}
	if q, ok := spec.Domain.Resources.Limits[corev1.ResourceMemory]; ok {
		return &q
	}
	return nil
}

// volumeStatus names the guest device of every disk the way libvirt does
// (vdX for virtio, sdX for SATA/SCSI/USB, in disk order per prefix).
func volumeStatus(spec *virtv1.VirtualMachineInstanceSpec) []virtv1.VolumeStatus {
	vols := map[string]virtv1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	counters := map[string]int{}
	var out []virtv1.VolumeStatus
	for _, d := range spec.Domain.Devices.Disks {
		prefix := "vd"
		bus := virtv1.DiskBusVirtio
		switch {
		case d.Disk != nil && d.Disk.Bus != "":
			bus = d.Disk.Bus
		case d.CDRom != nil:
			bus = d.CDRom.Bus
			if bus == "" {
				bus = virtv1.DiskBusSATA
			}
		case d.LUN != nil:
			bus = d.LUN.Bus
			if bus == "" {
				bus = virtv1.DiskBusSCSI
			}
		}
		if bus != virtv1.DiskBusVirtio {
			prefix = "sd"
		}
		n := counters[prefix]
		counters[prefix]++
		st := virtv1.VolumeStatus{Name: d.Name, Target: prefix + string(rune('a'+n%26))}
		if v, ok := vols[d.Name]; ok {
			switch {
			case v.PersistentVolumeClaim != nil:
				st.PersistentVolumeClaimInfo = &virtv1.PersistentVolumeClaimInfo{ClaimName: v.PersistentVolumeClaim.ClaimName}
			case v.DataVolume != nil:
				st.PersistentVolumeClaimInfo = &virtv1.PersistentVolumeClaimInfo{ClaimName: v.DataVolume.Name}
			}
		}
		out = append(out, st)
	}
	return out
}

// claimInfo is virt-controller's processPVCInfo for the volume status
// entries of claims: what the claim asks for (access and volume modes,
// requests) and has, and CDI's filesystem overhead, which virt-handler
// reads to tell whether the guest can live-migrate (ReadWriteMany) and
// how large its disk image may grow. A claim not in the cache gets no
// information, as in KubeVirt.
func (c *Controller) claimInfo(vmi *virtv1.VirtualMachineInstance) {
	for i := range vmi.Status.VolumeStatus {
		info := vmi.Status.VolumeStatus[i].PersistentVolumeClaimInfo
		if info == nil {
			continue
		}
		pvc := getCached[*corev1.PersistentVolumeClaim](c.ext.pvcInformer, vmi.Namespace, info.ClaimName)
		if pvc == nil {
			vmi.Status.VolumeStatus[i].PersistentVolumeClaimInfo = nil
			continue
		}
		overhead := virtv1.Percent(cdiFilesystemOverhead)
		if pvc.Spec.VolumeMode != nil && *pvc.Spec.VolumeMode == corev1.PersistentVolumeBlock {
			overhead = "0"
		}
		vmi.Status.VolumeStatus[i].PersistentVolumeClaimInfo = &virtv1.PersistentVolumeClaimInfo{
			ClaimName:          pvc.Name,
			AccessModes:        pvc.Spec.AccessModes,
			VolumeMode:         pvc.Spec.VolumeMode,
			Capacity:           pvc.Status.Capacity,
			Requests:           pvc.Spec.Resources.Requests,
			FilesystemOverhead: &overhead,
		}
	}
}

// notMigratable mirrors the interface check of KubeVirt's LiveMigratable
// condition: bridge binding on the pod network prevents live migration.
func notMigratable(spec *virtv1.VirtualMachineInstanceSpec) (string, string) {
	pod := map[string]bool{}
	for _, n := range spec.Networks {
		if n.Pod != nil {
			pod[n.Name] = true
		}
	}
	for _, iface := range spec.Domain.Devices.Interfaces {
		if pod[iface.Name] && iface.Bridge != nil {
			return virtv1.VirtualMachineInstanceReasonInterfaceNotMigratable, messageBridgeNotMigrtable
		}
	}
	return "", ""
}

// pickNode chooses a node for the VMI like a very small scheduler: the node
// must be Ready (or not report readiness at all), schedulable, tolerated and
// match the VMI's nodeSelector and required node affinity. Among those, the
// highest preferred-affinity score wins, then the node running the fewest
// VMIs, then the name. When none fits it returns
// "" and a scheduler-style explanation.
func (c *Controller) pickNode(vmi *virtv1.VirtualMachineInstance) (string, string) {
	return c.chooseNode(vmi, true)
}

// chooseNode is pickNode; assume records the placement for the load count
// of the next choices (a migration's target is recorded once it is used).
func (c *Controller) chooseNode(vmi *virtv1.VirtualMachineInstance, assume bool) (string, string) {
	var nodes []*corev1.Node
	for _, obj := range c.nodeInformer.GetStore().List() {
		if n, ok := obj.(*corev1.Node); ok {
			nodes = append(nodes, n)
		}
	}
	if len(nodes) == 0 {
		return "", "0/0 nodes are available: no nodes available to schedule pods."
	}
	// Count the VMIs per node; placements this controller made that the
	// cache has not caught up with yet count too (like the scheduler's
	// assume cache), so VMIs started together spread out.
	c.mu.Lock()
	defer c.mu.Unlock()
	placed := map[types.UID]string{}
	for uid, node := range c.assumed {
		placed[uid] = node
	}
	for _, obj := range c.vmiInformer.GetStore().List() {
		other, ok := obj.(*virtv1.VirtualMachineInstance)
		if !ok {
			continue
		}
		if other.IsFinal() {
			delete(placed, other.UID)
			continue
		}
		if other.Status.NodeName != "" {
			placed[other.UID] = other.Status.NodeName
		}
	}
	delete(placed, vmi.UID)
	load := map[string]int{}
	for _, node := range placed {
		load[node]++
	}
	var fits []string
	var notReady, cordoned, tainted, mismatch int
	for _, n := range nodes {
		switch {
		case !nodeReady(n):
			notReady++
		case n.Spec.Unschedulable:
			cordoned++
		case !tolerated(n.Spec.Taints, vmi.Spec.Tolerations):
			tainted++
		case !matchesNode(n, vmi):
			mismatch++
		default:
			fits = append(fits, n.Name)
		}
	}
	if len(fits) == 0 {
		var why []string
		if mismatch > 0 {
			why = append(why, fmt.Sprintf("%d node(s) didn't match Pod's node affinity/selector", mismatch))
		}
		if notReady > 0 {
			why = append(why, fmt.Sprintf("%d node(s) had untolerated taint {node.kubernetes.io/not-ready: }", notReady))
		}
		if tainted > 0 {
			why = append(why, fmt.Sprintf("%d node(s) had untolerated taint(s)", tainted))
		}
		if cordoned > 0 {
			why = append(why, fmt.Sprintf("%d node(s) were unschedulable", cordoned))
		}
		sort.Strings(why)
		return "", fmt.Sprintf("0/%d nodes are available: %s. preemption: 0/%d nodes are available: %d Preemption is not helpful for scheduling.",
			len(nodes), strings.Join(why, ", "), len(nodes), len(nodes))
	}
	score := map[string]int32{}
	for _, name := range fits {
		score[name] = preferenceScore(nodeByName(nodes, name), vmi)
	}
	sort.Slice(fits, func(i, j int) bool {
		a, b := fits[i], fits[j]
		switch {
		case score[a] != score[b]:
			return score[a] > score[b]
		case load[a] != load[b]:
			return load[a] < load[b]
		}
		return a < b
	})
	if assume {
		c.assumed[vmi.UID] = fits[0]
	}
	return fits[0], ""
}

func (c *Controller) unassume(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.assumed, uid)
}

// nodeReady treats a node without a Ready condition as ready: in a test
// cluster without kubelets nobody posts node status, and without a node
// lifecycle controller such nodes are not tainted either.
func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return true
}

func tolerated(taints []corev1.Taint, tolerations []corev1.Toleration) bool {
	for _, t := range taints {
		if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		ok := false
		for i := range tolerations {
			if tolerations[i].ToleratesTaint(klog.Background(), &t, true) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

func matchesNode(n *corev1.Node, vmi *virtv1.VirtualMachineInstance) bool {
	if !machineTypeFits(n, vmi) {
		return false
	}
	if len(vmi.Spec.NodeSelector) > 0 &&
		!labels.SelectorFromSet(vmi.Spec.NodeSelector).Matches(labels.Set(n.Labels)) {
		return false
	}
	aff := vmi.Spec.Affinity
	if aff == nil || aff.NodeAffinity == nil || aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	terms := aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	for _, term := range terms {
		if termMatches(n, term) {
			return true
		}
	}
	return len(terms) == 0
}

// machineTypeFits tells whether node n offers vmi's machine type. Real
// virt-controller gives the launcher pod a nodeSelector on
// machine-type.node.kubevirt.io/<type> (the VMI's status machine once
// known, else its spec's; services/template.go), and virt-handler's node
// labeller sets that label for each machine type the node's QEMU offers,
// so a pinned type no node has (pc-q35-8.1) never schedules. A node that
// carries no such label at all (made by hand in a test) is not judged.
func machineTypeFits(n *corev1.Node, vmi *virtv1.VirtualMachineInstance) bool {
	typ := ""
	switch {
	case vmi.Status.Machine != nil && vmi.Status.Machine.Type != "":
		typ = vmi.Status.Machine.Type
	case vmi.Spec.Domain.Machine != nil:
		typ = vmi.Spec.Domain.Machine.Type
	}
	if typ == "" || n.Labels[virtv1.SupportedMachineTypeLabel+typ] == "true" {
		return true
	}
	for k := range n.Labels {
		if strings.HasPrefix(k, virtv1.SupportedMachineTypeLabel) {
			return false
		}
	}
	return true
}

// preferenceScore sums the weights of the VMI's preferred node affinity
// terms that node matches.
func preferenceScore(n *corev1.Node, vmi *virtv1.VirtualMachineInstance) int32 {
	aff := vmi.Spec.Affinity
	if n == nil || aff == nil || aff.NodeAffinity == nil {
		return 0
	}
	var score int32
	for _, p := range aff.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
		if termMatches(n, p.Preference) {
			score += p.Weight
		}
	}
	return score
}

func nodeByName(nodes []*corev1.Node, name string) *corev1.Node {
	for _, n := range nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

func termMatches(n *corev1.Node, term corev1.NodeSelectorTerm) bool {
	if len(term.MatchExpressions) == 0 && len(term.MatchFields) == 0 {
		return false
	}
	for _, e := range term.MatchExpressions {
		if !requirementMatches(e, labels.Set(n.Labels)) {
			return false
		}
	}
	for _, e := range term.MatchFields {
		if e.Key != "metadata.name" || !requirementMatches(e, labels.Set{"metadata.name": n.Name}) {
			return false
		}
	}
	return true
}

func requirementMatches(e corev1.NodeSelectorRequirement, set labels.Set) bool {
	var op selection.Operator
	switch e.Operator {
	case corev1.NodeSelectorOpIn:
		op = selection.In
	case corev1.NodeSelectorOpNotIn:
		op = selection.NotIn
	case corev1.NodeSelectorOpExists:
		op = selection.Exists
	case corev1.NodeSelectorOpDoesNotExist:
		op = selection.DoesNotExist
	case corev1.NodeSelectorOpGt:
		op = selection.GreaterThan
	case corev1.NodeSelectorOpLt:
		op = selection.LessThan
	default:
		return false
	}
	r, err := labels.NewRequirement(e.Key, op, e.Values)
	if err != nil {
		return false
	}
	return r.Matches(set)
}

func (c *Controller) forget(uid types.UID) {
	c.seen.forget(uid)
	c.stopping.forget(uid)
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.assumed, uid)
}

func podUID(vmi *virtv1.VirtualMachineInstance) types.UID {
	return types.UID(uuid.NewSHA1(uuid.NameSpaceOID, []byte("virt-launcher/"+string(vmi.UID))).String())
}

func hashBytes(parts ...string) []byte {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return h.Sum(nil)
}

func ptr[T any](v T) *T { return &v }

// Reasons of the VMI controller's Synchronized=False condition
// (pkg/controller).
const (
	reasonFailedPvcNotFound = "FailedPvcNotFound"
	reasonFailedCreate      = "FailedCreate"
)

// renderError is why virt-controller cannot create a Pending VMI's
// virt-launcher pod yet (pkg/virt-controller/watch/vmi/lifecycle.go): a
// claim that does not exist (handleSyncDataVolumes, FailedPvcNotFound),
// or a Multus network without its NetworkAttachmentDefinition
// (RenderLaunchManifest, pkg/network/multus/nad.go). "" when it can.
func (c *Controller) renderError(vmi *virtv1.VirtualMachineInstance) (reason, msg string) {
	if c.ext.pvcInformer != nil {
		for _, v := range vmi.Spec.Volumes {
			if v.PersistentVolumeClaim == nil {
				continue
			}
			claim := v.PersistentVolumeClaim.ClaimName
			if getCached[*corev1.PersistentVolumeClaim](c.ext.pvcInformer, vmi.Namespace, claim) == nil {
				return reasonFailedPvcNotFound, fmt.Sprintf("PVC %s/%s does not exist, waiting for it to appear", vmi.Namespace, claim)
			}
		}
	}
	for _, n := range vmi.Spec.Networks {
		if n.Multus == nil {
			continue
		}
		ns, name := vmi.Namespace, n.Multus.NetworkName
		if before, after, ok := strings.Cut(name, "/"); ok {
			ns, name = before, after
		}
		if c.opts.NetworkAttachmentDefinition != nil && !c.opts.NetworkAttachmentDefinition(ns, name) {
			return reasonFailedCreate, fmt.Sprintf("failed to render launch manifest: failed to locate network attachment definition %s/%s", ns, name)
		}
	}
	return "", ""
}

// syncFailure is the VMI controller's CheckFailure: Synchronized=False
// with the sync error's reason and message.
func syncFailure(vmi *virtv1.VirtualMachineInstance, reason, msg string, now time.Time) {
	if cur := findVMICondition(vmi, virtv1.VirtualMachineInstanceSynchronized); cur != nil && cur.Status == corev1.ConditionFalse && cur.Reason == reason {
		return
	}
	setVMICondition(vmi, virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceSynchronized,
		Status: corev1.ConditionFalse, Reason: reason, Message: msg, LastTransitionTime: metav1.NewTime(now)})
}
