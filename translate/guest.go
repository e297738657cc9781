package translate

import (
	"encoding/json"
	"hash/fnv"
	"time"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// StoredConfig returns the PVE config keys kept on the VM for round trips
// (keys with no KubeVirt field, and values as the client wrote them).
func StoredConfig(vm *kubevirtv1.VirtualMachine) map[string]string {
	out := map[string]string{}
	if raw := vm.Annotations[AnnotationConfig]; raw != "" {
		_ = json.Unmarshal([]byte(raw), &out)
	}
	return out
}

// EncodeConfig is the annotation value for StoredConfig.
func EncodeConfig(cfg map[string]string) string {
	buf, _ := json.Marshal(cfg)
	return string(buf)
}

// CPUTopology returns sockets and cores of the VM's template (threads are
// folded into cores, as PVE has no threads key).
func CPUTopology(vm *kubevirtv1.VirtualMachine) (sockets, cores int) {
	sockets, cores = 1, 1
	if vm.Spec.Template == nil {
		return
	}
	d := &vm.Spec.Template.Spec.Domain // a pointer: DomainSpec is large
	if d.CPU != nil {
		if d.CPU.Sockets > 0 {
			sockets = int(d.CPU.Sockets)
		}
		if d.CPU.Cores > 0 {
			cores = int(d.CPU.Cores)
		}
		if d.CPU.Threads > 1 {
			cores *= int(d.CPU.Threads)
		}
		return
	}
	if q, ok := d.Resources.Requests[corev1.ResourceCPU]; ok {
		if n := int(q.Value()); n > 0 {
			cores = n
		}
	}
	return
}

// MemoryBytes is the guest memory of the VM's template in bytes.
func MemoryBytes(vm *kubevirtv1.VirtualMachine) int64 {
	if vm.Spec.Template == nil {
		return 0
	}
	d := &vm.Spec.Template.Spec.Domain // a pointer: DomainSpec is large
	if d.Memory != nil && d.Memory.Guest != nil {
		return d.Memory.Guest.Value()
	}
	if q, ok := d.Resources.Requests[corev1.ResourceMemory]; ok {
		return q.Value()
	}
	if q, ok := d.Resources.Limits[corev1.ResourceMemory]; ok {
		return q.Value()
	}
	return 0
}

// Uptime is how long the instance has been running, in seconds.
func Uptime(vmi *kubevirtv1.VirtualMachineInstance, now time.Time) int64 {
	since, ok := RunningSince(vmi)
	if !ok {
		return 0
	}
	return UptimeSince(since, now)
}

// RunningSince is when the instance entered phase Running; ok is false
// when it does not run (uptime 0).
func RunningSince(vmi *kubevirtv1.VirtualMachineInstance) (since time.Time, ok bool) {
	if vmi == nil || vmi.Status.Phase != kubevirtv1.Running {
		return time.Time{}, false
	}
	for _, t := range vmi.Status.PhaseTransitionTimestamps {
		if t.Phase == kubevirtv1.Running {
			return t.PhaseTransitionTimestamp.Time, true
		}
	}
	return time.Time{}, false
}

// UptimeSince is the whole seconds from since to now, 0 if since is later.
func UptimeSince(since, now time.Time) int64 {
	if d := now.Sub(since); d > 0 {
		return int64(d / time.Second)
	}
	return 0
}

// PID is a stable stand-in for the QEMU process id PVE reports while a VM
// runs, derived from the instance's UID.
func PID(vmi *kubevirtv1.VirtualMachineInstance) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(vmi.UID))
	return 1000 + int(h.Sum32()%4000000)
}

// AgentConfig is the VM's agent setting as its PVE config shows it: the
// stored one for a VM made through this API (PVE's, where agent is what
// the user set); "1" for a VM made outside it, whose instances do have
// the guest agent's channel: KubeVirt adds org.qemu.guest_agent.0 to
// every domain.
func AgentConfig(vm *kubevirtv1.VirtualMachine) string {
	if _, made := vm.Annotations[AnnotationConfig]; !made {
		return "1"
	}
	return StoredConfig(vm)["agent"]
}

// AgentEnabled tells whether the PVE config enables the guest agent
// ("1" or "1,..." or "enabled=1,...").
func AgentEnabled(agent string) bool {
	if agent == "" {
		return false
	}
	first := agent
	for i := 0; i < len(agent); i++ {
		if agent[i] == ',' {
			first = agent[:i]
			break
		}
	}
	switch first {
	case "1", "enabled=1", "yes", "on", "true":
		return true
	}
	return false
}
