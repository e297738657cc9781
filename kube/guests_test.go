package kube

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// TestPVEName: status and resource rows name a VM as qemu-server's
// vmstatus does: its name, else "VM <vmid>"; a VM made outside the API
// has its object name.
func TestPVEName(t *testing.T) {
	for _, c := range []struct {
		annotations map[string]string
		want        string
	}{
		{map[string]string{translate.AnnotationConfig: `{"name":"web"}`, translate.AnnotationName: "web"}, "web"},
		{map[string]string{translate.AnnotationConfig: `{"cores":"2"}`}, "VM 105"},
		{nil, "vm-105"},
	} {
		g := NewGuest(105, "", &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "vm-105", Annotations: c.annotations}}, nil)
		if got := g.PVEName(); got != c.want {
			t.Errorf("%v: PVEName %q, want %q", c.annotations, got, c.want)
		}
	}
}
