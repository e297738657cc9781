package kube

import (
	"encoding/json"
	"fmt"
	"sync"

	"github.com/klauspost/compress/s2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// The VM and instance caches keep each object's metadata and status as
// typed fields, which the hot paths read (lists, status/current, the task
// worker: names, versions, labels, annotations, states), and its spec
// compressed. A spec in Go structs costs some 4.5 KB per VM (a template
// with its devices, DataVolume templates), as JSON under 1 KB, and
// compressed against a sibling's spec some 70 bytes: VMs made alike differ
// in their names, MACs and UUIDs only. Config views, writes and clones
// decode it on demand (Guest.VM, Guest.VMI), once per Guest value.

// specCodec compresses the specs of one kind of object with S2 (fast to
// decode, stateless, safe for concurrent use) against a dictionary: the
// first spec it packs, as the fleet it caches is alike.
type specCodec struct {
	once sync.Once
	dict *s2.Dict
	// scratch holds encoder output (S2 wants room for the worst case);
	// what is kept is copied to its exact size.
	scratch sync.Pool
}

func (c *specCodec) init(first []byte) {
	c.once.Do(func() {
		if len(first) >= s2.MinDictSize {
			c.dict = s2.MakeDict(append([]byte(nil), first...), nil)
		}
	})
}

// pack compresses v's JSON.
func (c *specCodec) pack(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	c.init(raw)
	buf, _ := c.scratch.Get().(*[]byte)
	if buf == nil {
		buf = new([]byte)
	}
	var enc []byte
	if c.dict != nil {
		enc = c.dict.Encode(*buf, raw)
	} else {
		enc = s2.Encode(*buf, raw)
	}
	out := append(make([]byte, 0, len(enc)), enc...)
	*buf = enc[:0]
	c.scratch.Put(buf)
	return out, nil
}

// unpack decodes what pack made into v.
func (c *specCodec) unpack(blob []byte, v any) error {
	var raw []byte
	var err error
	if c.dict != nil {
		raw, err = c.dict.Decode(nil, blob)
	} else {
		raw, err = s2.Decode(nil, blob)
	}
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, v)
}

// packedVM is what the VM cache holds: the VM's metadata and status, its
// run strategy, and its spec packed.
type packedVM struct {
	// *VirtualMachine has the metadata and status; of its spec only
	// Running and RunStrategy.
	*kubevirtv1.VirtualMachine
	spec  []byte
	codec *specCodec
	// claims are translate.VolumeClaims of the whole VM (ClaimUsers asks
	// of every VM in a namespace).
	claims []string
}

// DeepCopyObject keeps a packed VM packed (the cache never copies one;
// client-go's interfaces want the method).
func (p *packedVM) DeepCopyObject() runtime.Object {
	cp := *p
	cp.VirtualMachine = p.VirtualMachine.DeepCopy()
	return &cp
}

// full decodes the whole VM. The result shares the metadata and status
// with the cache: read it, never modify it (as any cached object).
func (p *packedVM) full() *kubevirtv1.VirtualMachine {
	if p == nil {
		return nil
	}
	vm := *p.VirtualMachine
	vm.Spec = kubevirtv1.VirtualMachineSpec{}
	if err := p.codec.unpack(p.spec, &vm.Spec); err != nil {
		// Only memory corruption gets here: what pack encoded decodes.
		panic(fmt.Sprintf("kube: cached spec of VM %s/%s does not decode: %v", vm.Namespace, vm.Name, err))
	}
	return &vm
}

// packVM makes the packed form of a (stripped) VM.
func packVM(c *specCodec, vm *kubevirtv1.VirtualMachine) (*packedVM, error) {
	blob, err := c.pack(&vm.Spec)
	if err != nil {
		return nil, err
	}
	p := &packedVM{spec: blob, codec: c, claims: translate.VolumeClaims(vm)}
	slim := *vm
	slim.Spec = kubevirtv1.VirtualMachineSpec{Running: vm.Spec.Running, RunStrategy: vm.Spec.RunStrategy}
	p.VirtualMachine = &slim
	return p, nil
}

// packedVMI is what the instance cache holds: the instance's metadata and
// status, and packed its spec and the status parts only config views and
// the agent endpoints show (coldVMIStatus). It keeps no
// VirtualMachineInstance: that struct is 1.5 KB with its spec empty (the
// domain spec is inline); meta makes one when asked.
type packedVMI struct {
	metav1.ObjectMeta
	status kubevirtv1.VirtualMachineInstanceStatus // but coldVMIStatus
	spec   []byte
	codec  *specCodec
}

