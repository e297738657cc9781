package integration

import (
	"testing"

	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// HA resources on the real apiserver: the VM's run strategy follows the
// requested state and the config is the VM's annotation; deleting the
// resource leaves a Manual VM.
func TestHAResourceRunStrategy(t *testing.T) {
	a := pve(t)
	node := firstNode(a)
	id := nextID(a)
	var upid string
	a.OK("POST", "/nodes/"+node+"/qemu", form("vmid", id, "name", "it-ha-"+id, "memory", "256"), &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create: %s", exit)
	}
	t.Cleanup(func() {
		a.Do("DELETE", "/cluster/ha/resources/vm:"+id, nil)
		a.Do("DELETE", "/nodes/"+node+"/qemu/"+id, form("purge", "1"))
	})
	strategy := func() (kubevirtv1.VirtualMachineRunStrategy, string) {
		vm := vmByID(t, id)
		rs := kubevirtv1.VirtualMachineRunStrategy("")
		if vm.Spec.RunStrategy != nil {
			rs = *vm.Spec.RunStrategy
		}
		return rs, vm.Annotations[translate.AnnotationHA]
	}
	if rs, ann := strategy(); rs != kubevirtv1.RunStrategyManual || ann != "" {
		t.Fatalf("before: %s %q", rs, ann)
	}
	a.OK("POST", "/cluster/ha/resources", form("sid", "vm:"+id, "state", "stopped", "max_relocate", "0"), nil)
	if rs, ann := strategy(); rs != kubevirtv1.RunStrategyHalted || ann != `{"state":"stopped","max_relocate":0}` {
		t.Fatalf("stopped: %s %q", rs, ann)
	}
	a.OK("PUT", "/cluster/ha/resources/vm:"+id, form("state", "started"), nil)
	if rs, _ := strategy(); rs != kubevirtv1.RunStrategyAlways {
		t.Fatalf("started: %s", rs)
	}
	a.OK("PUT", "/cluster/ha/resources/vm:"+id, form("state", "ignored"), nil)
	if rs, _ := strategy(); rs != kubevirtv1.RunStrategyManual {
		t.Fatalf("ignored: %s", rs)
	}
	a.OK("DELETE", "/cluster/ha/resources/vm:"+id, nil, nil)
	if rs, ann := strategy(); rs != kubevirtv1.RunStrategyManual || ann != "" {
		t.Fatalf("deleted: %s %q", rs, ann)
	}
}
