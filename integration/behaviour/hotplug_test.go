package behaviour

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/testenv"
)

// TestAutomaticMigrationNoLock: with LiveMigrate among the KubeVirt CR's
// workload update methods (as HyperConverged installs it), KubeVirt's
// workload updater live-migrates an instance by itself to hot-plug new
// sockets (issue 13 item 7). That migration is no user's: status/current
// shows no migrate lock meanwhile, and the sockets are the guest's once it
// has ended. On the real control plane (KubeVirt's virt-controller and
// its workload updater; the migration's node side is the stand-in's).
func TestAutomaticMigrationNoLock(t *testing.T) {
	r := realOnly(t)
	ctx := context.Background()
	setWorkloadUpdateMethods(t, ctx, []string{"LiveMigrate"})
	t.Cleanup(func() { setWorkloadUpdateMethods(t, ctx, nil) })
	b := r.b
	t.Cleanup(func() { destroy("7145").do(r) })
	must(t, r, "create", r.task("POST", "/nodes/"+firstNode+"/qemu", form("vmid", "7145", "name", "b-automig", "memory", "1024",
		"sockets", "1", "scsi0", "ceph-rbd:2", "net0", "virtio,bridge=vmbr0")))
	must(t, r, "start", r.task("POST", r.vm("7145", "status/start"), nil))
	must(t, r, "running", r.waitStatus("7145", "running", time.Minute))

	// The config task ends once KubeVirt has taken the sockets into the
	// instance; its workload updater then migrates it.
	done := make(chan map[string]any, 1)
	go func() { done <- r.task("POST", r.vm("7145", "config"), form("sockets", "2")) }()
	locks := map[string]bool{}
	sockets := ""
	deadline := time.Now().Add(2 * time.Minute)
	for cfgDone := false; ; {
		ans, err := b.api.Send("GET", r.vm("7145", "status/current"), nil)
		if err == nil && ans.Code == http.StatusOK {
			var st map[string]any
			_ = json.Unmarshal(ans.Data, &st)
			if l, ok := st["lock"]; ok {
				locks[fmt.Sprint(l)] = true
			}
		}
		if !cfgDone {
			select {
			case o := <-done:
				if !succeeded(o) {
					t.Fatalf("config: %s", brief(o))
				}
				cfgDone = true
			default:
			}
		} else if sockets = pendingSockets(t, b, r); sockets == "2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sockets never reached the guest (pending %q); locks seen %v", sockets, locks)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(locks) > 0 {
		var seen []string
		for l := range locks {
			seen = append(seen, l)
		}
		sort.Strings(seen)
		t.Errorf("status/current showed lock %q during KubeVirt's own migration", seen)
	}
	vm := vmObject(t, "7145")
	migs, err := env.KubeVirt.KubevirtV1().VirtualMachineInstanceMigrations(vm.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	auto := 0
	for _, m := range migs.Items {
		if _, ok := m.Annotations[kubevirtv1.WorkloadUpdateMigrationAnnotation]; ok && m.Spec.VMIName == vm.Name {
			auto++
		}
	}
	if auto == 0 {
		t.Errorf("no workload update migration: the sockets reached the guest otherwise")
	}
}

// pendingSockets is the sockets row of …/pending: "2", or "1>2" while
// pending.
func pendingSockets(t *testing.T, b *backend, r *runner) string {
	ans, err := b.api.Send("GET", r.vm("7145", "pending"), nil)
	if err != nil || ans.Code != http.StatusOK {
		return ""
	}
	var rows []map[string]any
	_ = json.Unmarshal(ans.Data, &rows)
	for _, row := range rows {
		if row["key"] == "sockets" {
			v := fmt.Sprint(row["value"])
			if p, ok := row["pending"]; ok {
				v += ">" + fmt.Sprint(p)
			}
			return v
		}
	}
	return ""
}

// setWorkloadUpdateMethods sets the KubeVirt CR's workload update methods.
func setWorkloadUpdateMethods(t *testing.T, ctx context.Context, methods []string) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"workloadUpdateStrategy": map[string]any{"workloadUpdateMethods": methods}}})
	gvr := schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "kubevirts"}
	if _, err := env.Dynamic.Resource(gvr).Namespace(testenv.KubeVirtNamespace).Patch(ctx, testenv.KubeVirtCRName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}
