package kube

import (
	"reflect"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/internal/fleet"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// TestPackedObjectsDecodeWhole: what the VM and instance caches keep
// decodes to exactly what the transforms keep of the object (the spec
// included: config views, writes and clones read it), while the cached
// metadata and status carry no spec but the run strategy.
func TestPackedObjectsDecodeWhole(t *testing.T) {
	// Some packed before the dictionary is made, some after.
	objs, err := fleet.Objects(fleet.Spec{Namespace: "default", N: 2*dictObjects + 1, FirstVMID: 1000, Nodes: []string{"kv-node-1.lab.internal"}})
	if err != nil {
		t.Fatal(err)
	}
	vmCodec, vmiCodec := vmCodec(), &specCodec{}
	for _, o := range objs {
		switch o := o.(type) {
		case *kubevirtv1.VirtualMachine:
			want := mustStrip(t, stripVM, o.DeepCopy()).(*kubevirtv1.VirtualMachine)
			p := mustStrip(t, packingVMs(vmCodec), o.DeepCopy()).(*packedVM)
			if got := p.full(); !equality.Semantic.DeepEqual(got, want) {
				t.Errorf("VM %s decodes to\n%+v\nwant\n%+v", o.Name, got.Spec, want.Spec)
			}
			if m := p.meta(); m.Spec.Template != nil || len(m.Spec.DataVolumeTemplates) != 0 || m.Spec.RunStrategy == nil ||
				m.Annotations[translate.AnnotationConfig] != "" || m.Status.PrintableStatus == "" || m.Labels[translate.LabelVMID] == "" ||
				m.UID != o.UID || m.ResourceVersion != o.ResourceVersion || m.Kind != o.Kind {
				t.Errorf("cached VM %s: %+v", o.Name, m)
			}
			if p.more != nil {
				t.Errorf("cached VM %s keeps rare metadata: %+v", o.Name, p.more)
			}
			if len(p.claims) != 1 || p.claims[0] != o.Spec.DataVolumeTemplates[0].Name {
				t.Errorf("cached VM %s claims %v", o.Name, p.claims)
			}
			if _, made := p.meta().Annotations[translate.AnnotationConfig]; !made || translate.StoredConfig(p.full())["name"] == "" {
				t.Errorf("cached VM %s: the config's key is gone, or its value does not decode", o.Name)
			}
			if got, want := p.summary, translate.SummarizeVM(want); got != want || got.CPUs == 0 || got.MaxMem == 0 || got.MaxDisk == 0 || !got.Agent {
				t.Errorf("cached VM %s summary %+v, want %+v of the whole VM", o.Name, got, want)
			}
			g := Guest{VMID: 1, vm: p, full: &guestFull{}}
			if g.Summary() != p.summary || g.InstanceSummary() != (translate.InstanceSummary{}) {
				t.Errorf("Guest %s: summaries %+v, %+v", o.Name, g.Summary(), g.InstanceSummary())
			}
			if g.Meta().Spec.Template != nil || g.VM().Spec.Template == nil || g.VM() != g.VM() || g.Meta() != g.Meta() || g.Packed().full == g.full {
				t.Error("Guest: Meta has a template, VM none, or VM or Meta are made anew, or Packed keeps the decoded VM")
			}
			if g.Name() != o.Name || g.Namespace() != o.Namespace || g.UID() != o.UID || g.ResourceVersion() != o.ResourceVersion ||
				g.PVEName() != o.Annotations[translate.AnnotationName] || g.Template() {
				t.Errorf("Guest %s: name %q/%q, uid %q, version %q, PVE name %q", o.Name, g.Namespace(), g.Name(), g.UID(), g.ResourceVersion(), g.PVEName())
			}
		case *kubevirtv1.VirtualMachineInstance:
			want := mustStrip(t, stripVMI, o.DeepCopy()).(*kubevirtv1.VirtualMachineInstance)
			p := mustStrip(t, packingVMIs(vmiCodec), o.DeepCopy()).(*packedVMI)
			if got := p.full(); !equality.Semantic.DeepEqual(got, want) {
				t.Errorf("instance %s decodes to\n%+v\nwant\n%+v", o.Name, got.Spec, want.Spec)
			}
			if got, want := p.summary, translate.SummarizeInstance(want); got != want || got.Machine == "" || got.Since.IsZero() {
				t.Errorf("cached instance %s summary %+v, want %+v of the whole instance", o.Name, got, want)
			}
			if m := p.meta(); len(m.Spec.Domain.Devices.Disks) != 0 || m.Status.Phase != kubevirtv1.Running || len(m.Status.Conditions) == 0 ||
				len(m.OwnerReferences) == 0 || m.Status.Interfaces != nil || m.Status.GuestOSInfo.Name != "" || m.UID != o.UID {
				t.Errorf("cached instance %s: %+v", o.Name, m)
			}
		}
	}
	if vmCodec.dict.Load() == nil || vmiCodec.dict.Load() == nil {
		t.Fatal("no dictionary")
	}
	// The dictionaries kept for decoding have no encoding table (S2's
	// fastTable, 32 KB): encoders are pooled copies (specCodec).
	for _, d := range []*s2.Dict{vmCodec.dict.Load(), vmiCodec.dict.Load()} {
		table := reflect.ValueOf(d).Elem().FieldByName("fastTable")
		if !table.IsValid() {
			t.Fatal("s2.Dict has no fastTable field any more: check how this version keeps its encoding tables")
		}
		if !table.IsNil() {
			t.Error("the decoding dictionary keeps an encoding table")
		}
	}
}

// TestPackedConditionsTimeless: the cached VM and instance carry their
// conditions as the hot readers read them, without times and one list
// for equal ones, while the whole objects keep the times; the VM's
// volume bookkeeping is packed with its spec.
func TestPackedConditionsTimeless(t *testing.T) {
	objs, err := fleet.Objects(fleet.Spec{Namespace: "default", N: 6, FirstVMID: 1000, Nodes: []string{"kv-node-1.lab.internal"}})
	if err != nil {
		t.Fatal(err)
	}
	vmCodec, vmiCodec := &specCodec{}, &specCodec{}
	var vms []*packedVM
	var vmis []*packedVMI
	for i, o := range objs {
		switch o := o.(type) {
		case *kubevirtv1.VirtualMachine:
			// Times differ from VM to VM, as in a real cluster.
			for j := range o.Status.Conditions {
				o.Status.Conditions[j].LastTransitionTime.Time = o.Status.Conditions[j].LastTransitionTime.Add(time.Duration(i) * time.Second)
			}
			vms = append(vms, mustStrip(t, packingVMs(vmCodec), o.DeepCopy()).(*packedVM))
		case *kubevirtv1.VirtualMachineInstance:
			for j := range o.Status.Conditions {
				o.Status.Conditions[j].LastTransitionTime.Time = o.Status.Conditions[j].LastTransitionTime.Add(time.Duration(i) * time.Second)
			}
			vmis = append(vmis, mustStrip(t, packingVMIs(vmiCodec), o.DeepCopy()).(*packedVMI))
		}
	}
	// Every other VM runs: VMs 0 and 2 alike, and their instances.
	a, b := vms[0].meta(), vms[2].meta()
	if len(a.Status.Conditions) != 3 || &a.Status.Conditions[0] != &b.Status.Conditions[0] || !a.Status.Conditions[0].LastTransitionTime.IsZero() ||
		a.Status.Conditions[0].Type != kubevirtv1.VirtualMachineReady || a.Status.Conditions[0].Status != corev1.ConditionTrue {
		t.Errorf("cached conditions of alike VMs: %+v and %+v", a.Status.Conditions, b.Status.Conditions)
	}
	if s := vms[1].meta().Status; len(s.Conditions) != 1 || s.Conditions[0].Reason != "VMINotExists" || s.Conditions[0].Message == "" {
		t.Errorf("cached conditions of a stopped VM: %+v", s.Conditions)
	}
	if a.Status.VolumeSnapshotStatuses != nil || a.Status.ObservedGeneration != 0 {
		t.Errorf("cached VM keeps its volume bookkeeping: %+v", a.Status)
	}
	if full := vms[2].full(); full.Status.Conditions[0].LastTransitionTime.Equal(&vms[0].full().Status.Conditions[0].LastTransitionTime) ||
		full.Status.Conditions[0].LastTransitionTime.IsZero() || len(full.Status.VolumeSnapshotStatuses) != 2 {
		t.Errorf("whole VM lost its condition times or volume statuses: %+v", full.Status)
	}
	x, y := vmis[0].meta(), vmis[1].meta()
	if len(x.Status.Conditions) != 4 || &x.Status.Conditions[0] != &y.Status.Conditions[0] || !x.Status.Conditions[0].LastTransitionTime.IsZero() {
		t.Errorf("cached conditions of alike instances: %+v and %+v", x.Status.Conditions, y.Status.Conditions)
	}
	if full := vmis[1].full(); full.Status.Conditions[0].LastTransitionTime.IsZero() ||
		full.Status.Conditions[0].LastTransitionTime.Equal(&vmis[0].full().Status.Conditions[0].LastTransitionTime) {
		t.Errorf("whole instance lost its condition times: %+v", full.Status.Conditions)
	}
}

// TestPackedVMsLeaveInternTables: what is packed is not shared through
// the intern tables, which would only fill them with maps no other VM has
// (a template's labels name its vmid) and keep those alive.
func TestPackedVMsLeaveInternTables(t *testing.T) {
	objs, err := fleet.Objects(fleet.Spec{Namespace: "default", N: 20, FirstVMID: 5000, Nodes: []string{"kv-node-1.lab.internal"}})
	if err != nil {
		t.Fatal(err)
	}
	size := func() int {
		interned.Lock()
		defer interned.Unlock()
		return len(interned.strs) + len(interned.quantities)
	}
	before := size()
	codec := vmCodec()
	for _, o := range objs {
		if vm, ok := o.(*kubevirtv1.VirtualMachine); ok {
			mustStrip(t, packingVMs(codec), vm.DeepCopy())
		}
	}
	if grown := size() - before; grown > 0 {
		t.Errorf("packing 20 VMs added %d maps to the intern tables", grown)
	}
}

// TestPackedVMKeepsNilAndEmptyMaps: a VM whose annotations the transform
// emptied still shows an empty map, and one without labels none: ReplaceVM
// adds a map only when the cached VM has none, which would replace the
// cluster's.
func TestPackedVMKeepsNilAndEmptyMaps(t *testing.T) {
	objs, err := fleet.Objects(fleet.Spec{Namespace: "default", N: 1, FirstVMID: 1000, Nodes: []string{"kv-node-1.lab.internal"}})
	if err != nil {
		t.Fatal(err)
	}
	vm := objs[0].(*kubevirtv1.VirtualMachine).DeepCopy()
	vm.Annotations = map[string]string{"kubevirt.io/latest-observed-api-version": "v1"}
	vm.Labels = nil
	p := mustStrip(t, packingVMs(vmCodec()), vm).(*packedVM)
	if m := p.meta(); m.Annotations == nil || len(m.Annotations) != 0 || m.Labels != nil {
		t.Errorf("cached VM's annotations %#v, labels %#v; want an empty map and nil", m.Annotations, m.Labels)
	}
	if p.GetAnnotations() == nil || p.GetLabels() != nil {
		t.Error("the record's metav1.Object maps differ from Meta's")
	}
}

// TestPackedRecordsKeepRareMetadata: a VM or instance being deleted, or
// named by generateName, decodes whole with that metadata, and its record
// answers as a metav1.Object.
func TestPackedRecordsKeepRareMetadata(t *testing.T) {
	objs, err := fleet.Objects(fleet.Spec{Namespace: "default", N: 1, FirstVMID: 1000, Nodes: []string{"kv-node-1.lab.internal"}})
	if err != nil {
		t.Fatal(err)
	}
	grace := int64(30)
	now := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	vm := objs[0].(*kubevirtv1.VirtualMachine).DeepCopy()
	vmi := objs[3].(*kubevirtv1.VirtualMachineInstance).DeepCopy()
	for _, m := range []*metav1.ObjectMeta{&vm.ObjectMeta, &vmi.ObjectMeta} {
		m.GenerateName, m.DeletionTimestamp, m.DeletionGracePeriodSeconds = "web-", &now, &grace
	}
	want := mustStrip(t, stripVM, vm.DeepCopy()).(*kubevirtv1.VirtualMachine)
	p := mustStrip(t, packingVMs(vmCodec()), vm.DeepCopy()).(*packedVM)
	if got := p.full(); !equality.Semantic.DeepEqual(got.ObjectMeta, want.ObjectMeta) {
		t.Errorf("VM metadata decodes to\n%+v\nwant\n%+v", got.ObjectMeta, want.ObjectMeta)
	}
	var o metav1.Object = p
	if o.GetDeletionGracePeriodSeconds() == nil || o.GetGenerateName() != "web-" || o.GetDeletionTimestamp() == nil || o.GetLabels()[translate.LabelVMID] == "" {
		t.Errorf("VM record as a metav1.Object: %+v %+v", p.recordMeta, p.recordMeta.more)
	}
	wantI := mustStrip(t, stripVMI, vmi.DeepCopy()).(*kubevirtv1.VirtualMachineInstance)
	q := mustStrip(t, packingVMIs(&specCodec{}), vmi.DeepCopy()).(*packedVMI)
	if got := q.full(); !equality.Semantic.DeepEqual(got.ObjectMeta, wantI.ObjectMeta) {
		t.Errorf("instance metadata decodes to\n%+v\nwant\n%+v", got.ObjectMeta, wantI.ObjectMeta)
	}
	if !metav1.IsControlledBy(q, p.meta()) {
		t.Error("the instance record does not name its VM as its controller")
	}
}
