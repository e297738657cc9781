package kube

import (
	"context"
	"errors"
	"strconv"

	"go.uber.org/zap"
	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// freshLookups bounds GuestFresh's calls to kube-apiserver: a few per
// second, so that clients asking for vmids that do not exist cannot spend
// the plugin's own request budget (clientQPS), which its informers and
// records need. Past it, the cache answers alone.
const freshLookupsPerSecond, freshLookupsBurst = 5, 10

// GuestFresh is Guest, except that a vmid the cache does not have is
// looked up in kube-apiserver before it is called missing. Another
// replica may have made the VM an instant ago: its create task, which
// Tasks.lookup reads live, can have ended before this replica's VM
// informer delivers the VM, and on PVE a VM whose create task has ended
// is there on every node. What the lookup finds goes into the cache as
// the plugin's own writes do.
func (c *Cluster) GuestFresh(ctx context.Context, vmid int) (Guest, error) {
	g, err := c.Guest(vmid)
	if !errors.Is(err, ErrNotFound) || !c.freshLookups.Allow() {
		return g, err
	}
	if !c.lookUpVMID(ctx, vmid) {
		return g, err
	}
	return c.Guest(vmid)
}

// lookUpVMID puts the VMs kube-apiserver has under vmid's label into the
// cache, and reports whether there were any. It reads as the plugin: the
// cache is the plugin's, and what a caller may see of it is checked when
// it is read.
func (c *Cluster) lookUpVMID(ctx context.Context, vmid int) bool {
	sel := labels.Set{translate.LabelVMID: strconv.Itoa(vmid)}.String()
	found := false
	for _, ns := range c.listScopes() {
		l, err := c.own.kv.KubevirtV1().VirtualMachines(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			c.logger.Debug("looking up a vmid the cache lacks", zap.Int("vmid", vmid), zap.String("namespace", ns), zap.Error(err))
			continue
		}
		for i := range l.Items {
			c.vms.put(&l.Items[i], true)
			found = true
		}
	}
	return found
}

// makesVM are the task types whose successful end means their subject VM
// exists: PVE lists a VM on every node once its create task has ended.
var makesVM = map[string]bool{translate.TaskCreate: true, translate.TaskClone: true, translate.TaskRestore: true}

// seeMadeVM makes sure that the VM an ended task made is cached, so that
// a client that read the end here finds the VM in this replica's lists
// too. Another replica may have ended the task (its record reaches this
// one live, or through a watch of its own) before this replica's VM
// informer delivered the VM. It costs a map lookup unless the VM is
// missing, and then one read within GuestFresh's budget.
func (c *Cluster) seeMadeVM(ctx context.Context, t *Task) {
	if t.Running() || translate.ExitIsError(t.ExitStatus) || !makesVM[t.UPID.Type] || t.uid == "" {
		return
	}
	if vm := c.cachedVM(t.namespace, t.name); (vm != nil && vm.hasUID(t.uid)) || !c.freshLookups.Allow() {
		return
	}
	c.lookUpVM(ctx, t.namespace, t.name, t.uid)
}

// lookUpVM puts the VM namespace/name into the cache if kube-apiserver
// has it with uid. It reads as the plugin, as lookUpVMID does.
func (c *Cluster) lookUpVM(ctx context.Context, namespace, name string, uid types.UID) {
	vm, err := c.own.kv.KubevirtV1().VirtualMachines(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		c.logger.Debug("looking up a made VM the cache lacks", zap.String("vm", namespace+"/"+name), zap.Error(err))
		return
	}
	if vm.UID == uid {
		c.vms.put(vm, true)
	}
}

// newFreshLimiter is GuestFresh's budget.
func newFreshLimiter() *rate.Limiter {
	return rate.NewLimiter(freshLookupsPerSecond, freshLookupsBurst)
}
