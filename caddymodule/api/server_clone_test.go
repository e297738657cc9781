package api_test

import (
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestCloneAndSnapshots(t *testing.T) {
	a := shared(t)
	node := "kv-node-1-lab-internal"
	var src, upid string
	a.OK("GET", "/cluster/nextid", nil, &src)
	a.OK("POST", "/nodes/"+node+"/qemu", url.Values{"vmid": {src}, "name": {"golden"}, "net0": {"virtio,bridge=vmbr0"},
		"scsi0": {"ceph-rbd:8"}, "ide2": {"local-lvm:cloudinit"}, "ciuser": {"ops"}}, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create: %s", exit)
	}
	a.OK("POST", "/nodes/"+node+"/qemu/"+src+"/template", nil, &upid)
	a.WaitTask(upid)

	var dst string
	a.OK("GET", "/cluster/nextid", nil, &dst)
	a.OK("POST", "/nodes/"+node+"/qemu/"+src+"/clone", url.Values{"newid": {dst}, "name": {"web-from-golden"}, "full": {"1"}, "target": {"kv-node-2-lab-internal"}}, &upid)
	if !strings.Contains(upid, ":qmclone:"+src+":") {
		t.Fatalf("clone UPID must carry the source id: %s", upid)
	}
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("clone: %s", exit)
	}
	var cfg, srcCfg map[string]any
	a.OK("GET", "/nodes/kv-node-2-lab-internal/qemu/"+dst+"/config", nil, &cfg)
	a.OK("GET", "/nodes/"+node+"/qemu/"+src+"/config", nil, &srcCfg)
	if cfg["name"] != "web-from-golden" || cfg["template"] != nil || cfg["scsi0"] != "ceph-rbd:vm-"+dst+"-disk-0,size=8G" || cfg["net0"] == srcCfg["net0"] {
		t.Fatalf("clone config %v (source %v)", cfg, srcCfg)
	}
	if ans := a.Do("POST", "/nodes/"+node+"/qemu/"+src+"/clone", url.Values{"newid": {dst}}); ans.Code != 500 || !strings.Contains(ans.Message, "already exists") {
		t.Fatalf("clone onto a taken id: %s", ans.Status)
	}

	// Snapshots of the clone.
	a.OK("POST", "/nodes/kv-node-2-lab-internal/qemu/"+dst+"/snapshot", url.Values{"snapname": {"before-upgrade"}, "description": {"pre"}}, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("snapshot: %s", exit)
	}
	var snaps []map[string]any
	a.OK("GET", "/nodes/kv-node-2-lab-internal/qemu/"+dst+"/snapshot", nil, &snaps)
	if len(snaps) != 2 || snaps[0]["name"] != "before-upgrade" || snaps[0]["description"] != "pre" || snaps[1]["name"] != "current" || snaps[1]["parent"] != "before-upgrade" {
		t.Fatalf("snapshots %v", snaps)
	}
	if ans := a.Do("POST", "/nodes/kv-node-2-lab-internal/qemu/"+dst+"/snapshot", url.Values{"snapname": {"before-upgrade"}}); ans.Code != 500 || !strings.Contains(ans.Message, "already used") {
		t.Fatalf("duplicate snapshot: %s", ans.Status)
	}
	if ans := a.Do("POST", "/nodes/kv-node-2-lab-internal/qemu/"+dst+"/snapshot", url.Values{"snapname": {"with_ram"}, "vmstate": {"1"}}); ans.Code != 500 || !strings.Contains(ans.Status, "RAM state is not supported") {
		t.Fatalf("vmstate: %s", ans.Status)
	}
	// Rolling back a running VM stops it first, as PVE does, and restores
	// the snapshot's config.
	vmPath := "/nodes/kv-node-2-lab-internal/qemu/" + dst
	a.OK("PUT", vmPath+"/config", url.Values{"memory": {"3072"}}, nil)
	a.OK("POST", vmPath+"/status/start", nil, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("start: %s", exit)
	}
	a.OK("POST", vmPath+"/snapshot/before-upgrade/rollback", nil, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("rollback: %s", exit)
	}
	var after map[string]any
	a.OK("GET", vmPath+"/config", nil, &after)
	if st := a.Status("kv-node-2-lab-internal", dst); st["status"] != "stopped" || after["memory"] != cfg["memory"] {
		t.Fatalf("after rollback of a running VM: status %v, memory %v (snapshot had %v)\n%v\n%v", st["status"], after["memory"], cfg["memory"], after, cfg)
	}
	a.OK("DELETE", "/nodes/kv-node-2-lab-internal/qemu/"+dst+"/snapshot/before-upgrade", nil, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("delete snapshot: %s", exit)
	}
	snaps = nil
	a.OK("GET", "/nodes/kv-node-2-lab-internal/qemu/"+dst+"/snapshot", nil, &snaps)
	if len(snaps) != 1 {
		t.Fatalf("after delete: %v", snaps)
	}
	for _, id := range []string{dst, src} {
		n := node
		if id == dst {
			n = "kv-node-2-lab-internal"
		}
		a.OK("DELETE", "/nodes/"+n+"/qemu/"+id, nil, &upid)
		a.WaitTask(upid)
	}
}

