package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"
	"k8s.io/apimachinery/pkg/types"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
	"github.com/caddy-proxmox/caddy-proxmox/kubevirtsim"
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

// TestGoProxmoxAgentAndClone: NewVirtualMachine → Task.Wait → Start →
// AgentGetNetworkIFaces → Stop → Clone → Delete, the sequence go-proxmox
// users run (a running VM cannot be cloned on KubeVirt).
func TestGoProxmoxAgentAndClone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := proxmox.NewClient(base+"/api2/json", proxmox.WithHTTPClient(testcaddy.Client()), proxmox.WithAPIToken(tokenID, tokenSecret))
	nodes, err := c.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node, err := c.Node(ctx, nodes[0].Node)
	if err != nil {
		t.Fatal(err)
	}
	cl, _ := c.Cluster(ctx)
	id, err := cl.NextID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	task, err := node.NewVirtualMachine(ctx, id,
		proxmox.VirtualMachineOption{Name: "name", Value: "gopx-agent"},
		proxmox.VirtualMachineOption{Name: "agent", Value: "1"},
		proxmox.VirtualMachineOption{Name: "net0", Value: "virtio,bridge=vmbr0"},
		proxmox.VirtualMachineOption{Name: "scsi0", Value: "local-path:2"},
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Wait(ctx, 200*time.Millisecond, time.Minute); err != nil {
		t.Fatal(err)
	}
	vm := vmByID(t, strconv.Itoa(id))
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{%q:"true"}}}}}`, kubevirtsim.AnnotationAgent)
	if _, err := env.KubeVirt.KubevirtV1().VirtualMachines(vm.Namespace).Patch(ctx, vm.Name, types.MergePatchType, []byte(patch), metavOpts()); err != nil {
		t.Fatal(err)
	}
	v, err := node.VirtualMachine(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if task, err = v.Start(ctx); err != nil || task.Wait(ctx, 200*time.Millisecond, time.Minute) != nil {
		t.Fatalf("start: %v", err)
	}
	if err := v.WaitForAgent(ctx, 30); err != nil {
		t.Fatalf("WaitForAgent: %v", err)
	}
	ifaces, err := v.AgentGetNetworkIFaces(ctx)
	if err != nil || len(ifaces) == 0 || len(ifaces[0].IPAddresses) == 0 {
		t.Fatalf("AgentGetNetworkIFaces: %v %+v", err, ifaces)
	}
	// CDI copies a claim only while no running guest uses it: the clone
	// of the running VM is refused, saying so; stopped, it clones.
	if _, _, err := v.Clone(ctx, &proxmox.VirtualMachineCloneOptions{Name: "gopx-agent-clone", Full: proxmox.IntOrBool(true)}); err == nil ||
		!strings.Contains(err.Error(), "while it is running") {
		t.Fatalf("Clone of the running VM: %v", err)
	}
	if task, err = v.Stop(ctx); err != nil || task.Wait(ctx, 200*time.Millisecond, time.Minute) != nil {
		t.Fatalf("stop: %v", err)
	}
	newID, task, err := v.Clone(ctx, &proxmox.VirtualMachineCloneOptions{Name: "gopx-agent-clone", Full: proxmox.IntOrBool(true)})
	if err != nil {
		t.Fatalf("Clone: %v", err)
	}
	if err := task.Wait(ctx, 200*time.Millisecond, time.Minute); err != nil || !task.IsSuccessful {
		t.Fatalf("clone task: %v %+v", err, task)
	}
	clone, err := node.VirtualMachine(ctx, newID)
	if err != nil || clone.Name != "gopx-agent-clone" {
		t.Fatalf("clone: %v %+v", err, clone)
	}
	for _, d := range []*proxmox.VirtualMachine{clone, v} {
		task, err := d.Delete(ctx, nil)
		if err != nil {
			t.Fatalf("Delete %d: %v", d.VMID, err)
		}
		if err := task.Wait(ctx, 200*time.Millisecond, time.Minute); err != nil || !task.IsSuccessful {
			t.Fatalf("delete task %d: %v", d.VMID, err)
		}
	}
}
