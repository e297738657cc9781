package pvesim

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testutil"
)

func newTestSim(t *testing.T) (*Sim, *proxmox.Client) {
	t.Helper()
	s := New(Options{Nodes: []string{"pve1", "pve2"}, TaskDelay: 30 * time.Millisecond})
	port := testutil.FreePort(t)
	if err := s.AddGuest(GuestSpec{VMID: 100, Name: "web", IP: "127.0.0.61", Port: port}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddGuest(GuestSpec{VMID: 200, Kind: "qemu", Name: "app", Node: "pve2", IP: "127.0.0.62", Port: port}); err != nil {
		t.Fatal(err)
	}
	url, err := s.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	c := proxmox.NewClient(url+"/api2/json", proxmox.WithAPIToken(s.TokenID(), s.TokenSecret()), proxmox.WithTimeout(5*time.Second))
	return s, c
}

func TestGoProxmoxLifecycle(t *testing.T) {
	s, c := newTestSim(t)
	ctx := context.Background()
	if v, err := c.Version(ctx); err != nil || v.Version == "" {
		t.Fatalf("version: %v %v", v, err)
	}
	cl, err := c.Cluster(ctx)
	if err != nil || len(cl.Nodes) != 2 || cl.Name != "pvesim" {
		t.Fatalf("cluster: %+v %v", cl, err)
	}
	rs, err := cl.Resources(ctx, "vm")
	if err != nil || len(rs) != 2 || rs[0].VMID != 100 || rs[0].Status != "stopped" || rs[1].Node != "pve2" {
		t.Fatalf("resources: %v %v", rs, err)
	}
	if _, err := c.Node(ctx, "pve1"); err != nil {
		t.Fatalf("node status: %v", err)
	}
	ct := c.NodeRef("pve1").ContainerRef(100)
	task, err := ct.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if parts := strings.Split(string(task.UPID), ":"); len(parts) != 9 || parts[5] != "vzstart" || parts[6] != "100" {
		t.Fatalf("upid %s", task.UPID)
	}
	if err := task.Wait(ctx, 10*time.Millisecond, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if lg, err := task.Log(ctx, 0, 50); err != nil || !strings.Contains(lg[len(lg)-1], "TASK OK") {
		t.Fatalf("log %v %v", lg, err)
	}
	if err := ct.Ping(ctx); err != nil || ct.Status != "running" {
		t.Fatalf("status %v %v", ct.Status, err)
	}
	ifs, err := ct.Interfaces(ctx)
	if err != nil || len(ifs) != 2 || !strings.HasPrefix(ifs[1].Inet, "127.0.0.61/") {
		t.Fatalf("interfaces %v %v", ifs, err)
	}
	res, err := http.Get("http://" + s.Addr(100) + "/x")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(body), "hello from web") {
		t.Fatalf("guest answered %q", body)
	}
	task, err = ct.Shutdown(ctx, true, 10)
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Wait(ctx, 10*time.Millisecond, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if s.Status(100) != "stopped" || s.Serving(100) {
		t.Fatal("guest still up after shutdown")
	}
	if _, err := http.Get("http://" + s.Addr(100) + "/"); err == nil {
		t.Fatal("stopped guest still serves")
	}
	if s.ActionCalls(100, "start") != 1 || s.Calls("GET /cluster/resources") != 1 {
		t.Fatalf("counters: %v", s.CallCounts())
	}

	vm := c.NodeRef("pve2").VirtualMachineRef(200)
	task, err = vm.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Wait(ctx, 10*time.Millisecond, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	ifaces, err := vm.AgentGetNetworkIFaces(ctx)
	if err != nil || len(ifaces) != 1 || ifaces[0].IPAddresses[0].IPAddress != "127.0.0.62" {
		t.Fatalf("agent %v %v", ifaces, err)
	}
	task, err = vm.Pause(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = task.Wait(ctx, 10*time.Millisecond, 5*time.Second)
	if !s.Paused(200) || s.Serving(200) || s.Status(200) != "running" {
		t.Fatal("suspend did not pause")
	}
}

func TestErrorsAndFaults(t *testing.T) {
	s, c := newTestSim(t)
	ctx := context.Background()
	_, err := c.NodeRef("pve2").ContainerRef(100).Start(ctx)
	if err == nil || !strings.Contains(err.Error(), "Configuration file 'nodes/pve2/lxc/100.conf' does not exist") {
		t.Fatalf("wrong node: %v", err)
	}
	s.FailAPI("GET /cluster/resources", 500, "boom", 1)
	if _, err := (&proxmox.Cluster{}).New(c).Resources(ctx, "vm"); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("fault: %v", err)
	}
	if _, err := (&proxmox.Cluster{}).New(c).Resources(ctx, "vm"); err != nil {
		t.Fatalf("fault did not clear: %v", err)
	}
	s.FailStarts(100, "startup for container '100' failed")
	task, err := c.NodeRef("pve1").ContainerRef(100).Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Wait(ctx, 10*time.Millisecond, 5*time.Second); !proxmox.IsTaskFailed(err) || !strings.Contains(err.Error(), "startup for container") {
		t.Fatalf("failed task: %v", err)
	}
	s.DelayAPI("GET /version", time.Second)
	ctx2, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := c.Version(ctx2); err == nil {
		t.Fatal("delay fault did not time out")
	}
}

func TestAuth(t *testing.T) {
	s := New(Options{})
	url, err := s.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := proxmox.NewClient(url+"/api2/json", proxmox.WithAPIToken(s.TokenID(), "wrong"))
	if _, err := c.Version(context.Background()); !proxmox.IsNotAuthorized(err) {
		t.Fatalf("bad token accepted: %v", err)
	}
	res, err := http.Get(url + "/api2/json/nodes/pve1/qemu/100/status/current")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 401 || res.Status != "401 No ticket" {
		t.Fatalf("status line %q", res.Status)
	}
}
