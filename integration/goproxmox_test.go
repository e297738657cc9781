package integration

import (
	"context"
	"strconv"
	"testing"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
)

// goProxmoxFlow is the go-proxmox sequence the issue names: Version,
// Nodes, VirtualMachines, NewVirtualMachine + Task.Wait, Start, Stop,
// Delete, each task waited on.
func goProxmoxFlow(t *testing.T, c *proxmox.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	v, err := c.Version(ctx)
	if err != nil || v.Version != "8.4.1" || v.Release != "8.4" {
		t.Fatalf("Version: %+v %v", v, err)
	}
	nodes, err := c.Nodes(ctx)
	if err != nil || len(nodes) == 0 {
		t.Fatalf("Nodes: %v %v", nodes, err)
	}
	node, err := c.Node(ctx, nodes[0].Node)
	if err != nil {
		t.Fatalf("Node: %v", err)
	}
	if _, err := node.VirtualMachines(ctx); err != nil {
		t.Fatalf("VirtualMachines: %v", err)
	}
	cl, err := c.Cluster(ctx)
	if err != nil {
		t.Fatalf("Cluster: %v", err)
	}
	id, err := cl.NextID(ctx)
	if err != nil {
		t.Fatalf("NextID: %v", err)
	}
	task, err := node.NewVirtualMachine(ctx, id,
		proxmox.VirtualMachineOption{Name: "name", Value: "gopx-" + strconv.Itoa(id)},
		proxmox.VirtualMachineOption{Name: "cores", Value: 2},
		proxmox.VirtualMachineOption{Name: "memory", Value: 1024},
		proxmox.VirtualMachineOption{Name: "net0", Value: "virtio,bridge=vmbr0"},
	)
	if err != nil {
		t.Fatalf("NewVirtualMachine: %v", err)
	}
	if err := task.Wait(ctx, 200*time.Millisecond, time.Minute); err != nil || !task.IsSuccessful {
		t.Fatalf("create task: %v %+v", err, task)
	}
	vm, err := node.VirtualMachine(ctx, id)
	if err != nil {
		t.Fatalf("VirtualMachine: %v", err)
	}
	if vm.Name != "gopx-"+strconv.Itoa(id) || vm.CPUs != 2 || vm.IsRunning() || bool(vm.Template) {
		t.Fatalf("VM %+v", vm)
	}
	if vm.VirtualMachineConfig == nil || vm.VirtualMachineConfig.Cores == nil || *vm.VirtualMachineConfig.Cores != 2 {
		t.Fatalf("config %+v", vm.VirtualMachineConfig)
	}
	task, err = vm.Start(ctx)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := task.Wait(ctx, 200*time.Millisecond, time.Minute); err != nil || !task.IsSuccessful {
		t.Fatalf("start task: %v %+v", err, task)
	}
	if err := vm.Ping(ctx); err != nil || !vm.IsRunning() {
		t.Fatalf("after start: %v %s", err, vm.Status)
	}
	task, err = vm.Stop(ctx)
	if err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := task.Wait(ctx, 200*time.Millisecond, time.Minute); err != nil || !task.IsSuccessful {
		t.Fatalf("stop task: %v", err)
	}
	if err := vm.Ping(ctx); err != nil || !vm.IsStopped() {
		t.Fatalf("after stop: %v %s", err, vm.Status)
	}
	task, err = vm.Delete(ctx, nil)
	if err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := task.Wait(ctx, 200*time.Millisecond, time.Minute); err != nil || !task.IsSuccessful {
		t.Fatalf("delete task: %v", err)
	}
	if _, err := node.VirtualMachine(ctx, id); err == nil {
		t.Fatal("VM still readable after delete")
	}
}

func TestGoProxmoxWithToken(t *testing.T) {
	c := proxmox.NewClient(base+"/api2/json", proxmox.WithHTTPClient(testcaddy.Client()), proxmox.WithAPIToken(tokenID, tokenSecret))
	goProxmoxFlow(t, c)
}

func TestGoProxmoxWithLogin(t *testing.T) {
	c := proxmox.NewClient(base+"/api2/json", proxmox.WithHTTPClient(testcaddy.Client()), proxmox.WithCredentials(&proxmox.Credentials{Username: userID, Password: userPass}))
	goProxmoxFlow(t, c)
}
