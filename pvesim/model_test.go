package pvesim

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testutil"
)

// The behaviours below are PVE's, each checked against its source (see
// the comments in ha.go, tasks.go, ops.go, access.go).

func simWith(t *testing.T, opts Options, specs ...GuestSpec) (*Sim, *proxmox.Client) {
	t.Helper()
	if opts.TaskDelay == 0 {
		opts.TaskDelay = 20 * time.Millisecond
	}
	if opts.Nodes == nil {
		opts.Nodes = []string{"pve1", "pve2"}
	}
	s := New(opts)
	for i, sp := range specs {
		if sp.IP == "" {
			sp.IP = fmt.Sprintf("127.0.0.%d", 70+i)
		}
		if sp.Port == 0 {
			sp.Port = testutil.FreePort(t)
		}
		if err := s.AddGuest(sp); err != nil {
			t.Fatal(err)
		}
	}
	url, err := s.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, proxmox.NewClient(url+"/api2/json", proxmox.WithAPIToken(s.TokenID(), s.TokenSecret()), proxmox.WithTimeout(5*time.Second))
}

// post runs a power action and waits for its task; it returns the task's
// UPID type and its error.
func post(t *testing.T, c *proxmox.Client, node, kind string, vmid int, action string, params map[string]any) (string, error) {
	t.Helper()
	var upid proxmox.UPID
	if err := c.Post(context.Background(), fmt.Sprintf("/nodes/%s/%s/%d/status/%s", node, kind, vmid, action), params, &upid); err != nil {
		return "", err
	}
	task := proxmox.NewTask(upid, c)
	return strings.Split(string(upid), ":")[5], task.Wait(context.Background(), 5*time.Millisecond, 5*time.Second)
}

type status struct {
	Status    string `json:"status"`
	QMPStatus string `json:"qmpstatus"`
	Lock      string `json:"lock"`
	HA        struct {
		Managed int    `json:"managed"`
		State   string `json:"state"`
	} `json:"ha"`
}

func current(t *testing.T, c *proxmox.Client, node, kind string, vmid int) (status, error) {
	t.Helper()
	var st status
	err := c.Get(context.Background(), fmt.Sprintf("/nodes/%s/%s/%d/status/current", node, kind, vmid), &st)
	return st, err
}

func rows(t *testing.T, c *proxmox.Client) []map[string]any {
	t.Helper()
	var rs []map[string]any
	if err := c.Get(context.Background(), "/cluster/resources?type=vm", &rs); err != nil {
		t.Fatal(err)
	}
	return rs
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, 5*time.Second, what, cond)
}

// HA start and stop tasks only ask HA: they end OK while the guest has
// not changed; HA acts a round later.
func TestHARequestOnlyTasks(t *testing.T) {
	s, c := simWith(t, Options{HADelay: 200 * time.Millisecond}, GuestSpec{VMID: 100, HA: true})
	typ, err := post(t, c, "pve1", "lxc", 100, "start", nil)
	if err != nil || typ != "hastart" {
		t.Fatalf("start: %s %v", typ, err)
	}
	if s.Status(100) != "stopped" {
		t.Fatal("HA start task ended after the start itself")
	}
	if st, _ := current(t, c, "pve1", "lxc", 100); st.HA.Managed != 1 || st.HA.State != "request_start" {
		t.Fatalf("ha %+v", st.HA)
	}
	waitUntil(t, "HA start", func() bool { return s.Status(100) == "running" })
	if s.HAState(100) != "started" {
		t.Fatal(s.HAState(100))
	}
	typ, err = post(t, c, "pve1", "lxc", 100, "shutdown", map[string]any{"timeout": 10, "forceStop": true})
	if err != nil || typ != "hastop" || s.Status(100) != "running" {
		t.Fatalf("shutdown: %s %v %s", typ, err, s.Status(100))
	}
	waitUntil(t, "HA stop", func() bool { return s.Status(100) == "stopped" && s.HAState(100) == "stopped" })
}

