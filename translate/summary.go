package translate

import (
	"time"

	kubevirtv1 "kubevirt.io/api/core/v1"
)

// VMSummary is what a VM's rows (/cluster/resources, the node's VM list,
// status/current) show of its spec and stored config. The cache works it
// out when it stores a VM version, so that building a row decodes
// nothing.
type VMSummary struct {
	// CPUs is sockets × cores (CPUTopology).
	CPUs int
	// MaxMem is the guest memory in bytes (MemoryBytes).
	MaxMem int64
	// MaxDisk is the size of the first DataVolume template with a known
	// size: PVE reports its boot disk's.
	MaxDisk int64
	// Tags are the stored config's tags.
	Tags string
	// Agent tells whether the config enables the guest agent
	// (AgentConfig, AgentEnabled).
	Agent bool
	// Lock is the lock recorded at create or clone while the volumes are
	// still provisioned (Provisioning), else "".
	Lock string
}

// SummarizeVM is vm's VMSummary.
func SummarizeVM(vm *kubevirtv1.VirtualMachine) VMSummary {
	sockets, cores := CPUTopology(vm)
	s := VMSummary{CPUs: sockets * cores, MaxMem: MemoryBytes(vm)}
	for _, dv := range vm.Spec.DataVolumeTemplates {
		if n := DataVolumeSize(dv); n > 0 {
			s.MaxDisk = n
			break
		}
	}
	if _, made := vm.Annotations[AnnotationConfig]; made {
		cfg := StoredConfig(vm)
		s.Tags, s.Agent = cfg["tags"], AgentEnabled(cfg["agent"])
	} else {
		s.Agent = AgentEnabled(AgentConfig(vm))
	}
	if l := vm.Annotations[AnnotationLock]; l != "" && Provisioning(vm) {
		s.Lock = l
	}
	return s
}

// InstanceSummary is what a VM's rows show of its instance beyond the
// metadata and phase.
type InstanceSummary struct {
	// Machine is RunningMachine.
	Machine string
	// Since is RunningSince, zero when the instance does not run.
	Since time.Time
}

// SummarizeInstance is vmi's InstanceSummary (the zero one for nil).
func SummarizeInstance(vmi *kubevirtv1.VirtualMachineInstance) InstanceSummary {
	if vmi == nil {
		return InstanceSummary{}
	}
	since, _ := RunningSince(vmi)
	return InstanceSummary{Machine: RunningMachine(vmi), Since: since}
}
