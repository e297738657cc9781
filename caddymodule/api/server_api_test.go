package api_test

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"testing"
)

func TestPassThroughOutsideAPI(t *testing.T) {
	a := shared(t)
	res, err := a.C.Get(a.Base + "/something")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 418 {
		t.Fatalf("non-API path must reach the next handler, got %d", res.StatusCode)
	}
}

func TestVersionAndNodes(t *testing.T) {
	a := shared(t)
	var v map[string]any
	a.OK("GET", "/version", nil, &v)
	if v["version"] != "8.4.1" || v["release"] != "8.4" || v["repoid"] == "" {
		t.Fatalf("version %v", v)
	}
	var nodes []map[string]any
	a.OK("GET", "/nodes", nil, &nodes)
	if len(nodes) != 3 {
		t.Fatalf("nodes %v", nodes)
	}
	for _, n := range nodes {
		name := n["node"].(string)
		if strings.Contains(name, ".") || n["status"] != "online" || n["type"] != "node" || n["id"] != "node/"+name {
			t.Fatalf("node row %v", n)
		}
		if _, ok := n["maxcpu"].(float64); !ok {
			t.Fatalf("maxcpu must be a number: %v", n)
		}
	}
	// ssl_fingerprint is the certificate this connection was served with,
	// as PVE writes it; bpg's nodes data source fails without the field.
	req, _ := http.NewRequest("GET", a.Base+"/api2/json/nodes", nil)
	a.Auth(req)
	res, err := a.C.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	sum := sha256.Sum256(res.TLS.PeerCertificates[0].Raw)
	want := strings.ToUpper(strings.ReplaceAll(fmt.Sprintf("% x", sum[:]), " ", ":"))
	for _, n := range nodes {
		if n["ssl_fingerprint"] != want {
			t.Fatalf("ssl_fingerprint %v, want %s", n["ssl_fingerprint"], want)
		}
	}
	var resources []map[string]any
	a.OK("GET", "/cluster/resources", url.Values{"type": {"node"}}, &resources)
	if _, ok := resources[0]["ssl_fingerprint"]; ok {
		t.Fatalf("cluster/resources rows have no fingerprint in PVE: %v", resources[0])
	}
	var st map[string]any
	a.OK("GET", "/nodes/"+nodes[0]["node"].(string)+"/status", nil, &st)
	if _, ok := st["loadavg"].([]any)[0].(string); !ok {
		t.Fatalf("loadavg must be strings: %v", st["loadavg"])
	}
	if ci := st["cpuinfo"].(map[string]any); ci["mhz"] != "2400.000" || ci["hvm"] != "1" {
		t.Fatalf("cpuinfo %v", ci)
	}
	bad := a.Do("GET", "/nodes/nope/status", nil)
	if bad.Code != 500 || !strings.Contains(bad.Message, "no such cluster node 'nope'") {
		t.Fatalf("unknown node: %s %s", bad.Status, bad.Raw)
	}
}

func TestClusterResourcesShapes(t *testing.T) {
	a := shared(t)
	var rows []map[string]json.RawMessage
	a.OK("GET", "/cluster/resources", url.Values{"type": {"vm"}}, &rows)
	if len(rows) < 3 {
		t.Fatalf("want the 3 seeded VMs, got %d", len(rows))
	}
	seen := map[string]bool{}
	for _, r := range rows {
		var typ, id string
		_ = json.Unmarshal(r["type"], &typ)
		_ = json.Unmarshal(r["id"], &id)
		if typ != "qemu" || !strings.HasPrefix(id, "qemu/") {
			t.Fatalf("row %s", r)
		}
		for _, k := range []string{"vmid", "template", "maxcpu", "maxmem", "mem", "cpu", "uptime", "netin", "disk"} {
			var n float64
			if err := json.Unmarshal(r[k], &n); err != nil {
				t.Fatalf("%s must be a number in %s", k, r)
			}
		}
		if string(r["lock"]) == `""` || string(r["lock"]) == "null" {
			t.Fatalf("lock must be absent when unlocked: %s", r)
		}
		if seen[id] {
			t.Fatalf("duplicate vmid %s", id)
		}
		seen[id] = true
	}
	if !seen["qemu/100"] || !seen["qemu/101"] {
		t.Fatalf("seeded vmids missing: %v", seen)
	}
	bad := a.Do("GET", "/cluster/resources", url.Values{"type": {"bogus"}})
	if bad.Code != 400 || bad.Errors["type"] == "" {
		t.Fatalf("bad type: %s %s", bad.Status, bad.Raw)
	}
	var nodes []map[string]any
	a.OK("GET", "/cluster/resources", url.Values{"type": {"node"}}, &nodes)
	for _, n := range nodes {
		if n["type"] != "node" {
			t.Fatalf("type=node returned %v", n)
		}
	}
}

