package kube

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// TestPutKeepsNewerWatchEvent: the answer to a write, put into the cache
// for read-your-writes, must not replace a newer version the watch stored
// first (a clone's VM: created, then given status Stopped by the
// controller before the create call returned), else the cache shows the
// older object until the next change, which may never come.
func TestPutKeepsNewerWatchEvent(t *testing.T) {
	inf := cache.NewSharedIndexInformer(&cache.ListWatch{}, &kubevirtv1.VirtualMachine{}, 0, cache.Indexers{})
	s := &store{byNS: map[string]cache.SharedIndexInformer{metav1.NamespaceAll: inf}}
	vm := func(rv string, status kubevirtv1.VirtualMachinePrintableStatus) *kubevirtv1.VirtualMachine {
		return &kubevirtv1.VirtualMachine{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "clone", ResourceVersion: rv},
			Status:     kubevirtv1.VirtualMachineStatus{PrintableStatus: status},
		}
	}
	status := func() kubevirtv1.VirtualMachinePrintableStatus {
		return s.get("default", "clone").(*kubevirtv1.VirtualMachine).Status.PrintableStatus
	}

	s.put(vm("23", "")) // nothing cached yet: the answer is stored
	if got := status(); got != "" {
		t.Fatalf("after first put: %q", got)
	}
	_ = inf.GetStore().Update(vm("31", kubevirtv1.VirtualMachineStatusStopped)) // the watch
	s.put(vm("23", ""))                                                         // the late answer
	if got := status(); got != kubevirtv1.VirtualMachineStatusStopped {
		t.Fatalf("a late answer replaced the newer cached VM: status %q", got)
	}
	s.put(vm("40", kubevirtv1.VirtualMachineStatusRunning)) // a newer answer still wins
	if got := status(); got != kubevirtv1.VirtualMachineStatusRunning {
		t.Fatalf("a newer answer was dropped: status %q", got)
	}
	// Versions that are not numbers cannot be ordered: the answer wins.
	_ = inf.GetStore().Update(vm("x", kubevirtv1.VirtualMachineStatusStopped))
	s.put(vm("y", kubevirtv1.VirtualMachineStatusStarting))
	if got := status(); got != kubevirtv1.VirtualMachineStatusStarting {
		t.Fatalf("opaque versions: status %q", got)
	}
}
