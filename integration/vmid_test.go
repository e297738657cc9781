package integration

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

func makeVM(t *testing.T, ns, name string, labels map[string]string) *kubevirtv1.VirtualMachine {
	t.Helper()
	rs := kubevirtv1.RunStrategyHalted
	vm := &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: kubevirtv1.VirtualMachineSpec{RunStrategy: &rs, Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
			Spec: kubevirtv1.VirtualMachineInstanceSpec{Domain: kubevirtv1.DomainSpec{CPU: &kubevirtv1.CPU{Cores: 1}}},
		}},
	}
	out, err := env.KubeVirt.KubevirtV1().VirtualMachines(ns).Create(context.Background(), vm, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.KubeVirt.KubevirtV1().VirtualMachines(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return out
}

// vmRows returns /cluster/resources VM rows by name.
func vmRows(t *testing.T) map[string][]map[string]any {
	a := pve(t)
	var rows []map[string]any
	a.OK("GET", "/cluster/resources", form("type", "vm"), &rows)
	out := map[string][]map[string]any{}
	ids := map[float64]bool{}
	for _, r := range rows {
		id := r["vmid"].(float64)
		if ids[id] {
			t.Fatalf("two VMs show vmid %v: %v", id, rows)
		}
		ids[id] = true
		out[r["name"].(string)] = append(out[r["name"].(string)], r)
	}
	return out
}

func waitRows(t *testing.T, cond func(map[string][]map[string]any) bool) map[string][]map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rows := vmRows(t)
		if cond(rows) || time.Now().After(deadline) {
			return rows
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestPreexistingVMsGetStableIDs: a VM made with kubectl has no label; it
// gets a deterministic id and can be read and powered through it.
func TestPreexistingVMsGetStableIDs(t *testing.T) {
	makeVM(t, "default", "kubectl-made", nil)
	rows := waitRows(t, func(r map[string][]map[string]any) bool { return len(r["kubectl-made"]) == 1 })
	if len(rows["kubectl-made"]) != 1 {
		t.Fatalf("pre-existing VM not listed: %v", rows)
	}
	row := rows["kubectl-made"][0]
	id := int(row["vmid"].(float64))
	if want := translate.FallbackVMID("default", "kubectl-made", 0); id != want {
		t.Fatalf("vmid %d, want the deterministic %d", id, want)
	}
	a := pve(t)
	node := row["node"].(string)
	if st := a.Status(node, strconv.Itoa(id)); st["name"] != "kubectl-made" || st["status"] != "stopped" {
		t.Fatalf("status %v", st)
	}
	// The node is stable: the same on every read.
	for i := 0; i < 3; i++ {
		if again := vmRows(t)["kubectl-made"][0]["node"]; again != node {
			t.Fatalf("node moved from %s to %v", node, again)
		}
	}
}

// TestAmbiguousVMIDIsRefused: two VMs labelled with the same vmid never
// show the same id, and a mutation on that id is refused, not guessed.
func TestAmbiguousVMIDIsRefused(t *testing.T) {
	makeVM(t, "default", "twin-a", map[string]string{translate.LabelVMID: "4711"})
	makeVM(t, "default", "twin-b", map[string]string{translate.LabelVMID: "4711"})
	rows := waitRows(t, func(r map[string][]map[string]any) bool { return len(r["twin-a"]) == 1 && len(r["twin-b"]) == 1 })
	if len(rows["twin-a"]) != 1 || len(rows["twin-b"]) != 1 {
		t.Fatalf("twins not listed: %v", rows)
	}
	if rows["twin-a"][0]["vmid"] == float64(4711) || rows["twin-b"][0]["vmid"] == float64(4711) {
		t.Fatalf("an ambiguous vmid is shown: %v %v", rows["twin-a"], rows["twin-b"])
	}
	a := pve(t)
	node := firstNode(a)
	for _, path := range []string{"/status/start", "/status/stop"} {
		ans := a.Do("POST", "/nodes/"+node+"/qemu/4711"+path, nil)
		if ans.Code != 400 || !strings.Contains(ans.Errors["vmid"], "ambiguous") || !strings.Contains(ans.Errors["vmid"], "default/twin-a") {
			t.Fatalf("%s on ambiguous vmid: %s %s", path, ans.Status, ans.Raw)
		}
	}
	ans := a.Do("DELETE", "/nodes/"+node+"/qemu/4711", nil)
	if ans.Code != 400 {
		t.Fatalf("delete on ambiguous vmid: %s", ans.Status)
	}
	for _, name := range []string{"twin-a", "twin-b"} {
		vm, err := env.KubeVirt.KubevirtV1().VirtualMachines("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s was touched: %v", name, err)
		}
		if rs, _ := vm.RunStrategy(); rs != kubevirtv1.RunStrategyHalted {
			t.Fatalf("%s run strategy changed to %s", name, rs)
		}
	}
	// nextid never hands out the contested id.
	if ans := a.Do("GET", "/cluster/nextid", form("vmid", "4711")); ans.Code != 400 {
		t.Fatalf("nextid offered a contested id: %s", ans.Status)
	}
}