// HA shuts containers down without forceStop: one that outlives the
// timeout stays running and the service goes to error, where every
// request is a no-op that still ends OK. VMs are forced. A hard stop
// (timeout 0) always stops.
func TestHAShutdownTimeoutAndErrorState(t *testing.T) {
	s, c := simWith(t, Options{HADelay: 30 * time.Millisecond},
		GuestSpec{VMID: 100, HA: true, Running: true, ShutdownDelay: 3 * time.Second},
		GuestSpec{VMID: 200, Kind: "qemu", HA: true, Running: true, ShutdownDelay: 3 * time.Second},
		GuestSpec{VMID: 101, HA: true, Running: true, ShutdownDelay: 3 * time.Second},
		GuestSpec{VMID: 102, HA: true})
	if _, err := post(t, c, "pve1", "lxc", 100, "shutdown", map[string]any{"timeout": 1, "forceStop": true}); err != nil {
		t.Fatal(err)
	}
	if _, err := post(t, c, "pve1", "qemu", 200, "shutdown", map[string]any{"timeout": 1, "forceStop": true}); err != nil {
		t.Fatal(err)
	}
	if _, err := post(t, c, "pve1", "lxc", 101, "stop", nil); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "HA error", func() bool { return s.HAState(100) == "error" })
	if s.Status(100) != "running" {
		t.Fatal("container stopped without forceStop")
	}
	waitUntil(t, "VM forced off", func() bool { return s.Status(200) == "stopped" && s.HAState(200) == "stopped" })
	waitUntil(t, "hard stop", func() bool { return s.Status(101) == "stopped" && s.HAState(101) == "stopped" })
	if _, err := post(t, c, "pve1", "lxc", 100, "stop", nil); err != nil {
		t.Fatalf("request in error: %v", err)
	}
	// HA has gone through the rounds that request would take: a start
	// asked after it (a round, then the start) is done.
	if _, err := post(t, c, "pve1", "lxc", 102, "start", nil); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the later start", func() bool { return s.Status(102) == "running" })
	if s.Status(100) != "running" || s.HAState(100) != "error" {
		t.Fatal("a request left the error state")
	}
}

// With rebalance-on-start, HA starts the guest on another node: the
// config moves and the old node answers "does not exist".
func TestHAStartOnAnotherNode(t *testing.T) {
	s, c := simWith(t, Options{HADelay: 30 * time.Millisecond}, GuestSpec{VMID: 100, HA: true})
	s.SetHAStartNode(100, "pve2")
	if _, err := post(t, c, "pve1", "lxc", 100, "start", nil); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "start on pve2", func() bool { return s.Status(100) == "running" })
	if s.Node(100) != "pve2" {
		t.Fatal(s.Node(100))
	}
	if _, err := current(t, c, "pve1", "lxc", 100); !proxmox.IsNotFound(err) {
		t.Fatalf("old node: %v", err)
	}
	if st, err := current(t, c, "pve2", "lxc", 100); err != nil || st.Status != "running" {
		t.Fatalf("new node: %+v %v", st, err)
	}
	s.SetHAState(100, "ignored")
	if typ, err := post(t, c, "pve2", "lxc", 100, "stop", nil); err != nil || typ != "vzstop" {
		t.Fatalf("ignored resources are managed directly: %s %v", typ, err)
	}
	for _, r := range rows(t, c) {
		if r["hastate"] != "ignored" {
			t.Fatalf("row %v", r)
		}
	}
}

// check_lock: locked guests' start, stop and shutdown tasks fail with
// PVE's text; mounted lets a container start; the lock is in every row.
func TestLocks(t *testing.T) {
	s, c := simWith(t, Options{}, GuestSpec{VMID: 100}, GuestSpec{VMID: 101, Running: true}, GuestSpec{VMID: 200, Kind: "qemu"})
	s.SetLock(100, "backup")
	if _, err := post(t, c, "pve1", "lxc", 100, "start", nil); err == nil || !strings.Contains(err.Error(), "CT is locked (backup)") {
		t.Fatalf("locked start: %v", err)
	}
	s.SetLock(101, "snapshot")
	if _, err := post(t, c, "pve1", "lxc", 101, "shutdown", nil); err == nil || !strings.Contains(err.Error(), "CT is locked (snapshot)") {
		t.Fatalf("locked shutdown: %v", err)
	}
	if r := rows(t, c); r[0]["lock"] != "backup" || r[1]["lock"] != "snapshot" {
		t.Fatalf("rows %v", r)
	}
	s.SetLock(100, "mounted")
	if _, err := post(t, c, "pve1", "lxc", 100, "start", nil); err != nil || s.Status(100) != "running" {
		t.Fatalf("mounted start: %v", err)
	}
	s.SetLock(200, "migrate")
	if _, err := post(t, c, "pve1", "qemu", 200, "start", nil); err == nil || !strings.Contains(err.Error(), "VM is locked (migrate)") {
		t.Fatalf("VM start: %v", err)
	}
}