func TestMissingVMAndErrors(t *testing.T) {
	a := shared(t)
	var nodes []map[string]any
	a.OK("GET", "/nodes", nil, &nodes)
	node := nodes[0]["node"].(string)
	ans := a.Do("GET", "/nodes/"+node+"/qemu/999999/status/current", nil)
	want := "Configuration file 'nodes/" + node + "/qemu-server/999999.conf' does not exist"
	if ans.Code != 500 || ans.Status != "500 "+want || ans.Message != want+"\n" {
		t.Fatalf("missing VM: %q %q", ans.Status, ans.Message)
	}
	ans = a.Do("GET", "/nodes/"+node+"/qemu/abc/config", nil)
	if ans.Code != 400 || ans.Errors["vmid"] == "" {
		t.Fatalf("bad vmid: %s %s", ans.Status, ans.Raw)
	}
	ans = a.Do("GET", "/nodes/"+node+"/qemu/100/frobnicate", nil)
	if ans.Code != 501 || ans.Status != "501 Method 'GET /nodes/"+node+"/qemu/100/frobnicate' not implemented" {
		t.Fatalf("unimplemented: %q %s", ans.Status, ans.Raw)
	}
	ans = a.Do("PUT", "/version", url.Values{})
	if ans.Code != 501 {
		t.Fatalf("wrong method must be 501 like pveproxy: %s", ans.Status)
	}
}

func TestNextID(t *testing.T) {
	a := shared(t)
	var id string
	a.OK("GET", "/cluster/nextid", nil, &id)
	n, err := strconv.Atoi(id)
	if err != nil || n < 100 {
		t.Fatalf("nextid %q must be a numeric string", id)
	}
	if n == 100 || n == 101 {
		t.Fatalf("nextid handed out a taken id %d", n)
	}
	ans := a.Do("GET", "/cluster/nextid", url.Values{"vmid": {"100"}})
	if ans.Code != 400 || ans.Errors["vmid"] != "VM 100 already exists\n" {
		t.Fatalf("taken vmid: %s %s", ans.Status, ans.Raw)
	}
	var free string
	a.OK("GET", "/cluster/nextid", url.Values{"vmid": {"4242"}}, &free)
	if free != "4242" {
		t.Fatalf("free vmid echo %q", free)
	}
}

func TestAuthRequiredAndLogin(t *testing.T) {
	a := shared(t)
	anon := *a
	anon.Auth = nil
	ans := anon.Do("GET", "/nodes", nil)
	if ans.Code != 401 || ans.Status != "401 No ticket" {
		t.Fatalf("anonymous: %q", ans.Status)
	}
	var login map[string]any
	anon.OK("POST", "/access/ticket", url.Values{"username": {"alice"}, "realm": {"pve"}, "password": {"s3cret"}}, &login)
	ticket, _ := login["ticket"].(string)
	csrf, _ := login["CSRFPreventionToken"].(string)
	if login["username"] != "alice@pve" || strings.Count(ticket, ":") < 4 || !strings.HasPrefix(ticket, "PVE:alice@pve:") || len(csrf) != 9+43 {
		t.Fatalf("login %v", login)
	}
	bad := anon.Do("POST", "/access/ticket", url.Values{"username": {"alice@pve"}, "password": {"wrong"}})
	if bad.Code != 401 || bad.Status != "401 authentication failure" {
		t.Fatalf("bad login: %q %s", bad.Status, bad.Raw)
	}
	withTicket := anon
	withTicket.Auth = func(r *http.Request) { r.AddCookie(&http.Cookie{Name: "PVEAuthCookie", Value: ticket}) }
	withTicket.OK("GET", "/nodes", nil, nil)
	if ans := withTicket.Do("POST", "/nodes/x/qemu", url.Values{"vmid": {"555"}}); ans.Code != 401 || !strings.Contains(ans.Status, "invalid csrf token") {
		t.Fatalf("write without CSRF: %q", ans.Status)
	}
	// Renewal: the ticket is accepted as the password.
	var renewed map[string]any
	anon.OK("POST", "/access/ticket", url.Values{"username": {"alice@pve"}, "password": {ticket}}, &renewed)
	if renewed["ticket"] == "" {
		t.Fatal("renewal failed")
	}
}

