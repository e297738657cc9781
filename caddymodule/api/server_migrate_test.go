package api_test

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/caddymodule/api"
	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
)

// newMigrateVM creates a VM on node with a disk of 1G on storage (and
// more settings from kv), and returns its vmid.
func newMigrateVM(t *testing.T, a *testcaddy.PVE, node, name, storage string, kv ...string) string {
	t.Helper()
	var id, upid string
	a.OK("GET", "/cluster/nextid", nil, &id)
	form := url.Values{"vmid": {id}, "name": {name}, "memory": {"512"}, "net0": {"virtio,bridge=vmbr0"}, "scsi0": {storage + ":1"}}
	for i := 0; i+1 < len(kv); i += 2 {
		form.Set(kv[i], kv[i+1])
	}
	a.OK("POST", "/nodes/"+node+"/qemu", form, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create %s: %s", name, exit)
	}
	return id
}

func nodeNames(t *testing.T, a *testcaddy.PVE) []string {
	t.Helper()
	var nodes []map[string]any
	a.OK("GET", "/nodes", nil, &nodes)
	var out []string
	for _, n := range nodes {
		out = append(out, n["node"].(string))
	}
	slices.Sort(out)
	return out
}

func taskLog(t *testing.T, a *testcaddy.PVE, node, upid string) string {
	t.Helper()
	var lines []map[string]any
	a.OK("GET", "/nodes/"+node+"/tasks/"+upid+"/log", nil, &lines)
	var out []string
	for _, l := range lines {
		out = append(out, fmt.Sprint(l["t"]))
	}
	return strings.Join(out, "\n")
}

func TestMigrateStoppedVMMovesItsNode(t *testing.T) {
	a := shared(t)
	nodes := nodeNames(t, a)
	src, dst := nodes[0], nodes[2]
	id := newMigrateVM(t, a, src, "migrate-offline", "local-lvm")

	var pre map[string]any
	a.OK("GET", "/nodes/"+src+"/qemu/"+id+"/migrate", url.Values{"target": {dst}}, &pre)
	if pre["running"] != float64(0) || fmt.Sprint(pre["allowed_nodes"]) != fmt.Sprint([]any{nodes[1], nodes[2]}) ||
		fmt.Sprint(pre["not_allowed_nodes"]) != "map[]" || fmt.Sprint(pre["local_resources"]) != "[]" {
		t.Fatalf("precondition %v", pre)
	}
	disks, _ := pre["local_disks"].([]any)
	if len(disks) != 1 {
		t.Fatalf("local disks %v", pre["local_disks"])
	}
	if d := disks[0].(map[string]any); d["volid"] != "local-lvm:vm-"+id+"-disk-0" || d["size"] != float64(1<<30) ||
		d["drivename"] != "scsi0" || d["is_attached"] != float64(1) || d["cdrom"] != float64(0) {
		t.Fatalf("local disk %v", d)
	}

	// online=1 on a stopped VM is an offline migration, as on PVE.
	var upid string
	a.OK("POST", "/nodes/"+src+"/qemu/"+id+"/migrate", url.Values{"target": {dst}, "online": {"1"}, "with-local-disks": {"1"}}, &upid)
	if !strings.HasPrefix(upid, "UPID:"+src+":") || !strings.Contains(upid, ":qmigrate:"+id+":root@pam!ci:") {
		t.Fatalf("UPID %q", upid)
	}
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("migrate task: %s", exit)
	}
	if log := taskLog(t, a, src, upid); !strings.Contains(log, "starting migration of VM "+id+" to node '"+dst+"' (192.0.2.13)") ||
		!strings.Contains(log, "migration finished successfully") || !strings.HasSuffix(log, "TASK OK") {
		t.Fatalf("task log:\n%s", log)
	}
	if got := nodeOf(t, a, id); got != dst {
		t.Fatalf("/cluster/resources shows VM %s on %s, want %s", id, got, dst)
	}
	if st := a.Status(dst, id); st["status"] != "stopped" || st["name"] != "migrate-offline" {
		t.Fatalf("status on the target %v", st)
	}
	if gone := a.Do("GET", "/nodes/"+src+"/qemu/"+id+"/status/current", nil); gone.Code != 500 ||
		!strings.Contains(gone.Message, fmt.Sprintf("Configuration file 'nodes/%s/qemu-server/%s.conf' does not exist", src, id)) {
		t.Fatalf("old path: %s", gone.Status)
	}
	var rows []map[string]any
	a.OK("GET", "/nodes/"+dst+"/qemu", nil, &rows)
	found := false
	for _, r := range rows {
		found = found || fmt.Sprintf("%.0f", r["vmid"]) == id
	}
	if !found {
		t.Fatalf("VM %s not listed on %s", id, dst)
	}
	// It starts and stops under its new node.
	a.OK("POST", "/nodes/"+dst+"/qemu/"+id+"/status/start", nil, &upid)
	if exit := a.WaitTask(upid); exit != "OK" || !strings.HasPrefix(upid, "UPID:"+dst+":") {
		t.Fatalf("start on the target: %s %s", upid, exit)
	}
	a.OK("POST", "/nodes/"+dst+"/qemu/"+id+"/status/stop", nil, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("stop: %s", exit)
	}
}

