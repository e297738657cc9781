package api

import (
	"fmt"
	"net/http"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// postQemuClone clones a VM (or template) into newid. Disks are CDI
// DataVolume clones of the source's claims; the new VM shows lock "clone"
// until they are ready, and the qmclone task (id = the SOURCE vmid, as on
// PVE) ends then.
func (h *APIHandler) postQemuClone(q *request) (any, *apiError) {
	g, e := h.guest(q)
	if e != nil {
		return nil, e
	}
	if e := q.p.allowOnly("newid", "name", "description", "pool", "target", "full", "storage", "format", "snapname", "bwlimit"); e != nil {
		return nil, e
	}
	newID, e := q.p.vmid("newid")
	if e != nil {
		return nil, e
	}
	if _, e := q.p.boolean("full", true); e != nil {
		return nil, e
	}
	if f := q.p["format"]; f != "" && f != "raw" && f != "qcow2" && f != "vmdk" {
		return nil, paramErr("format", "value '%s' does not have a value in the enumeration 'raw, qcow2, vmdk'", f)
	}
	if s := q.p["snapname"]; s != "" && s != "current" {
		// A refusal, not a malformed parameter: a 500 whose reason phrase
		// clients show (proxmoxer cannot see a 400's errors object).
		return nil, newError(http.StatusInternalServerError, "cloning from a snapshot is not supported yet; clone the current state")
	}
	node := g.Node
	if t := q.p["target"]; t != "" {
		found := false
		for _, n := range h.nodes() {
			found = found || n.Name == t
		}
		if !found {
			return nil, paramErr("target", "no such cluster node '%s'", t)
		}
		node = t
	}
	ns, ok := h.cloneNamespace(q, g)
	if !ok {
		return nil, noPool(q.p["pool"])
	}
	if s := q.p["storage"]; s != "" && !q.c.StorageClassExists(s) {
		return nil, paramErr("storage", "storage '%s' does not exist", s)
	}
	if e := vmidFree(q, newID, node); e != nil {
		return nil, e
	}
	vm, errs := translate.CloneVM(g.VM(), translate.CloneRequest{
		NewID: newID, Node: node, Namespace: ns, Name: q.p["name"], Description: q.p["description"], Storage: q.p["storage"],
		NameTaken:   func(name string) bool { return q.c.VMNameTaken(ns, name) },
		VolumeTaken: func(name string) (bool, error) { return q.c.VolumeNameTaken(q.ctx(), ns, name) },
	})
	if len(errs) > 0 {
		return nil, paramError(errs)
	}
	state, e := h.stateToClone(q, g)
	if e != nil {
		return nil, e
	}
	if claim := clonesClaim(vm); claim != "" && g.InstanceMeta() != nil && !g.InstanceMeta().IsFinal() {
		// CDI waits until no pod uses the source claim (CloneSourceInUse):
		// the clone would hang until the VM stops.
		return nil, newError(http.StatusInternalServerError,
			"can't clone VM %d while it is running: KubeVirt's CDI copies claim %s only while no running guest uses it (CloneSourceInUse) - shut the VM down first", g.VMID, claim)
	}
	// As in PVE, the clone is in the pool asked for, else in none.
	h.joinPool(q.c, vm, q.p["pool"])
	_, created, e := h.createGuest(q, newID, vm, func(clone kube.Guest, made *kubevirtv1.VirtualMachine) *apiError {
		if e := h.copyCloudInit(q, g, clone); e != nil {
			return e
		}
		if _, err := q.c.CloneState(q.ctx(), made, state); err != nil {
			return kubeError(err)
		}
		return nil
	})
	if e != nil {
		return nil, e
	}
	spec := h.taskSpec(q, g, translate.TaskClone, kube.GoalProvisioned, 30*time.Minute,
		fmt.Sprintf("clone VM %d (%s/%s) to %d (%s/%s)", g.VMID, g.Namespace(), g.Name(), newID, created.Namespace, created.Name))
	// The task is about the new VM, its id the source's; it waits for the
	// state copy too, which it names (the VM carries no marker of it).
	spec.Namespace, spec.Name, spec.UID, spec.PrevVMI = created.Namespace, created.Name, created.UID, ""
	if state != nil {
		spec.Object = translate.StateClaimName(created.Name)
	}
	return h.beginSpec(q, spec)
}

// copyCloudInit gives the clone its own cloud-init Secret, rendered for
// its new MACs, with the source's password.
func (h *APIHandler) copyCloudInit(q *request, src, clone kube.Guest) *apiError {
	password := ""
	if s, err := q.c.Secret(q.ctx(), src.Namespace(), translate.CloudInitSecretName(src.VMID)); err == nil {
		password = string(s.Data["cipassword"])
	}
	return h.applyCloudInit(q, clone.VMID, clone.VM(), password, true)
}

// clonesClaim names the first source claim the clone's DataVolumes copy
// from, or "".
func clonesClaim(vm *kubevirtv1.VirtualMachine) string {
	for _, t := range vm.Spec.DataVolumeTemplates {
		if src := t.Spec.Source; src != nil && src.PVC != nil {
			return src.PVC.Name
		}
	}
	return ""
}

// stateToClone finds the claim holding the source's persistent EFI/TPM
// state (PVE's efidisk0 and tpmstate0, which its clone copies); nil when
// the source has none (never started).
func (h *APIHandler) stateToClone(q *request, g kube.Guest) (*corev1.PersistentVolumeClaim, *apiError) {
	if g.VM().Spec.Template == nil || !translate.HasPersistentState(&g.VM().Spec.Template.Spec) {
		return nil, nil
	}
	claim, err := q.c.StateClaim(q.ctx(), g.Namespace(), g.Name())
	if err != nil {
		return nil, kubeError(err)
	}
	if claim == nil {
		return nil, nil
	}
	if g.InstanceMeta() != nil && !g.InstanceMeta().IsFinal() {
		// The running guest's launcher pod mounts the claim: CDI would wait
		// for it to stop (CloneSourceInUse).
		return nil, newError(http.StatusInternalServerError,
			"can't clone VM %d while it is running: KubeVirt's CDI copies its EFI/TPM state claim %s only while no running guest uses it (CloneSourceInUse) - shut the VM down first", g.VMID, claim.Name)
	}
	return claim, nil
}
