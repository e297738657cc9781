package api_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// TestResizeLogsClaimAndExpandDisks: the resize task log says what the
// claim asks (local-lvm's are Block-mode, as CDI's StorageProfile for
// TopoLVM makes them: the disk itself; Filesystem-mode ones add CDI's
// overhead, kube's TestGrowClaim), and that the guest sees nothing of it
// while KubeVirt's ExpandDisks feature gate is off (the simulated lab's
// KubeVirt CR).
func TestResizeLogsClaimAndExpandDisks(t *testing.T) {
	a := shared(t)
	node := nodeNames(t, a)[0]
	var id, upid string
	a.OK("GET", "/cluster/nextid", nil, &id)
	a.OK("POST", "/nodes/"+node+"/qemu", url.Values{"vmid": {id}, "name": {"grow"}, "scsi0": {"local-lvm:4"}}, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create: %s", exit)
	}
	t.Cleanup(func() {
		a.OK("DELETE", "/nodes/"+node+"/qemu/"+id, nil, &upid)
		a.WaitTask(upid)
	})
	a.OK("PUT", "/nodes/"+node+"/qemu/"+id+"/resize", url.Values{"disk": {"scsi0"}, "size": {"+100M"}}, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("resize: %s", exit)
	}
	log := taskLog(t, a, node, upid)
	want := "claim 'vm-" + id + "-disk-0' requests " + translate.FormatSize(translate.ClaimRequest(4<<30+100<<20, 0.06, false)) + "\n"
	if !strings.Contains(log, want) {
		t.Errorf("log %q\nwants %q", log, want)
	}
	if !strings.Contains(log, "WARN: KubeVirt's ExpandDisks feature gate is off: the guest keeps seeing disk scsi0 at its old size") {
		t.Errorf("log %q says nothing of ExpandDisks", log)
	}
	var cfg map[string]any
	a.OK("GET", "/nodes/"+node+"/qemu/"+id+"/config", nil, &cfg)
	if cfg["scsi0"] != "local-lvm:vm-"+id+"-disk-0,size=4196M" {
		t.Errorf("config after resize: %v", cfg["scsi0"])
	}
}