// vzdump of a stopped VM runs it in prelaunch under the backup lock; a
// start resumes it in that QEMU and it keeps running after the backup.
func TestBackupPrelaunch(t *testing.T) {
	s, c := simWith(t, Options{}, GuestSpec{VMID: 200, Kind: "qemu"}, GuestSpec{VMID: 201, Kind: "qemu"})
	s.BeginBackup(200)
	s.BeginBackup(201)
	st, err := current(t, c, "pve1", "qemu", 200)
	if err != nil || st.Status != "running" || st.QMPStatus != "prelaunch" || st.Lock != "backup" || s.Serving(200) {
		t.Fatalf("prelaunch: %+v %v", st, err)
	}
	if _, err := post(t, c, "pve1", "qemu", 200, "start", nil); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "resumed VM serving", func() bool { return s.Serving(200) })
	s.EndBackup(200)
	s.EndBackup(201)
	if s.Status(200) != "running" || s.Status(201) != "stopped" || s.Lock(200) != "" {
		t.Fatalf("after backup: %s %s", s.Status(200), s.Status(201))
	}
}

// A stalled pvestatd: rows of the node come with status unknown and no
// name or template flag, lock and hastate still there.
func TestStaleNodeRows(t *testing.T) {
	s, c := simWith(t, Options{}, GuestSpec{VMID: 100, Name: "web", HA: true}, GuestSpec{VMID: 200, Node: "pve2", Template: true})
	s.SetLock(100, "backup")
	s.SetNodeStale("pve1", true)
	r := rows(t, c)
	if r[0]["status"] != "unknown" || r[0]["name"] != nil || r[0]["template"] != nil || r[0]["lock"] != "backup" || r[0]["hastate"] != "stopped" {
		t.Fatalf("stale row %v", r[0])
	}
	if r[1]["template"] != float64(1) || r[1]["name"] == nil {
		t.Fatalf("template row %v", r[1])
	}
}

func TestTemplateAndSuspend(t *testing.T) {
	s, c := simWith(t, Options{}, GuestSpec{VMID: 100, Template: true}, GuestSpec{VMID: 200, Kind: "qemu", Template: true},
		GuestSpec{VMID: 101, Running: true})
	if _, err := post(t, c, "pve1", "lxc", 100, "start", nil); err == nil || !strings.Contains(err.Error(), "you can't start a CT if it's a template") {
		t.Fatalf("CT template: %v", err)
	}
	if _, err := post(t, c, "pve1", "qemu", 200, "start", nil); err == nil || !strings.Contains(err.Error(), "you can't start a vm if it's a template") {
		t.Fatalf("VM template: %v", err)
	}
	// LXC suspend is lxc-checkpoint: without criu the task fails and the
	// container runs on.
	if _, err := post(t, c, "pve1", "lxc", 101, "suspend", nil); err == nil || !strings.Contains(err.Error(), "lxc-checkpoint -n 101 -s") || s.Status(101) != "running" {
		t.Fatalf("suspend without criu: %v", err)
	}
	s2, c2 := simWith(t, Options{CRIU: true}, GuestSpec{VMID: 101, Running: true, IP: "127.0.0.79"})
	if _, err := post(t, c2, "pve1", "lxc", 101, "suspend", nil); err != nil || s2.Status(101) != "stopped" {
		t.Fatalf("checkpoint: %v %s", err, s2.Status(101))
	}
	if st, _ := current(t, c2, "pve1", "lxc", 101); st.Lock != "" {
		t.Fatalf("checkpointed CT has a lock: %+v", st)
	}
	if _, err := post(t, c2, "pve1", "lxc", 101, "resume", nil); err != nil || s2.Status(101) != "running" {
		t.Fatalf("restore: %v", err)
	}
}

