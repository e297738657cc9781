package integration

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestReadYourWritesAfterControllerWrite: a config written right after
// another writer (a controller) changed the VM is what the very next
// reads show (config, status/current, /cluster/resources), although the
// informer may deliver the other writer's earlier event after our write.
func TestReadYourWritesAfterControllerWrite(t *testing.T) {
	a := pve(t)
	node := firstNode(a)
	id := nextID(a)
	createVM(t, a, node, id, "name", "rw-0")
	ctx := context.Background()
	for i := 1; i <= 15; i++ {
		vm := vmByID(t, id)
		// Another writer, then our write at once: the cache has not seen
		// the other write yet, so ours is made on a fresh read.
		patch := fmt.Sprintf(`{"metadata":{"labels":{"rw-controller":"%d"}}}`, i)
		if _, err := env.KubeVirt.KubevirtV1().VirtualMachines(vm.Namespace).Patch(ctx, vm.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("rw-%d", i)
		a.OK("PUT", "/nodes/"+node+"/qemu/"+id+"/config", form("name", want), nil)
		var cfg map[string]any
		a.OK("GET", "/nodes/"+node+"/qemu/"+id+"/config", nil, &cfg)
		if cfg["name"] != want {
			t.Fatalf("round %d: config shows name %v right after our write of %s", i, cfg["name"], want)
		}
		if st := a.Status(node, id); st["name"] != want {
			t.Fatalf("round %d: status/current shows name %v right after our write of %s", i, st["name"], want)
		}
		var rows []map[string]any
		a.OK("GET", "/cluster/resources", form("type", "vm"), &rows)
		for _, r := range rows {
			if fmt.Sprint(r["vmid"]) == id && r["name"] != want {
				t.Fatalf("round %d: /cluster/resources shows name %v right after our write of %s", i, r["name"], want)
			}
		}
	}
}
