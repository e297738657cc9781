package behaviour

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/caddy-proxmox/caddy-proxmox/kubevirtsim"
)

// TestAgentGuestOnlyInterfaces: a guest with interfaces of its own
// (Docker's bridge, one it made, a tunnel without a MAC), which
// virt-handler reports after the VM's NICs with no name (issue 13 item
// 10). network-get-interfaces answers as PVE's passthrough of qemu-ga:
// each under the guest's name, no hardware-address where the guest has
// none. On the real control plane (the interfaces come from the node
// stand-in, as virt-handler reports them).
func TestAgentGuestOnlyInterfaces(t *testing.T) {
	ctx := context.Background()
	r := realOnly(t)
	const id = "7140"
	t.Cleanup(func() { destroy(id).do(r) })
	must(t, r, "create", r.task("POST", "/nodes/"+firstNode+"/qemu", form("vmid", id, "name", "b-agent", "memory", "512", "agent", "1",
		"scsi0", "local-lvm:2", "net0", "virtio,bridge=vmbr0")))
	vm := vmObject(t, id)
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{
			// The node stand-in's guest runs an agent only when told so.
			kubevirtsim.AnnotationAgent:           "true",
			kubevirtsim.AnnotationGuestInterfaces: "docker0=172.17.0.1,br-lab=10.10.0.1;fd00:10::1,wg0@=10.99.0.1",
		}}}}})
	if _, err := env.KubeVirt.KubevirtV1().VirtualMachines(vm.Namespace).Patch(ctx, vm.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	must(t, r, "start", r.task("POST", r.vm(id, "status/start"), nil))

	var got struct {
		Result []map[string]any `json:"result"`
	}
	deadline := time.Now().Add(time.Minute)
	for {
		ans, err := r.b.api.Send("GET", r.vm(id, "agent/network-get-interfaces"), nil)
		if err == nil && ans.Code == http.StatusOK {
			if err := json.Unmarshal(ans.Data, &got); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("network-get-interfaces: %v %+v", err, ans)
		}
		time.Sleep(250 * time.Millisecond)
	}
	var names []string
	byName := map[string]map[string]any{}
	for _, in := range got.Result {
		n := fmt.Sprint(in["name"])
		names = append(names, n)
		byName[n] = in
	}
	if strings.Join(names, " ") != "lo enp1s0 docker0 br-lab wg0" {
		t.Fatalf("interfaces %q, want lo, the NIC and the guest's own", names)
	}
	ips := func(n string) string {
		var out []string
		for _, a := range byName[n]["ip-addresses"].([]any) {
			out = append(out, fmt.Sprint(a.(map[string]any)["ip-address"]))
		}
		return strings.Join(out, " ")
	}
	if ips("br-lab") != "10.10.0.1 fd00:10::1" || ips("docker0") != "172.17.0.1" || ips("wg0") != "10.99.0.1" {
		t.Errorf("addresses: br-lab %q, docker0 %q, wg0 %q", ips("br-lab"), ips("docker0"), ips("wg0"))
	}
	if _, has := byName["wg0"]["hardware-address"]; has {
		t.Errorf("wg0 has no MAC in the guest, but hardware-address %v", byName["wg0"]["hardware-address"])
	}
	if mac, _ := byName["docker0"]["hardware-address"].(string); !strings.HasPrefix(mac, "02:42:") {
		t.Errorf("docker0 hardware-address %q", mac)
	}
}
