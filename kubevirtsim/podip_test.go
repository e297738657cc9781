package kubevirtsim

import (
	"testing"

	virtv1 "kubevirt.io/api/core/v1"
)

// A test's pod IP (AnnotationPodIP) is what the pod-network interface
// reports, agent or not; other networks are not affected.
func TestInterfaceStatusPodIP(t *testing.T) {
	vmi := &virtv1.VirtualMachineInstance{}
	vmi.Annotations = map[string]string{AnnotationPodIP: "127.0.0.9"}
	vmi.Spec.Domain.Devices.Interfaces = []virtv1.Interface{{Name: "net0"}, {Name: "net1"}}
	vmi.Spec.Networks = []virtv1.Network{
		{Name: "net0", NetworkSource: virtv1.NetworkSource{Pod: &virtv1.PodNetwork{}}},
		{Name: "net1", NetworkSource: virtv1.NetworkSource{Multus: &virtv1.MultusNetwork{NetworkName: "lan"}}},
	}
	for _, agent := range []bool{false, true} {
		st := interfaceStatus(vmi, agent)
		if len(st) != 2 || st[0].IP != "127.0.0.9" || st[0].IPs[0] != "127.0.0.9" || len(st[0].IPs) != 2 {
			t.Fatalf("agent %v: pod interface %+v", agent, st)
		}
		if st[1].IP == "127.0.0.9" {
			t.Fatalf("agent %v: the Multus interface took the pod IP: %+v", agent, st[1])
		}
	}
}
