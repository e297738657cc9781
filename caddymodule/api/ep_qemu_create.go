package api

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
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
	if q.c.VMIDTaken(vmid) {
		return nil, newError(http.StatusInternalServerError, "VM %d already exists", vmid)
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
		return nil, e
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

// createGuest writes a new VM and then runs setup (its cloud-init Secret),
// or leaves nothing behind: a VM whose vmid turned out to be claimed by
// another in the same instant, or whose setup failed, is deleted again.
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
	g, err := q.c.Guest(vmid)
	if err != nil || g.VM.UID != created.UID {
		// The label names two VMs now: undo ours rather than leave an
		// ambiguous id behind.
		_ = q.c.DeleteVM(context.WithoutCancel(q.ctx()), kube.Guest{VMID: vmid, VM: created})
		return kube.Guest{}, nil, newError(http.StatusInternalServerError, "VM %d already exists", vmid)
	}
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
	cfg := translate.StoredConfig(g.VM)
	if p := cfg["protection"]; p == "1" {
		return nil, newError(http.StatusInternalServerError, "can't remove VM %d - protection mode enabled", g.VMID)
	}
	// Its HA config goes with the VM (an annotation): only with purge, as PVE.
	if purge, _ := q.p.boolean("purge", false); !purge {
		if _, ha := translate.HAConfigOf(g.VM); ha {
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