// Privileges: the answers PVE 8 and 9 give a token without them.
func TestPrivileges(t *testing.T) {
	for _, v := range []int{8, 9} {
		s, c := simWith(t, Options{Version: v}, GuestSpec{VMID: 200, Kind: "qemu", Running: true, IP: fmt.Sprintf("127.0.0.%d", 80+v)}, GuestSpec{VMID: 300, IP: fmt.Sprintf("127.0.0.%d", 90+v)})
		s.SetPrivileges("/vms/200", "VM.Audit", "VM.PowerMgmt")
		_, err := c.NodeRef("pve1").VirtualMachineRef(200).AgentGetNetworkIFaces(context.Background())
		want := "Permission check failed (/vms/200, VM.Monitor)"
		if v == 9 {
			want = "Permission check failed (/vms/200, VM.GuestAgent.Audit|VM.GuestAgent.Unrestricted)"
		}
		if !proxmox.IsNotAuthorized(err) || !strings.Contains(err.Error(), want) {
			t.Fatalf("PVE %d agent: %v", v, err)
		}
		if _, err := c.Cluster(context.Background()); err != nil {
			t.Fatalf("go-proxmox hides the 403 of /cluster/status: %v", err)
		}
		var cs []map[string]any
		if err := c.Get(context.Background(), "/cluster/status", &cs); !strings.Contains(fmt.Sprint(err), "Permission check failed (/, Sys.Audit)") {
			t.Fatalf("cluster status: %v", err)
		}
		if r := rows(t, c); len(r) != 1 || r[0]["vmid"] != float64(200) {
			t.Fatalf("rows without VM.Audit: %v", r)
		}
		if _, err := current(t, c, "pve1", "lxc", 300); !strings.Contains(fmt.Sprint(err), "Permission check failed (/vms/300, VM.Audit)") {
			t.Fatalf("status without VM.Audit: %v", err)
		}
		s.SetPrivileges("/vms", s.agentPrivs()[0])
		if _, err := c.NodeRef("pve1").VirtualMachineRef(200).AgentGetNetworkIFaces(context.Background()); err != nil {
			t.Fatalf("granted: %v", err)
		}
	}
}

