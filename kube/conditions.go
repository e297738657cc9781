package kube

import (
	"strings"

	kubevirtv1 "kubevirt.io/api/core/v1"
)

// The VM and instance caches keep conditions twice: whole (with their
// times) packed with the spec, for the config views and Guest.VM/VMI, and
// as the hot readers read them (type, status, reason, message: the task
// worker, states, the agent and migration checks; nothing reads a
// condition's times off Guest.Meta/InstanceMeta). Without their times the
// conditions of most VMs are alike (Ready, LiveMigratable,
// AgentConnected…), so equal lists are one list, as intern.go does with
// maps. A condition costs 112 bytes; a running VM has three, its instance
// four or more.

var internedConditions = struct {
	vm  map[string][]kubevirtv1.VirtualMachineCondition
	vmi map[string][]kubevirtv1.VirtualMachineInstanceCondition
}{vm: map[string][]kubevirtv1.VirtualMachineCondition{}, vmi: map[string][]kubevirtv1.VirtualMachineInstanceCondition{}}

// conditionKey writes one condition's type, status, reason and message.
func conditionKey(b *strings.Builder, typ, status, reason, msg string) {
	for _, s := range [...]string{typ, status, reason, msg} {
		b.WriteString(s)
		b.WriteByte(0)
	}
}

// timelessVMConditions is cs without times (a list shared with the
// cached VMs whose conditions are the same), nil for none.
func timelessVMConditions(cs []kubevirtv1.VirtualMachineCondition) []kubevirtv1.VirtualMachineCondition {
	if len(cs) == 0 {
		return nil
	}
	var b strings.Builder
	out := make([]kubevirtv1.VirtualMachineCondition, len(cs))
	for i, c := range cs {
		conditionKey(&b, string(c.Type), string(c.Status), c.Reason, c.Message)
		out[i] = kubevirtv1.VirtualMachineCondition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message}
	}
	return internAs(internedConditions.vm, b.String(), out)
}

// timelessVMIConditions is timelessVMConditions for an instance.
func timelessVMIConditions(cs []kubevirtv1.VirtualMachineInstanceCondition) []kubevirtv1.VirtualMachineInstanceCondition {
	if len(cs) == 0 {
		return nil
	}
	var b strings.Builder
	out := make([]kubevirtv1.VirtualMachineInstanceCondition, len(cs))
	for i, c := range cs {
		conditionKey(&b, string(c.Type), string(c.Status), c.Reason, c.Message)
		out[i] = kubevirtv1.VirtualMachineInstanceCondition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message}
	}
	return internAs(internedConditions.vmi, b.String(), out)
}
