package integration

import (
	"strings"
	"testing"
)

// TestTaskAnsweredByAnotherReplica: a task started through one instance
// is polled to completion through another instance (its own cluster
// connection and caches), because task state lives in the cluster.
func TestTaskAnsweredByAnotherReplica(t *testing.T) {
	a, b := pve(t), fallbackPVE(t)
	node := firstNode(a)
	id := nextID(a)
	var upid string
	a.OK("POST", "/nodes/"+node+"/qemu", form("vmid", id, "name", "replica-test"), &upid)
	if exit := b.WaitTask(upid); exit != "OK" {
		t.Fatalf("create seen from the other replica: %s", exit)
	}
	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/status/start", nil, &upid)
	if exit := b.WaitTask(upid); exit != "OK" {
		t.Fatalf("start seen from the other replica: %s", exit)
	}
	var log []map[string]any
	b.OK("GET", "/nodes/"+node+"/tasks/"+upid+"/log", nil, &log)
	if len(log) < 2 || !strings.Contains(log[0]["t"].(string), "starting VM "+id) || log[len(log)-1]["t"] != "TASK OK" {
		t.Fatalf("log from the other replica: %v", log)
	}
	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/status/stop", nil, &upid)
	a.WaitTask(upid)
	a.OK("DELETE", "/nodes/"+node+"/qemu/"+id, nil, &upid)
	a.WaitTask(upid)
}
