package api_test

import (
	"net/url"
	"testing"
)

// TestBadInputOnWriteEndpoints: malformed parameters on every write
// endpoint get a 400 naming the parameter, and change nothing.
func TestBadInputOnWriteEndpoints(t *testing.T) {
	a := shared(t)
	node := "kv-node-2-lab-internal"
	var before map[string]any
	a.OK("GET", "/nodes/"+node+"/qemu/101/config", nil, &before)
	var snapsBefore []any
	a.OK("GET", "/nodes/"+node+"/qemu/101/snapshot", nil, &snapsBefore)
	cases := []struct {
		method, path string
		form         url.Values
		param        string
	}{
		{"POST", "/qemu/101/clone", url.Values{"newid": {"abc"}}, "newid"},
		{"POST", "/qemu/101/clone", url.Values{}, "newid"},
		{"POST", "/qemu/101/clone", url.Values{"newid": {"7777"}, "storage": {"nowhere"}}, "storage"},
		{"POST", "/qemu/101/clone", url.Values{"newid": {"7777"}, "target": {"mars"}}, "target"},
		{"POST", "/qemu/101/clone", url.Values{"newid": {"7777"}, "name": {"bad name"}}, "name"},
		{"POST", "/qemu/101/clone", url.Values{"newid": {"7777"}, "bogus": {"1"}}, "bogus"},
		{"POST", "/qemu/101/snapshot", url.Values{"snapname": {"1starts-with-digit"}}, "snapname"},
		{"POST", "/qemu/101/snapshot", url.Values{"snapname": {"current"}}, "snapname"},
		{"POST", "/qemu/101/snapshot", url.Values{}, "snapname"},
		{"PUT", "/qemu/101/resize", url.Values{"disk": {"scsi0"}, "size": {"huge"}}, "size"},
		{"PUT", "/qemu/101/resize", url.Values{"disk": {"nope0"}, "size": {"+1G"}}, "disk"},
		{"PUT", "/qemu/101/resize", url.Values{"size": {"+1G"}}, "disk"},
		{"POST", "/qemu/101/status/start", url.Values{"timeout": {"soon"}}, "timeout"},
		{"POST", "/qemu/101/status/suspend", url.Values{"todisk": {"perhaps"}}, "todisk"},
		{"DELETE", "/qemu/101", url.Values{"purge": {"maybe"}}, "purge"},
		{"PUT", "/qemu/101/config", url.Values{"sockets": {"0"}}, "sockets"},
		{"PUT", "/qemu/101/config", url.Values{"net0": {"virtio,bridge=vmbr0,tag=5000"}}, "net0"},
		{"PUT", "/qemu/101/config", url.Values{"scsi0": {"local-lvm:vm-101-disk-9"}}, "scsi0"},
		{"PUT", "/qemu/101/config", url.Values{"sshkeys": {"not-a-key"}}, "sshkeys"},
		{"PUT", "/qemu/101/config", url.Values{"tags": {"bad tag!"}}, "tags"},
		{"GET", "/qemu/101/status/current", url.Values{}, ""},
	}
	for _, c := range cases {
		if c.param == "" {
			continue
		}
		ans := a.Do(c.method, "/nodes/"+node+c.path, c.form)
		if ans.Code != 400 || ans.Errors[c.param] == "" {
			t.Errorf("%s %s %v: want 400 naming %s, got %s %s", c.method, c.path, c.form, c.param, ans.Status, ans.Raw)
		}
	}
	// A stale digest is no malformed parameter: qemu-server's
	// assert_if_modified dies, a 500 with the text as reason.
	if ans := a.Do("PUT", "/nodes/"+node+"/qemu/101/config", url.Values{"digest": {"0000"}, "cores": {"2"}}); ans.Code != 500 ||
		ans.Status != "500 detected modified configuration - file changed by other user? Try again." {
		t.Errorf("stale digest: got %s", ans.Status)
	}
	var after map[string]any
	a.OK("GET", "/nodes/"+node+"/qemu/101/config", nil, &after)
	if after["digest"] != before["digest"] {
		t.Fatalf("config changed: %v -> %v", before, after)
	}
	var snapsAfter []any
	a.OK("GET", "/nodes/"+node+"/qemu/101/snapshot", nil, &snapsAfter)
	if len(snapsAfter) != len(snapsBefore) {
		t.Fatal("a refused snapshot was taken")
	}
	if ans := a.Do("GET", "/nodes/"+node+"/qemu/7777/config", nil); ans.Code != 500 {
		t.Fatal("a refused clone created VM 7777")
	}
}

// TestPathParametersRepeated: a parameter of the path may come again in
// the query or body with the same value, as pve-manager's HTTPServer
// allows (bpg sends node and storage with download-url); another value is
// a 400 naming it.
func TestPathParametersRepeated(t *testing.T) {
	a := shared(t)
	node := "kv-node-2-lab-internal"
	var cfg map[string]any
	a.OK("GET", "/nodes/"+node+"/qemu/101/config", url.Values{"node": {node}, "vmid": {"101"}}, &cfg)
	for _, c := range []struct {
		form  url.Values
		param string
	}{
		{url.Values{"vmid": {"102"}}, "vmid"},
		{url.Values{"node": {"kv-node-1-lab-internal"}}, "node"},
	} {
		ans := a.Do("GET", "/nodes/"+node+"/qemu/101/config", c.form)
		if ans.Code != 400 || ans.Errors[c.param] != "duplicate parameter (already defined in URI) with conflicting values!\n" {
			t.Errorf("%v: want 400 naming %s, got %s %s", c.form, c.param, ans.Status, ans.Raw)
		}
	}
}
