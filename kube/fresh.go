package kube

import (
	"context"
	"errors"
	"strconv"
	"time"

	"go.uber.org/zap"
	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"

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

// seeEnd makes sure that this replica's cache shows what a task that
// ended well left behind, when a client reads that end here: the VM a
// create made (seeMadeVM), the power state a start or stop reached
// (seePowerEnd). Another replica may have ended the task before this
// one's watches delivered what it saw.
func (c *Cluster) seeEnd(ctx context.Context, t *Task) {
	if t.Running() || translate.ExitIsError(t.ExitStatus) || t.uid == "" {
		return
	}
	if makesVM[t.UPID.Type] {
		c.seeMadeVM(ctx, t)
	} else if powerSense(t.goal) != 0 {
		c.seePowerEnd(ctx, t, time.Now())
	}
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

// seePowerEnd makes sure that the cached instance of the VM a power task
// was about shows the state the task ended on: a client that read "start
// ended OK" here reads status/current here next and must find the VM
// running, as on PVE. It costs a map lookup unless the cache disagrees,
// and then one read within GuestFresh's budget. Only ends of the last
// mutationTTL count: a later task may have changed the state since, and
// clients that keep polling an old task should not spend the budget.
func (c *Cluster) seePowerEnd(ctx context.Context, t *Task, now time.Time) {
	if now.Sub(t.EndTime) > mutationTTL {
		return
	}
	vm := c.cachedVM(t.namespace, t.name)
	if vm == nil || !vm.hasUID(t.uid) {
		return // deleted since, or a namesake: nothing of the task's to show
	}
	if powerEndShown(t.goal, vm.meta(), c.cachedVMI(t.namespace, t.name).meta()) || !c.freshLookups.Allow() {
		return
	}
	c.lookUpVMI(ctx, t.namespace, t.name)
}

// powerEndShown tells whether vm with its instance vmi (nil: none) shows
// the power state a task of goal ended on.
func powerEndShown(goal Goal, vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) bool {
	st := translate.GuestStateOf(vm, vmi)
	switch powerSense(goal) {
	case 1:
		return translate.VMIRunning(vmi) && (goal != GoalResumed || st.QMPStatus != translate.QMPPaused)
	case 2:
		return !st.Running()
	case 3:
		return st.QMPStatus == translate.QMPPaused
	}
	return true
}

// lookUpVMI reads the instance namespace/name as the plugin and puts what
// kube-apiserver has into the cache: the instance, or its absence.
func (c *Cluster) lookUpVMI(ctx context.Context, namespace, name string) {
	vmi, err := c.own.kv.KubevirtV1().VirtualMachineInstances(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if cached := c.cachedVMI(namespace, name); cached != nil {
			c.vmis.drop(cached)
		}
	case err != nil:
		c.logger.Debug("looking up the instance of an ended power task", zap.String("vm", namespace+"/"+name), zap.Error(err))
	default:
		c.vmis.put(vmi, true)
	}
}

// newFreshLimiter is GuestFresh's budget.
func newFreshLimiter() *rate.Limiter {
	return rate.NewLimiter(freshLookupsPerSecond, freshLookupsBurst)
}
