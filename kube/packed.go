package kube

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/s2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// The VM and instance caches keep each object's metadata and hot status
// as typed fields, which the hot paths read (lists, status/current, the
// task worker: names, versions, labels, annotations, states), and its spec
// and whole status compressed. A spec in Go structs costs some 4.5 KB per
// VM (a template with its devices, DataVolume templates), as JSON under
// 1 KB, and with its status and stored config compressed against its
// siblings' some 150 bytes: VMs made alike differ in their names, MACs and
// UUIDs only. Config views, writes and clones decode it on demand
// (Guest.VM, Guest.VMI), once per Guest value.

// specCodec compresses the specs of one kind of object with S2 (fast to
// decode, stateless, safe for concurrent use) against a dictionary made of
// seed (a typical object, when set) and the first dictObjects specs it
// packs, as the fleet it caches is alike. One spec is not enough: the
// first VMs listed may be odd ones (the lab's own, VMs made outside the
// API), and a fleet packed against one of those takes 1.1 KB a VM
// instead of 140 bytes. The specs packed before the dictionary is made
// are packed without one; a blob's first byte says which.
//
// Decoding needs the dictionary's bytes only; encoding also a 32 KB hash
// table of them, which S2 keeps in the Dict for good once it encoded. The
// codec decodes with a Dict that never encodes and encodes with copies
// from a sync.Pool, which the garbage collector empties when nothing has
// been packed for two cycles: after the initial list, between bursts of
// watch events, the three codecs' tables were 96 KB, a sixth of the
// cache's fixed cost at 1,000 VMs (bench CacheMemory).
type specCodec struct {
	seed  func() []byte
	mu    sync.Mutex
	learn [][]byte // the specs the dictionary will be made of
	dict  atomic.Pointer[s2.Dict]
	// encoders are Dicts of dict's bytes with their encoding tables.
	encoders sync.Pool
	// scratch holds encoder output (S2 wants room for the worst case);
	// what is kept is copied to its exact size.
	scratch sync.Pool
}

const (
	// dictObjects is how many specs the dictionary is made of.
	dictObjects = 8
	// Blob kinds, their first byte.
	packedPlain = 0
	packedDict  = 1
)

