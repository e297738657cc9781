package integration

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
)

// TestTasksSurviveRestart stops a ./caddy process entirely (its cluster
// connection and task workers end) while a task runs, starts it again, and
// the new process, starting from nothing but the cluster, ends the task
// and lists it. Its task records live in a namespace of their own, so no
// other Caddy of the test run (which share the cluster) can end the task
// in its place.
func TestTasksSurviveRestart(t *testing.T) {
	ctx := context.Background()
	taskNS := "restart-tasks"
	if _, err := env.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: taskNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Kube.CoreV1().Namespaces().Delete(ctx, taskNS, metav1.DeleteOptions{}) })
	auth := testcaddy.TokenAuth(tokenID, tokenSecret)
	p, procBase := apiProcess(t, auth, "token "+tokenID+" "+tokenSecret, "task_namespace "+taskNS)
	a := &testcaddy.PVE{T: t, Base: procBase, C: testcaddy.Client(), Auth: auth}
	node := firstNode(a)
	id := nextID(a)
	var upid string
	a.OK("POST", "/nodes/"+node+"/qemu", form("vmid", id, "name", "restart-test", "start", "1"), &upid)
	t.Cleanup(func() {
		vm := vmByID(t, id)
		_ = env.DirectKubeVirt.KubevirtV1().VirtualMachines(vm.Namespace).Delete(ctx, vm.Name, metav1.DeleteOptions{})
	})
	p.Restart()
	waitAPI(t, a, p)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create+start task after restart: %s", exit)
	}
	if st := a.Status(node, id); st["status"] != "running" {
		t.Fatalf("after restart: %v", st)
	}
	var tasks []map[string]any
	a.OK("GET", "/nodes/"+node+"/tasks", form("vmid", id), &tasks)
	if len(tasks) == 0 || tasks[0]["upid"] != upid || tasks[0]["status"] != "OK" {
		t.Fatalf("task list after restart: %v", tasks)
	}
	// The record is in the process's own namespace: no other Caddy of
	// the test run watches it.
	cms, err := env.Kube.CoreV1().ConfigMaps(taskNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, cm := range cms.Items {
		found = found || cm.Data["upid"] == upid
	}
	if !found {
		t.Fatalf("no record of %s in %s", upid, taskNS)
	}
}