func TestMigrateRunningVMLive(t *testing.T) {
	a := shared(t)
	nodes := nodeNames(t, a)
	src := nodes[1]
	id := newMigrateVM(t, a, src, "migrate-live", "ceph-rbd")
	var upid string
	a.OK("POST", "/nodes/"+src+"/qemu/"+id+"/status/start", nil, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("start: %s", exit)
	}
	dst := nodes[0]
	var pre map[string]any
	a.OK("GET", "/nodes/"+src+"/qemu/"+id+"/migrate", nil, &pre)
	if pre["running"] != float64(1) {
		t.Fatalf("precondition of a running VM: %v", pre)
	}

	ans := a.Do("POST", "/nodes/"+src+"/qemu/"+id+"/migrate", url.Values{"target": {dst}})
	if ans.Code != 500 || ans.Status != "500 can't migrate running VM without --online" {
		t.Fatalf("without online: %s", ans.Status)
	}

	// Telmate's call.
	a.OK("POST", "/nodes/"+src+"/qemu/"+id+"/migrate", url.Values{"target": {dst}, "online": {"1"}, "with-local-disks": {"1"}}, &upid)
	if !strings.Contains(upid, ":qmigrate:"+id+":") {
		t.Fatalf("UPID %q", upid)
	}
	// The migrate lock holds from the request on, as PVE's does.
	if again := a.Do("POST", "/nodes/"+src+"/qemu/"+id+"/migrate", url.Values{"target": {nodes[2]}, "online": {"1"}}); again.Code != 500 || again.Status != "500 VM is locked (migrate)" {
		t.Fatalf("a second migrate at once: %s", again.Status)
	}
	// While KubeVirt migrates, the VM runs under its old node, locked.
	sawLock := false
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var ts map[string]any
		a.OK("GET", "/nodes/"+src+"/tasks/"+upid+"/status", nil, &ts)
		if ts["status"] == "stopped" {
			break
		}
		if st := a.Do("GET", "/nodes/"+src+"/qemu/"+id+"/status/current", nil); st.Code == 200 && strings.Contains(string(st.Data), `"lock":"migrate"`) {
			sawLock = true
			if again := a.Do("POST", "/nodes/"+src+"/qemu/"+id+"/migrate", url.Values{"target": {dst}, "online": {"1"}}); again.Code != 500 || !strings.HasPrefix(again.Message, "VM is locked (migrate)") {
				t.Fatalf("second migrate during the first: %s", again.Status)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("live migration: %s\n%s", exit, taskLog(t, a, src, upid))
	}
	if !sawLock {
		t.Errorf("the VM never showed lock migrate during the migration")
	}
	if log := taskLog(t, a, src, upid); !strings.Contains(log, "live migration default/pve-migrate-"+id+"-") || !strings.Contains(log, "migration finished successfully") {
		t.Fatalf("task log:\n%s", log)
	}
	if got := nodeOf(t, a, id); got != dst {
		t.Fatalf("/cluster/resources shows VM %s on %s, want %s", id, got, dst)
	}
	st := a.Status(dst, id)
	if st["status"] != "running" || st["qmpstatus"] != "running" {
		t.Fatalf("after the live migration: %v", st)
	}
	if _, locked := st["lock"]; locked {
		t.Fatalf("still locked: %v", st)
	}
	a.OK("POST", "/nodes/"+dst+"/qemu/"+id+"/status/stop", nil, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("stop: %s", exit)
	}
}

func TestMigrateRefusals(t *testing.T) {
	a := shared(t)
	nodes := nodeNames(t, a)
	src := nodes[0]
	id := newMigrateVM(t, a, src, "migrate-refused", "local-lvm")
	path := "/nodes/" + src + "/qemu/" + id + "/migrate"
	for _, tc := range []struct {
		name    string
		form    url.Values
		code    int
		message string
		field   string
	}{
		{"target missing", url.Values{}, 400, "", "target"},
		{"target is local", url.Values{"target": {src}}, 400, "target is local node.", "target"},
		{"unknown target", url.Values{"target": {"nope"}}, 500, "no such cluster node 'nope'", ""},
		{"bad target", url.Values{"target": {"a_b"}}, 400, "", "target"},
		{"unknown parameter", url.Values{"target": {nodes[1]}, "speed": {"1"}}, 400, "", "speed"},
		{"bad boolean", url.Values{"target": {nodes[1]}, "online": {"maybe"}}, 400, "", "online"},
		{"bad migration_type", url.Values{"target": {nodes[1]}, "migration_type": {"fast"}}, 400, "", "migration_type"},
		{"bad network", url.Values{"target": {nodes[1]}, "migration_network": {"10.0.0.0"}}, 400, "", "migration_network"},
		{"negative bwlimit", url.Values{"target": {nodes[1]}, "bwlimit": {"-1"}}, 400, "", "bwlimit"},
		{"bad storage map", url.Values{"target": {nodes[1]}, "targetstorage": {"1,local-lvm"}}, 400, "", "targetstorage"},
		{"force needs root@pam, not its token", url.Values{"target": {nodes[1]}, "force": {"1"}}, 400, "Only root may use this option.", "force"},
		{"migration_network needs root@pam", url.Values{"target": {nodes[1]}, "migration_network": {"10.0.0.0/24"}}, 400, "Only root may use this option.", "migration_network"},
		{"another storage", url.Values{"target": {nodes[1]}, "targetstorage": {"ceph-rbd"}}, 500, "can't migrate 'local-lvm:vm-" + id + "-disk-0' to storage 'ceph-rbd'", ""},
		{"missing storage", url.Values{"target": {nodes[1]}, "targetstorage": {"local-lvm:nfs"}}, 500, "storage 'nfs' does not exist", ""},
	} {
		ans := a.Do("POST", path, tc.form)
		if ans.Code != tc.code || (tc.message != "" && !strings.Contains(ans.Message+ans.Errors[tc.field], tc.message)) ||
			(tc.field != "" && ans.Errors[tc.field] == "") {
			t.Errorf("%s: %s %q %v", tc.name, ans.Status, ans.Message, ans.Errors)
		}
	}
	if got := nodeOf(t, a, id); got != src {
		t.Fatalf("a refused migration moved VM %s to %s", id, got)
	}
	// Mapping each storage to itself is fine.
	var upid string
	a.OK("POST", path, url.Values{"target": {nodes[1]}, "targetstorage": {"local-lvm:local-lvm"}, "bwlimit": {"1000"}}, &upid)
	if exit := a.WaitTask(upid); exit != "OK" || !strings.Contains(taskLog(t, a, src, upid), "bwlimit 1000 KiB/s ignored") {
		t.Fatalf("identity storage map: %s", exit)
	}
	if gone := a.Do("GET", path, nil); gone.Code != 500 || !strings.Contains(gone.Message, "does not exist") {
		t.Fatalf("precondition on the old node: %s", gone.Status)
	}
}

func TestMigrateNeedsVMMigrate(t *testing.T) {
	admin := asIdentity(t, "admin@pve")
	node := nodeOf(t, admin, "100")
	a := asIdentity(t, "auditor@pve")
	denied(t, a, "POST", "/nodes/"+node+"/qemu/100/migrate", url.Values{"target": {"elsewhere"}}, "Permission check failed (/vms/100, VM.Migrate)")
	denied(t, a, "GET", "/nodes/"+node+"/qemu/100/migrate", nil, "Permission check failed (/vms/100, VM.Migrate)")
	v := asIdentity(t, "vmuser@pve")
	denied(t, v, "POST", "/nodes/"+nodeOf(t, admin, "101")+"/qemu/101/migrate", url.Values{"target": {"elsewhere"}}, "Permission check failed (/vms/101, VM.Migrate)")
}

// KubeVirt live-migrates only guests whose claims are all ReadWriteMany:
// a disk on local storage, with-local-disks or not, and an ISO image on
// it are refused in the task as PVE's scan of local volumes words it,
// before KubeVirt is asked.
func TestMigrateRefusesUnsharedClaims(t *testing.T) {
	a := shared(t)
	srv := mirror(t)
	defer api.AllowLoopbackURLs()()
	nodes := nodeNames(t, a)
	src := nodes[2]
	storage := "/nodes/" + src + "/storage/local"
	var upid string
	a.OK("POST", storage+"/download-url", url.Values{"content": {"iso"}, "filename": {"migrate.iso"}, "url": {srv.URL + "/images/tiny.iso"}}, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("download: %s", exit)
	}
	t.Cleanup(func() { a.Do("DELETE", storage+"/content/local:iso/migrate.iso", nil) })
	local := newMigrateVM(t, a, src, "migrate-local", "local-lvm")
	iso := newMigrateVM(t, a, src, "migrate-iso", "ceph-rbd", "ide2", "local:iso/migrate.iso,media=cdrom")
	for _, c := range []struct {
		id   string
		form url.Values
		line string
	}{
		{local, url.Values{"online": {"1"}}, "can't migrate local disk 'local-lvm:vm-" + local + "-disk-0': can't live migrate attached local disks without with-local-disks option"},
		{local, url.Values{"online": {"1"}, "with-local-disks": {"1"}}, "can't migrate local disk 'local-lvm:vm-" + local + "-disk-0': claim vm-" + local +
			"-disk-0 is not shared (RWO): KubeVirt live-migrates only guests whose claims are all ReadWriteMany"},
		{iso, url.Values{"online": {"1"}}, "can't migrate local disk 'local:iso/migrate.iso': local cdrom image - claim "},
	} {
		cur := nodeOf(t, a, c.id)
		if st := a.Status(cur, c.id); st["status"] != "running" {
			a.OK("POST", "/nodes/"+cur+"/qemu/"+c.id+"/status/start", nil, &upid)
			if exit := a.WaitTask(upid); exit != "OK" {
				t.Fatalf("start %s: %s", c.id, exit)
			}
		}
		// The scheduler may have placed the instance on another node than
		// the VM's: a migration there only moves the VM's node.
		refused := false
		for _, dst := range nodes {
			if dst == cur || refused {
				continue
			}
			c.form.Set("target", dst)
			a.OK("POST", "/nodes/"+cur+"/qemu/"+c.id+"/migrate", c.form, &upid)
			exit := a.WaitTask(upid)
			log := taskLog(t, a, cur, upid)
			if strings.Contains(log, "the instance already runs on node") {
				cur = dst
				continue
			}
			refused = true
			if exit != "migration aborted: can't migrate VM - check log" || !strings.Contains(log, "\n"+c.line) ||
				(!strings.Contains(c.line, "with-local-disks option") && !strings.Contains(log, "is not shared (RWO): KubeVirt live-migrates only guests whose claims are all ReadWriteMany\n")) ||
				!strings.HasSuffix(log, "ERROR: migration aborted (duration 00:00:00): can't migrate VM - check log\nTASK ERROR: migration aborted: can't migrate VM - check log") {
				t.Errorf("%s %v: %s\n%s", c.id, c.form, exit, log)
			}
		}
		if !refused {
			t.Errorf("%s %v: no migration tried", c.id, c.form)
		}
		if got := nodeOf(t, a, c.id); got != cur {
			t.Errorf("a refused migration moved VM %s to %s", c.id, got)
		}
	}
}
