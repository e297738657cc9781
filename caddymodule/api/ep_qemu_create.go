package api

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// createOnly are POST /nodes/{n}/qemu parameters that steer the call and
// are not part of the VM's config.
var createOnly = map[string]bool{"vmid": true, "pool": true, "start": true, "unique": true, "force": true, "live-restore": true, "archive": true, "storage": true, "bwlimit": true}

// postQemu creates a VM from PVE parameters.
func (h *APIHandler) postQemu(q *request) (any, *apiError) {
	n, e := h.node(q)
	if e != nil {
		return nil, e
	}
	vmid, e := q.p.vmid("vmid")
	if e != nil {
		return nil, e
	}
	start, e := q.p.boolean("start", false)
	if e != nil {
		return nil, e
	}
	ns, ok := h.createNamespace(q)
	if !ok {
		return nil, noPool(q.p["pool"])
	}
	if !q.c.Serves(ns) {
		return nil, newError(http.StatusInternalServerError, "cannot create VM %d: namespace '%s' (where VMs are created without pool=) is not served", vmid, ns)
	}
	cfg := map[string]string{}
	for k := range q.p {
		if createOnly[k] {
			continue
		}
		val, _, e := q.p.str(k)
		if e != nil {
			return nil, e
		}
		cfg[k] = val
	}
	if e := vmidFree(q, vmid, n.Name); e != nil {
		return nil, createFailed(vmid, e)
	}
	vm, perrs := translate.BuildVM(h.vmRequest(q, vmid, n.Name, ns, cfg))
	if len(perrs) > 0 {
		return nil, paramError(perrs)
	}
	h.joinPool(q.c, vm, q.p["pool"])
	g, created, e := h.createGuest(q, vmid, vm, func(_ kube.Guest, created *kubevirtv1.VirtualMachine) *apiError {
		return h.applyCloudInit(q, vmid, created, cfg["cipassword"], true)
	})
	if e != nil {
		return nil, createFailed(vmid, e)
	}
	line := fmt.Sprintf("created VM %d as %s/%s", vmid, created.Namespace, created.Name)
	if !start {
		// PVE's qmcreate ends once the disks are allocated.
		goal := kube.GoalNone
		if len(created.Spec.DataVolumeTemplates) > 0 {
			goal = kube.GoalProvisioned
		}
		return h.begin(q, g, guestTask{typ: translate.TaskCreate, goal: goal, timeout: 30 * time.Minute, log: line})
	}
	c := q.c
	return h.begin(q, g, guestTask{typ: translate.TaskCreate, goal: kube.GoalRunning, timeout: 5 * time.Minute, log: line, act: func(ctx context.Context) error { return c.StartVM(ctx, g) }})
}

// vmidFree answers PVE's refusal when the cache shows vmid taken (the
// claim in createGuest is the atomic check; this one answers early and
// catches VMs labelled outside the plugin). node is where the create asks
// for, said when the holder's node is not known.
func vmidFree(q *request, vmid int, node string) *apiError {
	if !q.c.VMIDTaken(vmid) {
		return nil
	}
	if g, err := q.c.Guest(vmid); err == nil {
		node = g.Node
	}
	return newError(http.StatusInternalServerError, "%v", &kube.VMIDTakenError{VMID: strconv.Itoa(vmid), Node: node})
}

// createFailed prefixes a refused create as qemu-server's create_vm does
// ("unable to create VM 100 - VM 100 already exists on node 'pve'").
func createFailed(vmid int, e *apiError) *apiError {
	if e.Code == http.StatusInternalServerError && strings.HasPrefix(e.Message, fmt.Sprintf("VM %d already exists on node '", vmid)) {
		e.Message = fmt.Sprintf("unable to create VM %d - %s", vmid, e.Message)
	}
	return e
}

// createGuest writes a new VM and then runs setup (its cloud-init Secret),
// or leaves nothing behind: a VM whose setup failed is deleted again. The
// vmid claim CreateVM takes on the apiserver decides between concurrent
// creates of one vmid; the cache is not asked again afterwards, since it
// may still show a VM of that id that is already gone (deleted by another
// client a moment ago), and undoing the create for it would answer a
// client that its VM exists when it does not.
func (h *APIHandler) createGuest(q *request, vmid int, vm *kubevirtv1.VirtualMachine,
	setup func(g kube.Guest, created *kubevirtv1.VirtualMachine) *apiError) (kube.Guest, *kubevirtv1.VirtualMachine, *apiError) {
	created, err := q.c.CreateVM(q.ctx(), vm)
	if fallback := "pve-" + strconv.Itoa(vmid); kube.IsAlreadyExists(err) && vm.Name != fallback {
		// Another VM took the Kubernetes name since translate checked it
		// (parallel clones of one source all derive the same name): take
		// the name only this vmid makes, as translate does for a taken one.
		vm.Name = fallback
		created, err = q.c.CreateVM(q.ctx(), vm)
	}
	if err != nil {
		return kube.Guest{}, nil, kubeError(err)
	}
	g := q.c.GuestOf(vmid, created)
	if e := setup(g, created); e != nil {
		_ = q.c.DeleteVM(context.WithoutCancel(q.ctx()), g)
		return kube.Guest{}, nil, e
	}
	return g, created, nil
}

// deleteQemu destroys a stopped VM; its task ends when the VM object is
// gone, so that clients polling status/current afterwards see it missing.
func (h *APIHandler) deleteQemu(q *request) (any, *apiError) {
	g, e := h.guest(q)
	if e != nil {
		return nil, e
	}
	for _, b := range []string{"purge", "destroy-unreferenced-disks", "skiplock"} {
		if _, e := q.p.boolean(b, false); e != nil {
			return nil, e
		}
	}
	cfg := translate.StoredConfig(g.VM())
	if p := cfg["protection"]; p == "1" {
		return nil, newError(http.StatusInternalServerError, "can't remove VM %d - protection mode enabled", g.VMID)
	}
	// Its HA config goes with the VM (an annotation): only with purge, as PVE.
	if purge, _ := q.p.boolean("purge", false); !purge {
		if _, ha := translate.HAConfigOf(g.Meta()); ha {
			return nil, newError(http.StatusInternalServerError, "unable to remove VM %d - used in HA resources and purge parameter not set.", g.VMID)
		}
	}
	if g.State().Running() {
		return nil, newError(http.StatusInternalServerError, "VM %d is running - destroy failed", g.VMID)
	}
	c := q.c
	line := fmt.Sprintf("destroying VM %d (%s/%s)", g.VMID, g.Namespace(), g.Name())
	return h.begin(q, g, guestTask{typ: translate.TaskDestroy, goal: kube.GoalGone, timeout: 5 * time.Minute, log: line, act: func(ctx context.Context) error { return c.DeleteVM(ctx, g) }})
}
