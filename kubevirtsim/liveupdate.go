package kubevirtsim

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
)

// KubeVirt's LiveUpdate VM rollout strategy, its default (which the lab
// and the test cluster keep): a change of CPU sockets or guest memory in
// a running VM's template is no restart's business. KubeVirt v1.8.0:
//
//   - the VMI mutator gives every instance room to grow
//     (pkg/defaults setupHotplug): maxSockets and maxGuest four times
//     what it starts with (maxHotplugRatio), maxGuest only where memory
//     can be hot-plugged at all (liveupdate/memory
//     ValidateLiveUpdateMemory);
//   - the VM controller leaves sockets, guest memory, node selector,
//     affinity and tolerations out of RestartRequired (vm.go
//     syncRestartRequired) and, when no restart is required, patches the
//     new sockets (handleCPUChangeRequest, VMICPUsPatch) and guest memory
//     (handleMemoryHotplugRequest) into the instance's spec, or sets
//     RestartRequired with its reason where it cannot;
//   - the VMI controller marks the instance HotVCPUChange /
//     HotMemoryChange while spec and status differ (lifecycle.go
//     requireCPUHotplug, requireMemoryHotplug);
//   - the guest gets them only on a live migration: the workload updater
//     starts one when the KubeVirt CR allows LiveMigrate (neither the lab
//     nor the test cluster does), and virt-handler on the target
//     hot-plugs them (migration-target.go hotplugCPU, hotplugMemory:
//     status.currentCPUTopology, status.memory). Until then the status
//     keeps what the guest booted with.

const (
	// maxHotplugRatio is KubeVirt's DefaultMaxHotplugRatio.
	maxHotplugRatio = 4
	// hotplugBlockAlignment and minHotplugGuest are liveupdate/memory's
	// HotplugBlockAlignmentBytes and requiredMinGuestMemory.
	hotplugBlockAlignment = 2 << 20
	minHotplugGuest       = 1 << 30
)

// setupHotplug is the VMI mutator's setupHotplug with KubeVirt's default
// live update configuration.
func setupHotplug(spec *virtv1.VirtualMachineInstanceSpec) {
	if cpu := spec.Domain.CPU; cpu != nil && cpu.MaxSockets == 0 {
		const maxVCPUs = 512
		sockets := max(cpu.Sockets, 1)
		cores, threads := max(cpu.Cores, 1), max(cpu.Threads, 1)
		cpu.MaxSockets = sockets * maxHotplugRatio
		if cpu.MaxSockets*cores*threads > maxVCPUs {
			cpu.MaxSockets = max(maxVCPUs/(cores*threads), sockets)
		}
	}
	if m := spec.Domain.Memory; m != nil && m.Guest != nil && m.MaxGuest == nil {
		maxGuest := resource.NewQuantity(m.Guest.Value()*maxHotplugRatio, resource.BinarySI)
		if liveUpdateMemoryError(spec, maxGuest) == "" {
			m.MaxGuest = maxGuest
		}
	}
}

// liveUpdateMemoryError is liveupdate/memory's ValidateLiveUpdateMemory
// ("" when memory can be hot-plugged).
func liveUpdateMemoryError(spec *virtv1.VirtualMachineInstanceSpec, maxGuest *resource.Quantity) string {
	d := &spec.Domain
	switch {
	case d.CPU != nil && d.CPU.Realtime != nil:
		return "Memory hotplug is not compatible with realtime VMs"
	case d.CPU != nil && d.CPU.NUMA != nil && d.CPU.NUMA.GuestMappingPassthrough != nil:
		return "Memory hotplug is not compatible with guest mapping passthrough"
	case d.LaunchSecurity != nil:
		return "Memory hotplug is not compatible with encrypted VMs"
	}
	align := int64(hotplugBlockAlignment)
	if d.Memory != nil && d.Memory.Hugepages != nil && d.Memory.Hugepages.PageSize == "1Gi" {
		align = 1 << 30
	}
	switch {
	case d.Memory == nil || d.Memory.Guest == nil:
		return "Guest memory must be configured when memory hotplug is enabled"
	case maxGuest == nil:
		return "Max guest memory must be configured when memory hotplug is enabled"
	case d.Memory.Guest.Cmp(*maxGuest) > 0:
		return "Guest memory is greater than the configured maxGuest memory"
	case d.Memory.Guest.Value()%align != 0:
		return fmt.Sprintf("Guest memory must be %s aligned", resource.NewQuantity(align, resource.BinarySI))
	case maxGuest.Value()%align != 0:
		return fmt.Sprintf("MaxGuest must be %s aligned", resource.NewQuantity(align, resource.BinarySI))
	case spec.Architecture != "" && spec.Architecture != "amd64":
		// The VM mutator sets amd64 where the template has none.
		return "Memory hotplug is only available for x86_64 VMs"
	case d.Memory.Guest.Value() < minHotplugGuest:
		return "Memory hotplug is only available for VMs with at least 1Gi of guest memory"
	}
	return ""
}

