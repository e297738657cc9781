package kube

import (
	"errors"
	"testing"

	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// A VM another replica made reaches this one's cache through its watch,
// which may lag: GuestFresh finds it in kube-apiserver meanwhile, within
// its budget, and never invents one.
func TestGuestFresh(t *testing.T) {
	e := newEnv(t, envOptions{beforeController: blindVMWatch})
	c := e.cluster(Options{}, true)
	halted := kubevirtv1.RunStrategyHalted
	for name, vmid := range map[string]string{"elsewhere": "4242", "later": "4343"} {
		vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{translate.LabelVMID: vmid}},
			Spec: kubevirtv1.VirtualMachineSpec{RunStrategy: &halted, Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{}}}
		if _, err := e.kv.KubevirtV1().VirtualMachines("default").Create(e.ctx, vm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The watch is blind: the cache alone does not know the VM.
	if _, err := c.Guest(4242); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Guest(4242) from the cache: %v; want not found", err)
	}
	g, err := c.GuestFresh(e.ctx, 4242)
	if err != nil || g.Name() != "elsewhere" {
		t.Fatalf("GuestFresh(4242) = %s, %v", g.Name(), err)
	}
	// It is cached now, for every reader.
	if g, err := c.Guest(4242); err != nil || g.Name() != "elsewhere" {
		t.Fatalf("Guest(4242) after GuestFresh = %s, %v", g.Name(), err)
	}
	if _, err := c.GuestFresh(e.ctx, 4244); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GuestFresh of a vmid no VM has: %v; want not found", err)
	}
	// Past its budget the cache answers alone.
	c.freshLookups = rate.NewLimiter(0, 0)
	if _, err := c.GuestFresh(e.ctx, 4343); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GuestFresh(4343) without budget: %v; want the cache's not found", err)
	}
}
