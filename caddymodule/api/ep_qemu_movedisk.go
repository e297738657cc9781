package api

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// taskMove is qemu-server's move_disk worker.
const taskMove = "qmmove"

// moveDiskTimeout bounds the copy of a disk.
const moveDiskTimeout = 12 * time.Hour

// postQemuMoveDisk moves a disk of a stopped VM to another storage as
// qemu-server's move_vm_disk does: the disk becomes a new volume on the
// target StorageClass, a CDI clone of its claim (import-from, see
// translate.MoveDisk), the old volume stays as unusedN, or, with
// delete=1, is deleted once the copy is done. The qmmove task ends when
// the copy is (or failed).
//
// A running VM's disk is refused: KubeVirt moves a running VM's storage
// only by a volume migration (updateVolumesStrategy: Migration), which
// needs the cluster's LiveUpdate rollout and LiveMigrate workload update
// settings, a second node and a live-migratable VM, and which, when
// KubeVirt cannot migrate, leaves the VM set to restart onto the blank
// destination; reassigning a disk to another VM (target-vmid) is refused
// too: a claim cannot be renamed or change its owning VM's namespace, and
// the owner reference would make it go with the old VM.
func (h *APIHandler) postQemuMoveDisk(q *request) (any, *apiError) {
	if e := q.p.allowOnly("disk", "storage", "format", "delete", "digest", "bwlimit", "target-vmid", "target-disk", "target-digest"); e != nil {
		return nil, e
	}
	errs := map[string]string{}
	disk, hasDisk := q.p["disk"]
	switch {
	case !hasDisk:
		errs["disk"] = "property is missing and it is not optional"
	case !translate.ValidConfigKey(disk) || !(translate.Movable(disk) || strings.HasPrefix(disk, "unused") || disk == "efidisk0" || disk == "tpmstate0"):
		errs["disk"] = fmt.Sprintf("value '%s' does not have a value in the enumeration", disk)
	}
	format := q.p["format"]
	if _, ok := q.p["format"]; ok && !oneOf(format, "raw", "qcow2", "vmdk") {
		errs["format"] = fmt.Sprintf("value '%s' does not have a value in the enumeration 'raw, qcow2, vmdk'", format)
	}
	if _, e := q.p.integer("bwlimit", 0, 0, 1<<40); e != nil {
		errs["bwlimit"] = e.Errors["bwlimit"]
	}
	del, e := q.p.boolean("delete", false)
	if e != nil {
		errs["delete"] = e.Errors["delete"]
	}
	storage, hasStorage := q.p["storage"]
	_, hasTarget := q.p["target-vmid"]
	switch {
	case hasStorage && hasTarget:
		msg := "either set 'storage' or 'target-vmid', but not both"
		errs["target-vmid"], errs["storage"] = msg, msg
	case !hasStorage && !hasTarget:
		msg := "both 'storage' and 'target-vmid' missing, either needs to be set"
		errs["target-vmid"], errs["storage"] = msg, msg
	}
	if len(errs) > 0 {
		return nil, paramError(errs)
	}
	if hasTarget {
		return nil, newError(http.StatusInternalServerError, "reassigning a disk to another VM is not supported: its claim cannot be renamed, and it belongs to this VM's VirtualMachine object (move the data with a clone instead)")
	}
	g, e := h.guest(q)
	if e != nil {
		return nil, e
	}
	if e := vmLocked(q.c, g); e != nil {
		return nil, e
	}
	cfg := translate.ConfigView(g.VM(), claimLookup(q, g.Namespace()))
	if d := q.p["digest"]; d != "" && cfg["digest"] != d {
		return nil, newError(http.StatusInternalServerError, "%v", kube.ErrModified)
	}
	stored := translate.StoredConfig(g.VM())
	if _, ok := stored[disk]; !ok {
		if _, shown := cfg[disk]; shown {
			return nil, newError(http.StatusInternalServerError, "disk '%s' cannot be moved: it is a disk of the VirtualMachine object not made through this API", disk)
		}
	}
	if disk == "efidisk0" || disk == "tpmstate0" {
		return nil, newError(http.StatusInternalServerError, "disk '%s' cannot be moved: KubeVirt keeps the EFI variables and the TPM state in its own backend storage (the cluster's vmStateStorageClass), not in a volume of the VM", disk)
	}
	if strings.HasPrefix(disk, "unused") {
		if _, ok := stored[disk]; !ok {
			return nil, newError(http.StatusInternalServerError, "disk '%s' does not exist", disk)
		}
		return nil, newError(http.StatusInternalServerError, "moving an unused disk is not supported here: attach it, move it, and detach it again")
	}
	move, err := translate.PlanMoveDisk(stored, disk, storage, format)
	if err != nil {
		return nil, newError(http.StatusInternalServerError, "%v", err)
	}
	if !h.storageExists(q, storage) {
		return nil, noStorage(storage)
	}
	if !q.c.StorageClassExists(storage) {
		return nil, paramErr("storage", "storage '%s' does not support vm images", storage)
	}
	if del {
		if snaps, err := q.c.Snapshots(g); err == nil && len(snaps) > 0 {
			return nil, newError(http.StatusInternalServerError, "you can't move a disk with snapshots and delete the source")
		}
	}
	if g.State().Running() {
		return nil, newError(http.StatusInternalServerError, "cannot move disk '%s' of a running VM: KubeVirt moves a running VM's storage only by a volume migration, which needs the cluster's LiveUpdate rollout and LiveMigrate settings and can leave the VM to restart onto an empty disk; shut the VM down and move it then", disk)
	}
	if !q.c.HasCDI() {
		return nil, newError(http.StatusInternalServerError, "%v", kube.ErrNoCDI)
	}
	value, err := move.MovedValue(stored)
	if err != nil {
		return nil, newError(http.StatusInternalServerError, "%v", err)
	}
	oldVolid := move.Storage + ":" + move.Volume
	var newClaim string
	g, e = h.rewrite(q, g, func(g kube.Guest) (*kubevirtv1.VirtualMachine, *apiError) {
		req := h.vmRequest(q, g.VMID, g.Node, g.Namespace(), map[string]string{disk: value})
		u, errs := translate.UpdateVMChange(g.VM(), req, nil)
		if len(errs) > 0 {
			return nil, paramError(errs)
		}
		want := u.VM
		if g.Template() {
			translate.MarkTemplate(want) // the moved disk is a template's too: base- name
		}
		after := translate.StoredConfig(want)
		if _, vol, ok := strings.Cut(strings.SplitN(after[disk], ",", 2)[0], ":"); ok {
			newClaim = translate.ClaimOfVolume(vol)
		}
		return want, nil
	}, translate.AnnotationConfig, translate.AnnotationDiskKeys)
	if e != nil {
		return nil, e
	}
	spec := h.taskSpec(q, g, taskMove, kube.GoalMoved, moveDiskTimeout,
		fmt.Sprintf("copying volume '%s' from current storage '%s' to target storage '%s'", oldVolid, move.Storage, storage))
	spec.Target = newClaim
	spec.Log = append(spec.Log, fmt.Sprintf("create full clone of drive %s (%s): CDI clones claim %s into a claim of StorageClass %s", disk, oldVolid, move.Claim, storage))
	if del {
		spec.Object = oldVolid
	} else {
		after := translate.StoredConfig(h.freshVM(q, g))
		for k, v := range after {
			if strings.HasPrefix(k, "unused") && strings.HasPrefix(v, move.Storage+":") && translate.ClaimOfVolume(strings.TrimPrefix(v, move.Storage+":")) == move.Claim {
				spec.Log = append(spec.Log, fmt.Sprintf("adding source volume '%s' as '%s' to config", oldVolid, k))
			}
		}
	}
	if bw := q.p["bwlimit"]; bw != "" && bw != "0" {
		spec.Log = append(spec.Log, "bwlimit "+bw+" KiB/s noted: CDI's clone has no bandwidth limit")
	}
	return h.beginSpec(q, spec)
}

// freshVM is g's VM as the cache has it after a write (the write's answer
// is cached at once), else g's.
func (h *APIHandler) freshVM(q *request, g kube.Guest) *kubevirtv1.VirtualMachine {
	if fresh, err := q.c.Refresh(q.ctx(), g); err == nil {
		return fresh.VM()
	}
	return g.VM()
}

// moveDiskNeeds: VM.Config.Disk on the VM and Datastore.AllocateSpace on
// the target storage, as PVE's move_vm_disk checks.
func moveDiskNeeds(h *APIHandler, q *request) []check {
	out := vmNeeds(translate.PrivConfigDisk)(h, q)
	if st := q.p["storage"]; st != "" && len(out) > 0 {
		out = append(out, check{path: "/storage/" + st, ns: out[0].ns, privs: []string{"Datastore.AllocateSpace"}})
	}
	return out
}
