package api_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestStateVolumesListed: KubeVirt keeps a VM's EFI variables and TPM
// state in one claim (persistent-state-for-<vm>...). A storage listing
// shows it as PVE lists efidisk0 and tpmstate0, as that VM's volumes
// named as its config names them, owned by its vmid (so ?vmid= finds
// them); GET of such a volume answers, and DELETE is refused as for a
// volume in use, leaving the VM's state.
func TestStateVolumesListed(t *testing.T) {
	a := shared(t)
	node := "kv-node-3-lab-internal"
	var id, upid string
	a.OK("GET", "/cluster/nextid", nil, &id)
	a.OK("POST", "/nodes/"+node+"/qemu", url.Values{"vmid": {id}, "name": {"efi-state"}, "bios": {"ovmf"},
		"efidisk0": {"local-lvm:1,efitype=4m,pre-enrolled-keys=0"}, "tpmstate0": {"local-lvm:1,version=v2.0"}}, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create: %s", exit)
	}
	t.Cleanup(func() {
		a.Do("POST", "/nodes/"+node+"/qemu/"+id+"/status/stop", nil)
		a.Do("DELETE", "/nodes/"+node+"/qemu/"+id, nil)
	})
	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/status/start", nil, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("start: %s", exit)
	}

	// KubeVirt makes the claim on a class of its choosing once the VM runs.
	var storages []map[string]any
	a.OK("GET", "/nodes/"+node+"/storage", nil, &storages)
	want := []string{"vm-" + id + "-efidisk", "vm-" + id + "-tpmstate"}
	var storage string
	var rows []map[string]any
	deadline := time.Now().Add(10 * time.Second)
	for storage == "" {
		for _, s := range storages {
			sid := fmt.Sprint(s["storage"])
			var got []map[string]any
			a.OK("GET", "/nodes/"+node+"/storage/"+sid+"/content", url.Values{"vmid": {id}}, &got)
			if len(got) > 0 {
				storage, rows = sid, got
			}
		}
		if storage == "" && time.Now().After(deadline) {
			t.Fatalf("no storage lists a volume of VM %s", id)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var ids []string
	for _, r := range rows {
		ids = append(ids, fmt.Sprint(r["volid"]))
		if fmt.Sprint(r["vmid"]) != id || r["content"] != "images" || r["format"] != "raw" || r["size"] != float64(4<<20) {
			t.Errorf("row %v: want VM %s's 4M raw image", r, id)
		}
	}
	if got := strings.Join(ids, " "); got != storage+":"+want[0]+" "+storage+":"+want[1] {
		t.Fatalf("VM %s's volumes on %s: %s, want its efidisk0 and tpmstate0 volumes", id, storage, got)
	}
	var all []map[string]any
	a.OK("GET", "/nodes/"+node+"/storage/"+storage+"/content", nil, &all)
	for _, r := range all {
		if strings.Contains(fmt.Sprint(r["volid"]), "persistent-state-for-") {
			t.Errorf("a state claim listed under its own name: %v", r)
		}
	}

	var info map[string]any
	a.OK("GET", "/nodes/"+node+"/storage/"+storage+"/content/"+storage+":"+want[0], nil, &info)
	if info["size"] != float64(4<<20) || info["format"] != "raw" {
		t.Errorf("GET %s: %v", want[0], info)
	}
	for _, v := range []string{want[0], want[1]} {
		ans := a.Do("DELETE", "/nodes/"+node+"/storage/"+storage+"/content/"+storage+":"+v, nil)
		if ans.Code != 500 || !strings.HasPrefix(ans.Message, "volume '"+storage+":"+v+"' is in use by VM "+id+":") {
			t.Errorf("DELETE %s: %s %s", v, ans.Status, ans.Raw)
		}
	}
	ans := a.Do("DELETE", "/nodes/"+node+"/storage/"+storage+"/content/"+storage+":persistent-state-for-x", nil)
	if ans.Code != 500 || !strings.Contains(ans.Message, "is in use by its VM") {
		t.Errorf("DELETE of a state claim by its name: %s %s", ans.Status, ans.Raw)
	}
	rows = nil
	a.OK("GET", "/nodes/"+node+"/storage/"+storage+"/content", url.Values{"vmid": {id}}, &rows)
	if len(rows) != 2 {
		t.Errorf("after the refused deletes VM %s has %d volumes, want its 2", id, len(rows))
	}
}