// Interfaces: current PVE's format, a lease that comes later, and
// interfaces the config does not know; cloud-init's ipconfig0.
func TestGuestNetwork(t *testing.T) {
	s, c := simWith(t, Options{},
		GuestSpec{VMID: 100, Running: true, LeaseDelay: time.Hour, ExtraIfaces: []Iface{{Name: "docker0", MAC: "02:42:ac:11:00:01", IP: "127.0.0.99"}}},
		GuestSpec{VMID: 200, Kind: "qemu", NoAgent: true, CloudInit: true, IP: "::1"})
	var ifs []map[string]any
	if err := c.Get(context.Background(), "/nodes/pve1/lxc/100/interfaces", &ifs); err != nil {
		t.Fatal(err)
	}
	if len(ifs) != 3 || ifs[1]["name"] != "eth0" || ifs[1]["inet"] != nil || !strings.HasPrefix(fmt.Sprint(ifs[1]["inet6"]), "fe80::") ||
		ifs[2]["inet"] != "127.0.0.99/16" || ifs[2]["hardware-address"] != "02:42:ac:11:00:01" {
		t.Fatalf("interfaces %v", ifs)
	}
	var cfg map[string]any
	if err := c.Get(context.Background(), "/nodes/pve1/qemu/200/config", &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg["ipconfig0"] != "ip6=::1/128,gw6=fe80::1" || cfg["agent"] != nil {
		t.Fatalf("config %v", cfg)
	}
	_ = s
}

// Tags come with /cluster/resources as PVE stores them: lower case,
// sorted, joined with ';' (get_unique_tags); the guest's config has them
// too, and a stalled node's rows keep them (they come from the configs).
func TestTagsInRows(t *testing.T) {
	s, c := simWith(t, Options{}, GuestSpec{VMID: 100, Tags: []string{"Caddy-Wake", "caddy-port-8080"}}, GuestSpec{VMID: 101})
	tags := map[float64]any{}
	for _, r := range rows(t, c) {
		tags[r["vmid"].(float64)] = r["tags"]
	}
	if tags[100] != "caddy-port-8080;caddy-wake" || tags[101] != nil {
		t.Fatalf("tags %v", tags)
	}
	s.SetTags(101, "web")
	s.SetNodeStale("pve1", true)
	for _, r := range rows(t, c) {
		if r["vmid"].(float64) == 101 && (r["tags"] != "web" || r["status"] != "unknown") {
			t.Fatalf("stale row %v", r)
		}
	}
	var cfg map[string]any
	if err := c.Get(context.Background(), "/nodes/pve1/lxc/100/config", &cfg); err != nil || cfg["tags"] != "caddy-port-8080;caddy-wake" {
		t.Fatalf("config %v %v", cfg, err)
	}
	if err := s.AddGuest(GuestSpec{VMID: 102, Tags: []string{"a b"}}); err == nil {
		t.Fatal("bad tag accepted")
	}
}

// A powered-off node: its guests are off, its row says offline, its
// guests' rows unknown (tags kept), and calls proxied to it fail with
// pveproxy's 595. PVE's wakeonlan runs on the node asked, needs the
// target's wakeonlan config and Sys.PowerMgmt, and the node joins after
// booting; a magic packet from elsewhere on the LAN wakes it too.
func TestNodePowerAndWakeOnLAN(t *testing.T) {
	s, c := simWith(t, Options{NodeBootDelay: 50 * time.Millisecond},
		GuestSpec{VMID: 100, Node: "pve2", Running: true, Tags: []string{"caddy-wake"}})
	if err := s.PowerOffNode("pve2"); err != nil {
		t.Fatal(err)
	}
	if s.Status(100) != "stopped" || s.NodeOnline("pve2") {
		t.Fatal("node off, guest still running")
	}
	var nodes []map[string]any
	if err := c.Get(context.Background(), "/cluster/resources?type=node", &nodes); err != nil {
		t.Fatal(err)
	}
	if nodes[1]["node"] != "pve2" || nodes[1]["status"] != "offline" || nodes[0]["status"] != "online" {
		t.Fatalf("node rows %v", nodes)
	}
	if r := rows(t, c)[0]; r["status"] != "unknown" || r["name"] != nil || r["tags"] != "caddy-wake" {
		t.Fatalf("guest row %v", r)
	}
	_, err := current(t, c, "pve2", "lxc", 100)
	if err == nil || !strings.Contains(err.Error(), "595") {
		t.Fatalf("status of a guest on an offline node: %v", err)
	}
	wake := func(node string) (string, error) {
		var mac string
		err := c.Post(context.Background(), "/nodes/"+node+"/wakeonlan", nil, &mac)
		return mac, err
	}
	if _, err := wake("pve2"); err == nil || !strings.Contains(err.Error(), "No wake on LAN MAC address defined for 'pve2'!") {
		t.Fatalf("without config: %v", err)
	}
	if _, err := wake("pve1"); err == nil || !strings.Contains(err.Error(), "'pve1' is local node, cannot wake my self!") {
		t.Fatalf("local node: %v", err)
	}
	s.SetNodeWakeOnLAN("pve2", s.NodeMAC("pve2"))
	s.SetPrivileges("/vms", "VM.Audit")
	if _, err := wake("pve2"); err == nil || !strings.Contains(err.Error(), "Permission check failed (/nodes/pve2, Sys.PowerMgmt)") {
		t.Fatalf("without Sys.PowerMgmt: %v", err)
	}
	s.SetPrivileges("/nodes", "Sys.PowerMgmt")
	if mac, err := wake("pve2"); err != nil || mac != s.NodeMAC("pve2") {
		t.Fatalf("wakeonlan: %q %v", mac, err)
	}
	waitUntil(t, "pve2 joins", func() bool { return s.NodeOnline("pve2") })
	if st, err := current(t, c, "pve2", "lxc", 100); err != nil || st.Status != "stopped" {
		t.Fatalf("after the join: %+v %v", st, err)
	}
	// A magic packet sent to the LAN.
	if err := s.PowerOffNode("pve2"); err != nil {
		t.Fatal(err)
	}
	addr, err := s.ListenWOL("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hw, _ := net.ParseMAC(s.NodeMAC("pve2"))
	pkt := append([]byte{}, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	for i := 0; i < 16; i++ {
		pkt = append(pkt, hw...)
	}
	if _, err := conn.Write(pkt[:60]); err != nil { // truncated: ignored
		t.Fatal(err)
	}
	if _, err := conn.Write(pkt); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "pve2 joins after a magic packet", func() bool { return s.NodeOnline("pve2") })
	if n := s.WakePackets("pve2"); n != 2 {
		t.Fatalf("packets %d, want 2 (the API's and the LAN's)", n)
	}
}
