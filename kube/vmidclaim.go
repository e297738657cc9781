package kube

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

const (
	claimPrefix = "pve-vmid-"
	claimLabel  = "pve.caddy-proxmox.io/vmid-claim"
	// claimInFlight is how long a claim whose VM has not appeared yet
	// (a create in flight, or one that died half-way) holds its vmid.
	claimInFlight = 30 * time.Second
)

// VMIDTakenError is returned when a create loses its vmid to another VM
// or to a create in flight (on any replica).
type VMIDTakenError struct {
	VMID string
	// Node is where the VM holding the id is (or is being created).
	Node string
}

// Error is PVE's text for a taken vmid (PVE::Cluster::check_vmid_unused).
func (e *VMIDTakenError) Error() string {
	return "VM " + e.VMID + " already exists on node '" + e.Node + "'"
}

// vmidClaim is a reservation of a vmid: the ConfigMap pve-vmid-<id> in
// the task namespace. Creating an object is atomic in Kubernetes, so of
// concurrent creates with one vmid exactly one gets the claim; the label
// on the VM alone could not say who was first.
type vmidClaim struct {
	c  *Cluster
	cm *corev1.ConfigMap
	// prev is the data of the stale claim taken over, if any.
	prev map[string]string
}

// claimVMID reserves vmid for the VM ns/name on node. A claim left by a
// VM that is gone (or by a create that never finished) is taken over; the
// claim returned then names that VM in prev, which is known to be gone
// from the apiserver although a lagging cache may still show it.
func (c *Cluster) claimVMID(ctx context.Context, vmid, ns, name, node string) (*vmidClaim, error) {
	// Claims are the plugin's own records, shared by every caller and
	// replica; callers need no rights on the task namespace.
	cms := c.own.kube.CoreV1().ConfigMaps(c.opts.TaskNamespace)
	want := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: claimPrefix + vmid, Namespace: c.opts.TaskNamespace,
			Labels: map[string]string{claimLabel: "true"},
		},
		Data: map[string]string{"vmid": vmid, "namespace": ns, "name": name, "node": node},
	}
	var prev map[string]string
	for attempt := 0; attempt < 2; attempt++ {
		out, err := cms.Create(ctx, want, metav1.CreateOptions{})
		if err == nil {
			c.vmidClaims.put(out, true)
			return &vmidClaim{c: c, cm: out, prev: prev}, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("claiming vmid %s: %w", vmid, err)
		}
		cur, err := cms.Get(ctx, want.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue // released meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("reading the claim of vmid %s: %w", vmid, err)
		}
		if live, err := c.claimLive(ctx, cur); err != nil || live {
			if err != nil {
				return nil, err
			}
			return nil, &VMIDTakenError{VMID: vmid, Node: claimNode(cur, node)}
		}
		prev = cur.Data
		uid, rv := cur.UID, cur.ResourceVersion
		err = cms.Delete(ctx, cur.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return nil, fmt.Errorf("taking over the stale claim of vmid %s: %w", vmid, err)
		}
	}
	return nil, &VMIDTakenError{VMID: vmid, Node: node}
}

// claimNode is the node a claim's VM is on, or def for claims that do
// not say (made by earlier versions).
func claimNode(cm *corev1.ConfigMap, def string) string {
	if n := cm.Data["node"]; n != "" {
		return n
	}
	return def
}

// vmidClaimed tells, from the cache, whether a claim holds vmid (a create
// in flight on any replica, or a VM the VM cache does not show yet), and
// on which node. Only /cluster/nextid's answers depend on it (CreateVM's
// claim is the atomic check), so the cache's lag is acceptable there, and
// asking the apiserver on every call was not: its client's rate limit
// made nextid take seconds under load (bpg gives it six).
func (c *Cluster) vmidClaimed(vmid string) (bool, string) {
	cm := cached[corev1.ConfigMap](c.vmidClaims, c.opts.TaskNamespace, claimPrefix+vmid)
	if cm == nil {
		return false, ""
	}
	if time.Since(cm.CreationTimestamp.Time) < claimInFlight {
		return true, claimNode(cm, "")
	}
	vm := c.cachedVM(cm.Data["namespace"], cm.Data["name"])
	if vm == nil {
		return false, ""
	}
	if uid := cm.Data["uid"]; uid != "" {
		return vm.hasUID(types.UID(uid)), claimNode(cm, "")
	}
	return vm.label(translate.LabelVMID) == vmid, claimNode(cm, "")
}