// TestCloneWithoutDisks: a VM with no disks clones at once, also many
// times at the same moment (bpg's TestBatchCreate clones one thirty times
// in parallel); every qmclone task ends, as qemu-server's do.
func TestCloneWithoutDisks(t *testing.T) {
	a := shared(t)
	node := "kv-node-1-lab-internal"
	var src, upid string
	a.OK("GET", "/cluster/nextid", nil, &src)
	a.OK("POST", "/nodes/"+node+"/qemu", url.Values{"vmid": {src}}, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create: %s", exit)
	}
	const n = 8
	upids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ans, err := a.Send("POST", "/nodes/"+node+"/qemu/"+src+"/clone", url.Values{"newid": {strconv.Itoa(990100 + i)}})
			if err != nil || ans.Code != 200 {
				t.Errorf("clone %d: %v %s %s", i, err, ans.Status, ans.Raw)
				return
			}
			_ = json.Unmarshal(ans.Data, &upids[i])
		})
	}
	wg.Wait()
	for i, u := range upids {
		if u == "" {
			continue
		}
		if exit := a.WaitTask(u); exit != "OK" {
			t.Fatalf("clone %d: %s", i, exit)
		}
		if st := a.Status(node, strconv.Itoa(990100+i)); st["lock"] != nil || st["status"] != "stopped" {
			t.Fatalf("clone %d status %v", i, st)
		}
	}
}

// CDI copies a claim only while no pod uses it (CloneSourceInUse): a
// clone of a running VM is refused up front instead of waiting for the
// VM to stop; stopped, it clones.
func TestCloneOfRunningVMRefused(t *testing.T) {
	a := shared(t)
	node := nodeNames(t, a)[0]
	id := newMigrateVM(t, a, node, "clone-running-src", "local-lvm")
	var upid, newID string
	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/status/start", nil, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("start: %s", exit)
	}
	a.OK("GET", "/cluster/nextid", nil, &newID)
	path := "/nodes/" + node + "/qemu/" + id + "/clone"
	ans := a.Do("POST", path, url.Values{"newid": {newID}, "full": {"1"}})
	if want := "can't clone VM " + id + " while it is running: KubeVirt's CDI copies claim vm-" + id + "-disk-0 only while no running guest uses it (CloneSourceInUse) - shut the VM down first\n"; ans.Code != 500 || ans.Message != want {
		t.Fatalf("clone of a running VM: %s %q", ans.Status, ans.Message)
	}
	if got := a.Do("GET", "/nodes/"+node+"/qemu/"+newID+"/config", nil); got.Code != 500 {
		t.Fatalf("the refused clone exists: %s", got.Status)
	}
	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/status/stop", nil, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("stop: %s", exit)
	}
	a.OK("POST", path, url.Values{"newid": {newID}, "full": {"1"}}, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("clone of the stopped VM: %s", exit)
	}
}

// KubeVirt clones from another namespace as the target namespace's
// default ServiceAccount; without its right to clone from the source
// namespace the clone task fails at once with KubeVirt's reason.
func TestCloneIntoAnotherPoolNeedsCloneAuthorization(t *testing.T) {
	a := shared(t)
	node := nodeNames(t, a)[0]
	id := newMigrateVM(t, a, node, "clone-pool-src", "ceph-rbd")
	var upid, newID string
	a.OK("GET", "/cluster/nextid", nil, &newID)
	t.Cleanup(func() {
		for _, vmid := range []string{newID, id} {
			a.Do("DELETE", "/nodes/"+node+"/qemu/"+vmid, url.Values{"purge": {"1"}})
		}
	})
	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/clone", url.Values{"newid": {newID}, "full": {"1"}, "pool": {"lab"}}, &upid)
	if exit := a.WaitTask(upid); !strings.HasPrefix(exit, "volume provisioning failed: not authorized to create DataVolume: User system:serviceaccount:lab:default has insufficient permissions in clone source namespace default") {
		t.Fatalf("clone into pool lab: %s", exit)
	}
	// As PVE's clone worker does on error, the half-made VM is removed.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got := a.Do("GET", "/nodes/"+node+"/qemu/"+newID+"/config", nil)
		if got.Code == 500 && strings.Contains(got.Message, "does not exist") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the failed clone %s is still there: %s", newID, got.Status)
		}
	}
}
