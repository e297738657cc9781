package testenv

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// VMByID returns the one VirtualMachine labelled with PVE vmid id, read
// straight from kube-apiserver, and fails t unless exactly one has it.
func (e *Env) VMByID(t testing.TB, id string) *virtv1.VirtualMachine {
	t.Helper()
	list, err := e.DirectKubeVirt.KubevirtV1().VirtualMachines(metav1.NamespaceAll).List(context.Background(), metav1.ListOptions{LabelSelector: translate.LabelVMID + "=" + id})
	if err != nil {
		t.Fatalf("VM with vmid %s: %v", id, err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("VM with vmid %s: %d found", id, len(list.Items))
	}
	return &list.Items[0]
}