func TestStorageContent(t *testing.T) {
	a := shared(t)
	var rows []map[string]any
	a.OK("GET", "/nodes/kv-node-1-lab-internal/storage/local-lvm/content", url.Values{"vmid": {"100"}}, &rows)
	if len(rows) == 0 || rows[0]["volid"] != "local-lvm:vm-100-disk-0" || rows[0]["vmid"] != float64(100) || rows[0]["format"] != "raw" {
		t.Fatalf("content %v", rows)
	}
	var vol map[string]any
	a.OK("GET", "/nodes/kv-node-1-lab-internal/storage/local-lvm/content/local-lvm:vm-100-disk-0", nil, &vol)
	if vol["format"] != "raw" || vol["size"].(float64) <= 0 {
		t.Fatalf("volume %v", vol)
	}
	if ans := a.Do("GET", "/nodes/kv-node-1-lab-internal/storage/nope/content", nil); ans.Code != 500 || !strings.Contains(ans.Message, "does not exist") {
		t.Fatalf("unknown storage: %s", ans.Status)
	}
	// Volume ids escaped as bpg sends them: the escaped slash stays in the
	// volume segment.
	vol = nil
	a.OK("GET", "/nodes/kv-node-1-lab-internal/storage/local-lvm/content/local-lvm%3Avm-100-disk-0", nil, &vol)
	if vol["format"] != "raw" {
		t.Fatalf("escaped volume id: %v", vol)
	}
	if ans := a.Do("GET", "/nodes/kv-node-1-lab-internal/storage/local-lvm/content/local-lvm:iso%2Fnope.iso", nil); ans.Code != 500 || ans.Status != "500 volume 'local-lvm:iso/nope.iso' does not exist" {
		t.Fatalf("escaped slash in a volume id: %s", ans.Status)
	}
	if ans := a.Do("GET", "/nodes/kv-node-1-lab-internal/storage/local-lvm/content/x%2F..%2F..%2Fversion", nil); ans.Code == 200 {
		t.Fatalf("escaped dot segments must not route elsewhere: %s %s", ans.Status, ans.Raw)
	}
}

// The node's storage index filters like PVE's: bpg's datastores data
// source and Ansible rely on the server to do it.
func TestNodeStorageFilters(t *testing.T) {
	a := shared(t)
	ids := func(q url.Values) string {
		var rows []map[string]any
		a.OK("GET", "/nodes/kv-node-1-lab-internal/storage", q, &rows)
		var out []string
		for _, r := range rows {
			out = append(out, r["storage"].(string))
		}
		sort.Strings(out)
		return strings.Join(out, ",")
	}
	for _, c := range []struct {
		q    url.Values
		want string
	}{
		{nil, "ceph-rbd,local,local-lvm"},
		{url.Values{"content": {"images"}}, "ceph-rbd,local-lvm"},
		// The directory storage keeps the files.
		{url.Values{"content": {"iso"}}, "local"},
		{url.Values{"content": {"import,snippets"}}, "local"},
		{url.Values{"content": {"iso,rootdir"}}, "ceph-rbd,local,local-lvm"},
		{url.Values{"storage": {"ceph-rbd"}}, "ceph-rbd"},
		// Another node: only storages both can reach.
		{url.Values{"target": {"kv-node-2-lab-internal"}}, "ceph-rbd"},
		{url.Values{"target": {"kv-node-1-lab-internal"}}, "ceph-rbd,local,local-lvm"},
		{url.Values{"enabled": {"1"}, "content": {"images"}}, "ceph-rbd,local-lvm"},
	} {
		if got := ids(c.q); got != c.want {
			t.Errorf("storage %v = %q, want %q", c.q, got, c.want)
		}
	}
	if ans := a.Do("GET", "/nodes/kv-node-1-lab-internal/storage", url.Values{"content": {"movies"}}); ans.Code != 400 || ans.Errors["content"] != "invalid format - invalid content type 'movies'\n" {
		t.Fatalf("bad content type: %s %s", ans.Status, ans.Raw)
	}
}
