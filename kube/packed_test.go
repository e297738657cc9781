package kube

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/internal/fleet"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// TestPackedObjectsDecodeWhole: what the VM and instance caches keep
// decodes to exactly what the transforms keep of the object (the spec
// included: config views, writes and clones read it), while the cached
// metadata and status carry no spec but the run strategy.
func TestPackedObjectsDecodeWhole(t *testing.T) {
	objs, err := fleet.Objects(fleet.Spec{Namespace: "default", N: 3, FirstVMID: 1000, Nodes: []string{"kv-node-1.lab.internal"}})
	if err != nil {
		t.Fatal(err)
	}
	vmCodec, vmiCodec := &specCodec{}, &specCodec{}
	for _, o := range objs {
		switch o := o.(type) {
		case *kubevirtv1.VirtualMachine:
			want := mustStrip(t, stripVM, o.DeepCopy()).(*kubevirtv1.VirtualMachine)
			p := mustStrip(t, packingVMs(vmCodec), o.DeepCopy()).(*packedVM)
			if got := p.full(); !equality.Semantic.DeepEqual(got, want) {
				t.Errorf("VM %s decodes to\n%+v\nwant\n%+v", o.Name, got.Spec, want.Spec)
			}
			if p.Spec.Template != nil || len(p.Spec.DataVolumeTemplates) != 0 || p.Spec.RunStrategy == nil ||
				p.Annotations[translate.AnnotationConfig] == "" || p.Status.PrintableStatus == "" {
				t.Errorf("cached VM %s: %+v", o.Name, p.VirtualMachine)
			}
			if len(p.claims) != 1 || p.claims[0] != o.Spec.DataVolumeTemplates[0].Name {
				t.Errorf("cached VM %s claims %v", o.Name, p.claims)
			}
			g := Guest{VMID: 1, vm: p, full: &guestFull{}}
			if g.Meta().Spec.Template != nil || g.VM().Spec.Template == nil || g.VM() != g.VM() || g.Packed().full == g.full {
				t.Error("Guest: Meta has a template, VM none, or VM decodes anew, or Packed keeps the decoded VM")
			}
		case *kubevirtv1.VirtualMachineInstance:
			want := mustStrip(t, stripVMI, o.DeepCopy()).(*kubevirtv1.VirtualMachineInstance)
			p := mustStrip(t, packingVMIs(vmiCodec), o.DeepCopy()).(*packedVMI)
			if got := p.full(); !equality.Semantic.DeepEqual(got, want) {
				t.Errorf("instance %s decodes to\n%+v\nwant\n%+v", o.Name, got.Spec, want.Spec)
			}
			if m := p.meta(); len(m.Spec.Domain.Devices.Disks) != 0 || m.Status.Phase != kubevirtv1.Running || len(m.Status.Conditions) == 0 ||
				len(m.OwnerReferences) == 0 || m.Status.Interfaces != nil || m.Status.GuestOSInfo.Name != "" || m.UID != o.UID {
				t.Errorf("cached instance %s: %+v", o.Name, m)
			}
		}
	}
	if len(vmCodec.dict.Bytes()) == 0 {
		t.Error("no dictionary")
	}
}