// GetObjectKind is for client-go's interfaces; the cache never asks.
func (p *packedVMI) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject keeps a packed instance packed.
func (p *packedVMI) DeepCopyObject() runtime.Object {
	cp := *p
	p.ObjectMeta.DeepCopyInto(&cp.ObjectMeta)
	p.status.DeepCopyInto(&cp.status)
	return &cp
}

// full decodes the whole instance; as packedVM.full.
func (p *packedVMI) full() *kubevirtv1.VirtualMachineInstance {
	if p == nil {
		return nil
	}
	vmi := *p.meta()
	var cold kubevirtv1.VirtualMachineInstance
	if err := p.codec.unpack(p.spec, &cold); err != nil {
		panic(fmt.Sprintf("kube: cached spec of instance %s/%s does not decode: %v", vmi.Namespace, vmi.Name, err))
	}
	vmi.Spec = cold.Spec
	coldVMIStatus(&vmi.Status, &cold.Status)
	return &vmi
}

// coldVMIStatus moves the status parts of from that no list, state or task
// reads (the guest agent's reports, sizes, the phase history for uptimes)
// to to, leaving them zero in from.
func coldVMIStatus(to, from *kubevirtv1.VirtualMachineInstanceStatus) {
	to.Interfaces, from.Interfaces = from.Interfaces, nil
	to.GuestOSInfo, from.GuestOSInfo = from.GuestOSInfo, kubevirtv1.VirtualMachineInstanceGuestOSInfo{}
	to.Memory, from.Memory = from.Memory, nil
	to.CurrentCPUTopology, from.CurrentCPUTopology = from.CurrentCPUTopology, nil
	to.Machine, from.Machine = from.Machine, nil
	to.PhaseTransitionTimestamps, from.PhaseTransitionTimestamps = from.PhaseTransitionTimestamps, nil
}

func packVMI(c *specCodec, vmi *kubevirtv1.VirtualMachineInstance) (*packedVMI, error) {
	p := &packedVMI{ObjectMeta: vmi.ObjectMeta, status: vmi.Status, codec: c}
	cold := kubevirtv1.VirtualMachineInstance{Spec: vmi.Spec}
	coldVMIStatus(&cold.Status, &p.status)
	blob, err := c.pack(&cold)
	if err != nil {
		return nil, err
	}
	p.spec = blob
	return p, nil
}

// packingVMs is the VM cache's transform: stripVM, then packed.
func packingVMs(c *specCodec) func(any) (any, error) {
	return func(obj any) (any, error) {
		if p, ok := obj.(*packedVM); ok {
			return p, nil
		}
		o, err := stripVM(obj)
		if err != nil {
			return nil, err
		}
		vm, ok := o.(*kubevirtv1.VirtualMachine)
		if !ok {
			return o, nil
		}
		return packVM(c, vm)
	}
}

// packingVMIs is the instance cache's transform: stripVMI, then packed.
func packingVMIs(c *specCodec) func(any) (any, error) {
	return func(obj any) (any, error) {
		if p, ok := obj.(*packedVMI); ok {
			return p, nil
		}
		o, err := stripVMI(obj)
		if err != nil {
			return nil, err
		}
		vmi, ok := o.(*kubevirtv1.VirtualMachineInstance)
		if !ok {
			return o, nil
		}
		return packVMI(c, vmi)
	}
}

// meta is the VM's metadata and status, nil for a nil p.
func (p *packedVM) meta() *kubevirtv1.VirtualMachine {
	if p == nil {
		return nil
	}
	return p.VirtualMachine
}

// meta is the instance's metadata and status (a new object sharing the
// cache's maps and slices: read it, never modify it), nil for a nil p.
func (p *packedVMI) meta() *kubevirtv1.VirtualMachineInstance {
	if p == nil {
		return nil
	}
	return &kubevirtv1.VirtualMachineInstance{
		TypeMeta:   metav1.TypeMeta{APIVersion: kubevirtv1.GroupVersion.String(), Kind: "VirtualMachineInstance"},
		ObjectMeta: p.ObjectMeta, Status: p.status,
	}
}

// cachedVM is the packed VM ns/name of the cache, or nil.
func (c *Cluster) cachedVM(ns, name string) *packedVM {
	p, _ := c.vms.get(ns, name).(*packedVM)
	return p
}

// cachedVMI is the packed instance ns/name of the cache, or nil.
func (c *Cluster) cachedVMI(ns, name string) *packedVMI {
	p, _ := c.vmis.get(ns, name).(*packedVMI)
	return p
}
