package kubevirtsim

import (
	"fmt"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"
)

// BulkVMs returns n plain VMs in namespace ns with vmids from firstVMID,
// for load tests and benchmarks: every other one runs, with its instance
// already Running on one of nodes (Kubernetes node names), so that a
// Controller has nothing left to do when it starts.
func BulkVMs(ns string, n, firstVMID int, nodes []string) []runtime.Object {
	created := metav1.NewTime(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	out := make([]runtime.Object, 0, n+n/2)
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("bulk-%05d", i)
		vmid := strconv.Itoa(firstVMID + i)
		running := i%2 == 0
		rs := virtv1.RunStrategyManual
		mem := resource.MustParse("1Gi")
		mac := fmt.Sprintf("BC:24:11:%02X:%02X:%02X", (i>>16)&0xff, (i>>8)&0xff, i&0xff)
		vm := &virtv1.VirtualMachine{
			TypeMeta: metav1.TypeMeta{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine"},
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: ns, UID: types.UID(fmt.Sprintf("bulk-vm-%05d", i)),
				CreationTimestamp: created, Labels: map[string]string{labelVMID: vmid},
			},
			Spec: virtv1.VirtualMachineSpec{
				RunStrategy: &rs,
				Template: &virtv1.VirtualMachineInstanceTemplateSpec{Spec: virtv1.VirtualMachineInstanceSpec{
					Domain: virtv1.DomainSpec{
						CPU:    &virtv1.CPU{Cores: 2, Sockets: 1, Threads: 1},
						Memory: &virtv1.Memory{Guest: &mem},
						Devices: virtv1.Devices{Interfaces: []virtv1.Interface{{
							Name: "net0", Model: "virtio", MacAddress: mac,
							InterfaceBindingMethod: virtv1.InterfaceBindingMethod{Masquerade: &virtv1.InterfaceMasquerade{}},
						}}},
					},
					Networks: []virtv1.Network{{Name: "net0", NetworkSource: virtv1.NetworkSource{Pod: &virtv1.PodNetwork{}}}},
				}},
			},
			Status: virtv1.VirtualMachineStatus{PrintableStatus: virtv1.VirtualMachineStatusStopped},
		}
		out = append(out, vm)
		if !running {
			continue
		}
		vm.Status = virtv1.VirtualMachineStatus{PrintableStatus: virtv1.VirtualMachineStatusRunning, Created: true, Ready: true}
		node := ""
		if len(nodes) > 0 {
			node = nodes[i%len(nodes)]
		}
		ctrl := true
		out = append(out, &virtv1.VirtualMachineInstance{
			TypeMeta: metav1.TypeMeta{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachineInstance"},
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: ns, UID: types.UID(fmt.Sprintf("bulk-vmi-%05d", i)), CreationTimestamp: created,
				Labels:          map[string]string{"kubevirt.io/vm": name},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: name, UID: vm.UID, Controller: &ctrl}},
			},
			Spec: *vm.Spec.Template.Spec.DeepCopy(),
			Status: virtv1.VirtualMachineInstanceStatus{
				Phase: virtv1.Running, NodeName: node,
				PhaseTransitionTimestamps: []virtv1.VirtualMachineInstancePhaseTransitionTimestamp{{Phase: virtv1.Running, PhaseTransitionTimestamp: created}},
				Interfaces: []virtv1.VirtualMachineInstanceNetworkInterface{{
					Name: "net0", MAC: mac, IP: fmt.Sprintf("10.244.%d.%d", (i>>8)&0xff, i&0xff), InterfaceName: "eth0",
				}},
			},
		})
	}
	return out
}