// claimLive tells whether a claim still holds its vmid: its VM exists
// (and carries the id), or its create may still be in flight.
func (c *Cluster) claimLive(ctx context.Context, cm *corev1.ConfigMap) (bool, error) {
	// As the plugin: the claim's VM may be one the caller cannot read, and
	// it still holds its vmid.
	vm, err := c.own.kv.KubevirtV1().VirtualMachines(cm.Data["namespace"]).Get(ctx, cm.Data["name"], metav1.GetOptions{})
	switch {
	case err == nil:
		if uid := cm.Data["uid"]; uid != "" {
			return string(vm.UID) == uid, nil
		}
		if vm.Labels[translate.LabelVMID] == cm.Data["vmid"] {
			return true, nil
		}
	case !apierrors.IsNotFound(err):
		return false, fmt.Errorf("checking the claim of vmid %s: %w", cm.Data["vmid"], err)
	}
	// No VM (or another one by that name): live only while a create may
	// still be under way.
	return cm.Data["uid"] == "" && time.Since(cm.CreationTimestamp.Time) < claimInFlight, nil
}

// commit records the created VM's UID, so the claim ends with that VM.
func (cl *vmidClaim) commit(ctx context.Context, uid types.UID) {
	cl.cm.Data["uid"] = string(uid)
	out, err := cl.c.own.kube.CoreV1().ConfigMaps(cl.cm.Namespace).Update(ctx, cl.cm, metav1.UpdateOptions{})
	if err == nil {
		cl.c.vmidClaims.put(out, false)
	} else {
		// The VM carries the label; the claim stays valid through it.
		cl.c.logger.Debug("recording the vmid claim", zap.String("claim", cl.cm.Name), zap.Error(err))
	}
}

// release gives the vmid back after a failed create.
func (cl *vmidClaim) release(ctx context.Context) {
	uid := cl.cm.UID
	if err := cl.c.own.kube.CoreV1().ConfigMaps(cl.cm.Namespace).Delete(ctx, cl.cm.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err == nil {
		cl.c.vmidClaims.drop(cl.cm)
	}
}

// claimStale tells, from the caches, whether a claim may no longer hold
// its vmid and is worth asking the apiserver about (claimLive): the
// cached VM it names is not the one it was made for (its UID, once the
// create committed it; before that its vmid label), and a claim not
// committed is past claimInFlight. A claim of a live VM costs no call.
func (c *Cluster) claimStale(cm *corev1.ConfigMap, now time.Time) bool {
	vm := c.cachedVM(cm.Data["namespace"], cm.Data["name"]).meta()
	if uid := cm.Data["uid"]; uid != "" {
		return vm == nil || string(vm.UID) != uid
	}
	if now.Sub(cm.CreationTimestamp.Time) < claimInFlight {
		return false
	}
	return vm == nil || vm.Labels[translate.LabelVMID] != cm.Data["vmid"]
}

// collectClaims removes the claims that no longer hold their vmid: their
// VM was deleted (or replaced by another of its name), or their create
// died before making it. It runs on the task worker's periodic pass, on
// every replica: each removal is checked against the apiserver
// (claimLive) and made with the claim's UID and resourceVersion as
// preconditions, so that a claim another replica committed, took over or
// removed meanwhile is left alone.
func (c *Cluster) collectClaims(ctx context.Context, now time.Time) (removed int) {
	if c.Healthy() != nil {
		return 0
	}
	checked := 0
	for _, o := range c.vmidClaims.list() {
		cm, ok := o.(*corev1.ConfigMap)
		if !ok || !c.claimStale(cm, now) {
			continue
		}
		if checked++; checked > claimChecksPerPass {
			break
		}
		if c.removeClaim(ctx, cm) {
			removed++
		}
	}
	return removed
}

// claimChecksPerPass bounds the apiserver calls of one collectClaims
// (two per claim), which runs on the task worker: the claims earlier
// versions left, one per VM ever created, go over several passes rather
// than hold up the tasks for a minute.
const claimChecksPerPass = 50

// dropClaim removes the claim of vmid once its VM is gone (a destroy
// task ended), instead of on the next periodic pass.
func (c *Cluster) dropClaim(ctx context.Context, vmid string) {
	cm := cached[corev1.ConfigMap](c.vmidClaims, c.opts.TaskNamespace, claimPrefix+vmid)
	if cm != nil && c.claimStale(cm, time.Now()) {
		c.removeClaim(ctx, cm)
	}
}

// removeClaim deletes cm unless the apiserver says it still holds its
// vmid, or it changed since it was read.
func (c *Cluster) removeClaim(ctx context.Context, cm *corev1.ConfigMap) bool {
	live, err := c.claimLive(ctx, cm)
	if err != nil || live {
		return false
	}
	uid, rv := cm.UID, cm.ResourceVersion
	err = c.own.kube.CoreV1().ConfigMaps(cm.Namespace).Delete(ctx, cm.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
	switch {
	case err == nil:
		c.vmidClaims.drop(cm)
		return true
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		// Another replica removed, took over or committed it.
	default:
		c.logger.Debug("removing a stale vmid claim", zap.String("claim", cm.Name), zap.Error(err))
	}
	return false
}