// dictFor returns the dictionary, made once dictObjects specs (raw among
// them) were seen, or nil before.
func (c *specCodec) dictFor(raw []byte) *s2.Dict {
	if d := c.dict.Load(); d != nil {
		return d
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := c.dict.Load(); d != nil {
		return d
	}
	if c.learn = append(c.learn, raw); len(c.learn) < dictObjects {
		return nil
	}
	var b []byte
	if c.seed != nil {
		b = c.seed()
	}
	// The specs seen last win where the dictionary repeats itself (and
	// MakeDict keeps the last 64 KB).
	for _, r := range c.learn {
		b = append(b, r...)
	}
	c.learn = nil
	if len(b) < s2.MinDictSize {
		return nil
	}
	d := s2.MakeDict(b, nil)
	c.dict.Store(d)
	return d
}

// encoder returns a Dict of d's bytes for encoding (see specCodec), or
// nil when there is no dictionary yet.
func (c *specCodec) encoder(d *s2.Dict) *s2.Dict {
	if d == nil {
		return nil
	}
	if e, _ := c.encoders.Get().(*s2.Dict); e != nil {
		return e
	}
	return s2.NewDict(d.Bytes())
}

// vmCodec is the VM cache's codec, seeded with a VM as the API makes one
// (typicalVM).
func vmCodec() *specCodec { return &specCodec{seed: typicalVM} }

// typicalVM is the packed JSON (packVM's cold part) of a VM made through
// the API with a disk, a NIC and cloud-init: KubeVirt's and the plugin's
// field names and the values most VMs share.
func typicalVM() []byte {
	vm, errs := translate.BuildVM(translate.VMRequest{
		VMID: 100, Node: "pve", Namespace: "default",
		Config: map[string]string{
			"name": "vm-100", "cores": "2", "sockets": "1", "memory": "2048", "ostype": "l26",
			"scsihw": "virtio-scsi-single", "scsi0": "local-lvm:32,discard=on,iothread=1,ssd=1",
			"net0": "virtio,bridge=vmbr0,firewall=1", "ide2": "local-lvm:cloudinit", "ipconfig0": "ip=dhcp",
			"agent": "1", "onboot": "1", "boot": "order=scsi0;net0",
		},
		StorageExists: func(string) bool { return true },
		VolumeTaken:   func(string) (bool, error) { return false, nil },
	})
	if len(errs) > 0 {
		return nil
	}
	cold := kubevirtv1.VirtualMachine{Spec: vm.Spec}
	cold.Annotations = map[string]string{translate.AnnotationConfig: vm.Annotations[translate.AnnotationConfig]}
	raw, err := json.Marshal(&cold)
	if err != nil {
		return nil
	}
	return raw
}

// pack compresses v's JSON.
func (c *specCodec) pack(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	d := c.dictFor(raw)
	buf, _ := c.scratch.Get().(*[]byte)
	if buf == nil {
		buf = new([]byte)
	}
	kind, enc := byte(packedPlain), []byte(nil)
	if e := c.encoder(d); e != nil {
		kind, enc = packedDict, e.Encode(*buf, raw)
		c.encoders.Put(e)
	} else {
		enc = s2.Encode(*buf, raw)
	}
	out := append(append(make([]byte, 0, 1+len(enc)), kind), enc...)
	*buf = enc[:0]
	c.scratch.Put(buf)
	return out, nil
}

// unpack decodes what pack made into v.
func (c *specCodec) unpack(blob []byte, v any) error {
	if len(blob) == 0 {
		return errors.New("empty blob")
	}
	// The JSON is scratch: Unmarshal copies what it keeps.
	buf, _ := unpackScratch.Get().(*[]byte)
	if buf == nil {
		buf = new([]byte)
	}
	defer unpackScratch.Put(buf)
	var raw []byte
	var err error
	switch blob[0] {
	case packedDict:
		raw, err = c.dict.Load().Decode((*buf)[:cap(*buf)], blob[1:])
	case packedPlain:
		raw, err = s2.Decode((*buf)[:cap(*buf)], blob[1:])
	default:
		err = fmt.Errorf("blob kind %d", blob[0])
	}
	if err != nil {
		return err
	}
	*buf = raw[:0]
	return json.Unmarshal(raw, v)
}

// unpackScratch holds decoded JSON between unpacks.
var unpackScratch sync.Pool

// packedVM is what the VM cache holds: the VM's metadata, its labels
// and annotations as pairs (but the stored PVE config's value), its run
// strategy and hot status (hotVMStatus), and packed its spec, its whole
// status and the config. It keeps no VirtualMachine: the struct is 552
// bytes, and a Go map of one label 300 more; meta makes one when asked
// (Guest.Meta once per Guest).
type packedVM struct {
	recordMeta
	// Labels and Annotations are the VM's, as pairs.
	Labels, Annotations pairs
	running             *bool
	runStrategy         *kubevirtv1.VirtualMachineRunStrategy
	status              hotVMStatus
	spec                []byte
	codec               *specCodec
	// claims are translate.VolumeClaims of the whole VM (ClaimUsers asks
	// of every VM in a namespace).
	claims []string
	// summary is translate.SummarizeVM of the whole VM: rows read it
	// (Guest.Summary) instead of decoding the spec, which at 10,000 VMs
	// was a fifth of the plugin's CPU at start (bench/scale profiles).
	summary translate.VMSummary
}

// GetObjectKind is for client-go's interfaces; the cache never asks.
func (p *packedVM) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// GetLabels and GetAnnotations are the VM's (metav1.Object's, for
// whoever reads a cached VM as one), as new maps; the setters replace
// them (the cache never calls them on a stored record).
func (p *packedVM) GetLabels() map[string]string       { return p.Labels.toMap() }
func (p *packedVM) GetAnnotations() map[string]string  { return p.Annotations.toMap() }
func (p *packedVM) SetLabels(m map[string]string)      { p.Labels = pairsOf(m) }
func (p *packedVM) SetAnnotations(m map[string]string) { p.Annotations = pairsOf(m) }

// label and annotation are the VM's label or annotation k.
func (p *packedVM) label(k string) string      { v, _ := p.Labels.get(k); return v }
func (p *packedVM) annotation(k string) string { v, _ := p.Annotations.get(k); return v }

// DeepCopyObject keeps a packed VM packed (the cache never copies one;
// client-go's interfaces want the method). The pairs, conditions and spec
// stay shared: no one changes a cached object.
func (p *packedVM) DeepCopyObject() runtime.Object {
	cp := *p
	cp.recordMeta = p.recordMeta.deepCopy()
	cp.status.snapshotInProgress = copyPtr(p.status.snapshotInProgress)
	cp.status.restoreInProgress = copyPtr(p.status.restoreInProgress)
	cp.status.startFailure = p.status.startFailure.DeepCopy()
	return &cp
}

func copyPtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// hotVMStatus is what Guest.Meta shows of a VM's status: what states,
// locks and tasks read (printable status, created and ready, start and
// stop requests, start failures, snapshot and restore locks, the run
// strategy) and its conditions without times (timelessVMConditions).
// Nothing reads the rest (volume and snapshot bookkeeping, generations,
// references) off Meta: 112 bytes instead of 216.
type hotVMStatus struct {
	snapshotInProgress, restoreInProgress *string
	created, ready                        bool
	printable                             kubevirtv1.VirtualMachinePrintableStatus
	runStrategy                           kubevirtv1.VirtualMachineRunStrategy
	conditions                            []kubevirtv1.VirtualMachineCondition
	stateChanges                          []kubevirtv1.VirtualMachineStateChangeRequest
	startFailure                          *kubevirtv1.VirtualMachineStartFailure
}

func hotVMStatusOf(st *kubevirtv1.VirtualMachineStatus) hotVMStatus {
	return hotVMStatus{
		snapshotInProgress: st.SnapshotInProgress, restoreInProgress: st.RestoreInProgress,
		created: st.Created, ready: st.Ready, printable: st.PrintableStatus, runStrategy: st.RunStrategy,
		conditions: timelessVMConditions(st.Conditions), stateChanges: st.StateChangeRequests, startFailure: st.StartFailure,
	}
}

// vmStatus is h as a VM's status.
func (h *hotVMStatus) vmStatus() kubevirtv1.VirtualMachineStatus {
	return kubevirtv1.VirtualMachineStatus{
		SnapshotInProgress: h.snapshotInProgress, RestoreInProgress: h.restoreInProgress,
		Created: h.created, Ready: h.ready, PrintableStatus: h.printable, RunStrategy: h.runStrategy,
		Conditions: h.conditions, StateChangeRequests: h.stateChanges, StartFailure: h.startFailure,
	}
}

// meta is the VM's metadata and hot status, a new object (sharing the
// cache's slices: read it, never modify it), nil for a nil p.
func (p *packedVM) meta() *kubevirtv1.VirtualMachine {
	if p == nil {
		return nil
	}
	vm := &kubevirtv1.VirtualMachine{TypeMeta: vmTypeMeta, Status: p.status.vmStatus()}
	vm.ObjectMeta = p.recordMeta.objectMeta(p.Labels.toMap(), p.Annotations.toMap())
	vm.Spec = kubevirtv1.VirtualMachineSpec{Running: p.running, RunStrategy: p.runStrategy}
	return vm
}

// full decodes the whole VM. The result shares the status with the cache:
// read it, never modify it (as any cached object).
func (p *packedVM) full() *kubevirtv1.VirtualMachine {
	if p == nil {
		return nil
	}
	vm := p.meta()
	var cold kubevirtv1.VirtualMachine
	if err := p.codec.unpack(p.spec, &cold); err != nil {
		// Only memory corruption gets here: what pack encoded decodes.
		panic(fmt.Sprintf("kube: cached spec of VM %s/%s does not decode: %v", vm.Namespace, vm.Name, err))
	}
	vm.Spec = cold.Spec
	vm.Status = cold.Status
	if cfg, ok := cold.Annotations[translate.AnnotationConfig]; ok {
		vm.Annotations[translate.AnnotationConfig] = cfg
	}
	return vm
}

// packVM makes the packed form of a (stripped) VM.
func packVM(c *specCodec, vm *kubevirtv1.VirtualMachine) (*packedVM, error) {
	summary := translate.SummarizeVM(vm) // before the config is moved out
	cold := kubevirtv1.VirtualMachine{Spec: vm.Spec, Status: vm.Status}
	// The stored PVE config (hundreds of bytes, one per VM) is read by
	// config views only, all of which read the whole VM; the cached
	// metadata keeps the key (PVEName and the writes ask whether there is
	// one), its value packed. vm's annotations are the transform's own
	// (keepOwn made them).
	if cfg := vm.Annotations[translate.AnnotationConfig]; cfg != "" {
		cold.Annotations = map[string]string{translate.AnnotationConfig: cfg}
		vm.Annotations[translate.AnnotationConfig] = ""
	}
	blob, err := c.pack(&cold)
	if err != nil {
		return nil, err
	}
	p := &packedVM{
		recordMeta: recordMetaOf(&vm.ObjectMeta),
		Labels:     pairsOf(vm.Labels), Annotations: pairsOf(vm.Annotations),
		running: vm.Spec.Running, runStrategy: vm.Spec.RunStrategy, status: hotVMStatusOf(&vm.Status),
		spec: blob, codec: c, claims: translate.VolumeClaims(vm), summary: summary,
	}
	return p, nil
}

// packedVMI is what the instance cache holds: the instance's metadata and
// the status parts lists, states and tasks read (hotVMIStatus), and packed
// its spec and whole status (config views and the agent endpoints read the
// agent's reports, sizes and the phase history). It keeps no
// VirtualMachineInstance, nor its status struct: the one is 1.5 KB with
// its spec empty (the domain spec is inline), the other 500 bytes with
// most of its fields empty; meta makes one when asked.
type packedVMI struct {
	recordMeta
	// labels and annotations are the instance's (shared among equal
	// ones: intern.go).
	labels, annotations map[string]string
	status              hotVMIStatus
	spec                []byte
	codec               *specCodec
	// summary is translate.SummarizeInstance of the whole instance (as
	// packedVM's).
	summary translate.InstanceSummary
}

// hotVMIStatus is what Guest.InstanceMeta shows of an instance's status:
// its phase and node, its conditions without times (timelessVMIConditions)
// and its migration state. Nothing reads the rest off InstanceMeta.
type hotVMIStatus struct {
	phase      kubevirtv1.VirtualMachineInstancePhase
	nodeName   string
	conditions []kubevirtv1.VirtualMachineInstanceCondition
	migration  *kubevirtv1.VirtualMachineInstanceMigrationState
}

// GetObjectKind is for client-go's interfaces; the cache never asks.
func (p *packedVMI) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// GetLabels and GetAnnotations are the instance's (metav1.Object's),
// shared with the cache: read them, never modify them.
func (p *packedVMI) GetLabels() map[string]string       { return p.labels }
func (p *packedVMI) GetAnnotations() map[string]string  { return p.annotations }
func (p *packedVMI) SetLabels(m map[string]string)      { p.labels = m }
func (p *packedVMI) SetAnnotations(m map[string]string) { p.annotations = m }

// DeepCopyObject keeps a packed instance packed (its conditions stay
// shared: no one changes a cached object).
func (p *packedVMI) DeepCopyObject() runtime.Object {
	cp := *p
	cp.recordMeta = p.recordMeta.deepCopy()
	cp.labels, cp.annotations = maps.Clone(p.labels), maps.Clone(p.annotations)
	cp.status.migration = p.status.migration.DeepCopy()
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
	vmi.Status = cold.Status
	return &vmi
}

func packVMI(c *specCodec, vmi *kubevirtv1.VirtualMachineInstance) (*packedVMI, error) {
	st := &vmi.Status
	p := &packedVMI{recordMeta: recordMetaOf(&vmi.ObjectMeta), labels: vmi.Labels, annotations: vmi.Annotations, codec: c,
		summary: translate.SummarizeInstance(vmi), status: hotVMIStatus{
			phase: st.Phase, nodeName: st.NodeName, migration: st.MigrationState,
			conditions: timelessVMIConditions(st.Conditions),
		}}
	blob, err := c.pack(&kubevirtv1.VirtualMachineInstance{Spec: vmi.Spec, Status: vmi.Status})
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

// meta is the instance's metadata and status (a new object sharing the
// cache's maps and slices: read it, never modify it), nil for a nil p.
func (p *packedVMI) meta() *kubevirtv1.VirtualMachineInstance {
	if p == nil {
		return nil
	}
	return &kubevirtv1.VirtualMachineInstance{
		TypeMeta:   metav1.TypeMeta{APIVersion: kubevirtv1.GroupVersion.String(), Kind: "VirtualMachineInstance"},
		ObjectMeta: p.recordMeta.objectMeta(p.labels, p.annotations),
		Status: kubevirtv1.VirtualMachineInstanceStatus{
			Phase: p.status.phase, NodeName: p.status.nodeName, Conditions: p.status.conditions, MigrationState: p.status.migration,
		},
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
