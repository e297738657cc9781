package kube

import (
	"context"
	"errors"
	"strconv"

	"go.uber.org/zap"
	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

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
	namespaces := c.opts.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	found := false
	for _, ns := range namespaces {
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

// newFreshLimiter is GuestFresh's budget.
func newFreshLimiter() *rate.Limiter {
	return rate.NewLimiter(freshLookupsPerSecond, freshLookupsBurst)
}