// withoutLiveUpdatable blanks in spec what syncRestartRequired leaves out
// under LiveUpdate.
func withoutLiveUpdatable(spec *virtv1.VirtualMachineInstanceSpec) {
	if spec.Domain.CPU != nil {
		spec.Domain.CPU.Sockets = 0
	}
	if spec.Domain.Memory != nil {
		spec.Domain.Memory.Guest = nil
	}
	spec.NodeSelector, spec.Affinity, spec.Tolerations = nil, nil, nil
}

// syncLiveUpdate is the VM controller's handleCPUChangeRequest and
// handleMemoryHotplugRequest for a running instance of a VM that needs no
// restart: it patches the instance, or records in s why a restart is
// needed after all.
func (c *Controller) syncLiveUpdate(ctx context.Context, s *vmSync) error {
	vm, vmi := s.vm, s.vmi
	if vmi == nil || vmi.DeletionTimestamp != nil || vmi.IsFinal() || vm.Spec.Template == nil || templateChanged(vm, vmi) {
		return nil
	}
	want := &vm.Spec.Template.Spec.Domain
	upd := vmi.DeepCopy()
	if msg, patch := cpuChange(want, upd); msg != "" {
		s.restartReason = msg
		return nil
	} else if patch {
		setVMICondition(upd, virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceVCPUChange, Status: corev1.ConditionTrue})
	}
	if msg, patch := memoryChange(want, upd); msg != "" {
		s.restartReason = msg
	} else if patch {
		setVMICondition(upd, virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceMemoryChange, Status: corev1.ConditionTrue})
	}
	if hasVMICondition(upd, virtv1.VirtualMachineInstanceVCPUChange, corev1.ConditionTrue) == hasVMICondition(vmi, virtv1.VirtualMachineInstanceVCPUChange, corev1.ConditionTrue) &&
		hasVMICondition(upd, virtv1.VirtualMachineInstanceMemoryChange, corev1.ConditionTrue) == hasVMICondition(vmi, virtv1.VirtualMachineInstanceMemoryChange, corev1.ConditionTrue) {
		return nil
	}
	res, err := c.kv.KubevirtV1().VirtualMachineInstances(upd.Namespace).Update(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	s.vmi = res
	return nil
}

// cpuChange is handleCPUChangeRequest on vmi (changed in place): a
// restart reason, or whether it patched the sockets.
func cpuChange(want *virtv1.DomainSpec, vmi *virtv1.VirtualMachineInstance) (restart string, patched bool) {
	have := vmi.Spec.Domain.CPU
	if want.CPU == nil || have == nil || want.CPU.Sockets == have.Sockets {
		return "", false
	}
	if hasVMICondition(vmi, virtv1.VirtualMachineInstanceVCPUChange, corev1.ConditionTrue) || migrating(vmi) {
		return "", false // KubeVirt retries once that is over
	}
	switch {
	case want.CPU.Sockets > have.MaxSockets:
		return "CPU sockets updated in template spec to a value higher than what's available", false
	case want.CPU.Sockets < have.Sockets:
		return "Reduction of CPU socket count requires a restart", false
	}
	have.Sockets = want.CPU.Sockets
	return "", true
}

// memoryChange is handleMemoryHotplugRequest on vmi (changed in place):
// a restart reason, or whether it patched the guest memory.
func memoryChange(want *virtv1.DomainSpec, vmi *virtv1.VirtualMachineInstance) (restart string, patched bool) {
	have := vmi.Spec.Domain.Memory
	st := vmi.Status.Memory
	if want.Memory == nil || want.Memory.Guest == nil || have == nil || have.Guest == nil || st == nil || st.GuestCurrent == nil {
		return "", false
	}
	if c := findVMICondition(vmi, virtv1.VirtualMachineInstanceMemoryChange); c != nil && c.Status == corev1.ConditionFalse {
		return "memory updated in template spec. Memory-hotplug failed and is not available for this VM configuration", false
	}
	if want.Memory.Guest.Equal(*have.Guest) {
		return "", false
	}
	if !hasVMICondition(vmi, virtv1.VirtualMachineInstanceIsMigratable, corev1.ConditionTrue) {
		return "memory updated in template spec. Memory-hotplug is only available for migratable VMs", false
	}
	if have.MaxGuest == nil {
		return "memory updated in template spec. Memory-hotplug is not available for this VM configuration", false
	}
	if hasVMICondition(vmi, virtv1.VirtualMachineInstanceMemoryChange, corev1.ConditionTrue) || migrating(vmi) {
		return "", false
	}
	spec := vmi.Spec.DeepCopy()
	spec.Domain.Memory.Guest = want.Memory.Guest
	if msg := liveUpdateMemoryError(spec, have.MaxGuest); msg != "" {
		return "memory hotplug not supported, " + msg, false
	}
	if st.GuestAtBoot != nil && want.Memory.Guest.Cmp(*st.GuestAtBoot) < 0 {
		return "memory updated in template spec to a value lower than what the VM started with", false
	}
	if want.Memory.Guest.Cmp(*have.MaxGuest) > 0 {
		return "memory updated in template spec to a value higher than what's available", false
	}
	delta := want.Memory.Guest.Value() - st.GuestCurrent.Value()
	res := &vmi.Spec.Domain.Resources
	if req := res.Requests.Memory(); !req.IsZero() {
		n := req.Value() + delta
		if n < want.Memory.Guest.Value() {
			delta -= want.Memory.Guest.Value() - n
			n = want.Memory.Guest.Value()
		}
		res.Requests[corev1.ResourceMemory] = *resource.NewQuantity(n, resource.BinarySI)
	}
	if lim := res.Limits.Memory(); !lim.IsZero() {
		res.Limits[corev1.ResourceMemory] = *resource.NewQuantity(lim.Value()+delta, resource.BinarySI)
	}
	g := want.Memory.Guest.DeepCopy()
	have.Guest = &g
	return "", true
}

// hotplugOnTarget is virt-handler's hotplugCPU and hotplugMemory on the
// target of a live migration: the guest now has what the instance's spec
// asks for.
func hotplugOnTarget(vmi *virtv1.VirtualMachineInstance) {
	if findVMICondition(vmi, virtv1.VirtualMachineInstanceVCPUChange) != nil {
		removeVMICondition(vmi, virtv1.VirtualMachineInstanceVCPUChange)
		if cpu := vmi.Spec.Domain.CPU; cpu != nil {
			vmi.Status.CurrentCPUTopology = &virtv1.CPUTopology{Sockets: cpu.Sockets, Cores: cpu.Cores, Threads: cpu.Threads}
		}
	}
	if findVMICondition(vmi, virtv1.VirtualMachineInstanceMemoryChange) != nil {
		removeVMICondition(vmi, virtv1.VirtualMachineInstanceMemoryChange)
		if m := vmi.Spec.Domain.Memory; m != nil && m.Guest != nil && vmi.Status.Memory != nil {
			g := m.Guest.DeepCopy()
			vmi.Status.Memory.GuestRequested = &g
			// virt-handler reads the domain's currentMemory next.
			cur := m.Guest.DeepCopy()
			vmi.Status.Memory.GuestCurrent = &cur
		}
	}
}
