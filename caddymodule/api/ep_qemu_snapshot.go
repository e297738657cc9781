package api

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// snapshotRow is a row of GET …/snapshot.
type snapshotRow struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	SnapTime    int64  `json:"snaptime,omitempty"`
	Parent      string `json:"parent,omitempty"`
	VMState     *int   `json:"vmstate,omitempty"`
	Running     int    `json:"running,omitempty"`
}

func snapshotError(err error) *apiError {
	switch {
	case errors.Is(err, kube.ErrNoSnapshotAPI):
		return newError(http.StatusNotImplemented, "%v", err)
	case errors.Is(err, kube.ErrSnapshotsOff), errors.Is(err, kube.ErrSnapshotUnavailable), errors.Is(err, kube.ErrRollbackImpossible):
		// PVE's refusal when the storage cannot snapshot: a 500.
		return newError(http.StatusInternalServerError, "%v", err)
	}
	return kubeError(err)
}

// getQemuSnapshots lists the snapshots as PVE's chain: each one's parent is
// the one before it (KubeVirt's are independent, ordered by time), and the
// pseudo-entry "current" follows the newest.
func (h *APIHandler) getQemuSnapshots(q *request) (any, *apiError) {
	g, e := h.guest(q)
	if e != nil {
		return nil, e
	}
	snaps, err := q.c.Snapshots(g)
	if err != nil {
		return nil, snapshotError(err)
	}
	out := []snapshotRow{}
	parent := ""
	zero := 0
	for _, s := range snaps {
		row := snapshotRow{Name: s.Name, Description: s.Description, Parent: parent, VMState: &zero}
		if s.Obj.Status != nil && s.Obj.Status.CreationTime != nil {
			row.SnapTime = s.Obj.Status.CreationTime.Unix()
		} else {
			row.SnapTime = s.Obj.CreationTimestamp.Unix()
		}
		out = append(out, row)
		parent = s.Name
	}
	cur := snapshotRow{Name: "current", Description: "You are here!", Parent: parent}
	if g.State().Running() {
		cur.Running = 1
	}
	return append(out, cur), nil
}

// snapshot resolves {node}/{vmid}/snapshot/{snapname}.
func (h *APIHandler) snapshot(q *request) (kube.Guest, kube.Snapshot, *apiError) {
	g, e := h.guest(q)
	if e != nil {
		return g, kube.Snapshot{}, e
	}
	s, e := h.findSnapshot(q, g)
	return g, s, e
}

// findSnapshot resolves {snapname}.
func (h *APIHandler) findSnapshot(q *request, g kube.Guest) (kube.Snapshot, *apiError) {
	name := q.pathValue("snapname")
	snaps, err := q.c.Snapshots(g)
	if err != nil {
		return kube.Snapshot{}, snapshotError(err)
	}
	for _, s := range snaps {
		if s.Name == name {
			return s, nil
		}
	}
	return kube.Snapshot{}, newError(http.StatusInternalServerError, "snapshot '%s' does not exist", name)
}

// postQemuSnapshot takes a VirtualMachineSnapshot. vmstate (RAM) cannot be
// saved by KubeVirt and is refused.
func (h *APIHandler) postQemuSnapshot(q *request) (any, *apiError) {
	g, e := h.guest(q)
	if e != nil {
		return nil, e
	}
	name, ok, e := q.p.str("snapname")
	if e != nil {
		return nil, e
	}
	if !ok {
		return nil, paramErr("snapname", "property is missing and it is not optional")
	}
	if e := snapshotLocked(q, g); e != nil {
		return nil, e
	}
	if err := translate.ValidSnapName(name); err != nil {
		return nil, paramErr("snapname", "%v", err)
	}
	if vmstate, e := q.p.boolean("vmstate", false); e != nil {
		return nil, e
	} else if vmstate {
		// A refusal of a valid request: a 500 whose reason clients show.
		return nil, newError(http.StatusInternalServerError, "saving the RAM state is not supported: KubeVirt snapshots hold disks only")
	}
	snaps, err := q.c.Snapshots(g)
	if err != nil {
		return nil, snapshotError(err)
	}
	for _, s := range snaps {
		if s.Name == name {
			return nil, newError(http.StatusInternalServerError, "snapshot name '%s' already used", name)
		}
	}
	obj, err := q.c.CreateSnapshot(q.ctx(), g, name, q.p["description"])
	if err != nil {
		return nil, snapshotError(err)
	}
	spec := h.taskSpec(q, g, translate.TaskSnapshot, kube.GoalSnapshotReady, 10*time.Minute, fmt.Sprintf("snapshot VM %d as '%s' (%s)", g.VMID, name, obj.Name))
	spec.Object = obj.Name
	return h.beginSpec(q, spec)
}

// deleteQemuSnapshot removes a snapshot; the task ends when it is gone.
func (h *APIHandler) deleteQemuSnapshot(q *request) (any, *apiError) {
	g, s, e := h.snapshot(q)
	if e != nil {
		return nil, e
	}
	if e := snapshotLocked(q, g); e != nil {
		return nil, e
	}
	if err := q.c.DeleteSnapshot(q.ctx(), s.Obj); err != nil {
		return nil, snapshotError(err)
	}
	spec := h.taskSpec(q, g, translate.TaskDelSnapshot, kube.GoalSnapshotGone, 5*time.Minute, fmt.Sprintf("delete snapshot '%s' of VM %d", s.Name, g.VMID))
	spec.Object = s.Obj.Name
	return h.beginSpec(q, spec)
}

// postQemuRollback restores a snapshot. Like PVE's rollback it stops a
// running VM first (the restore's StopTarget policy); the VM is left
// stopped, as PVE leaves it for a snapshot without RAM state, unless
// start=1 asks the task to start it.
func (h *APIHandler) postQemuRollback(q *request) (any, *apiError) {
	g, s, e := h.snapshot(q)
	if e != nil {
		return nil, e
	}
	start, e := q.p.boolean("start", false)
	if e != nil {
		return nil, e
	}
	if e := snapshotLocked(q, g); e != nil {
		return nil, e
	}
	r, err := q.c.RestoreSnapshot(q.ctx(), g, s.Obj, s.Name)
	if err != nil {
		return nil, snapshotError(err)
	}
	goal := kube.GoalRestored
	if start {
		goal = kube.GoalRestoredStarted
	}
	spec := h.taskSpec(q, g, translate.TaskRollback, goal, 10*time.Minute, fmt.Sprintf("rollback VM %d to snapshot '%s' (%s)", g.VMID, s.Name, r.Name))
	spec.Object = r.Name
	return h.beginSpec(q, spec)
}

func (h *APIHandler) getQemuSnapshotIndex(q *request) (any, *apiError) {
	if _, _, e := h.snapshot(q); e != nil {
		return nil, e
	}
	return subdirs("config", "rollback"), nil
}

// getQemuSnapshotConfig is the config the snapshot holds, from the VM copy
// in its snapshot content when KubeVirt recorded one.
func (h *APIHandler) getQemuSnapshotConfig(q *request) (any, *apiError) {
	g, s, e := h.snapshot(q)
	if e != nil {
		return nil, e
	}
	vm := g.VM()
	if snap, err := q.c.SnapshotVM(q.ctx(), s.Obj); err == nil && snap != nil {
		vm = snap
	}
	view := translate.ConfigView(vm, claimLookup(q, g.Namespace()))
	delete(view, "digest")
	view["snaptime"] = s.Obj.CreationTimestamp.Unix()
	view["description"] = s.Description
	return view, nil
}

func (h *APIHandler) putQemuSnapshotConfig(q *request) (any, *apiError) {
	_, s, e := h.snapshot(q)
	if e != nil {
		return nil, e
	}
	if e := q.p.allowOnly("description"); e != nil {
		return nil, e
	}
	if err := q.c.SetSnapshotDescription(q.ctx(), s.Obj, q.p["description"]); err != nil {
		return nil, snapshotError(err)
	}
	return nil, nil
}

// getQemuFeature is qemu-server's vm_feature: whether the VM's storage
// can take a snapshot, a linked clone (clone) or a full copy (copy), and
// the nodes that have all of its storage (every node: StorageClasses are
// the cluster's).
//   - snapshot: the check a snapshot's refusal makes (kube.CanSnapshot);
//     with snapname, of that snapshot (which must exist).
//   - copy: CDI copies a claim only while no guest uses it
//     (CloneSourceInUse), so not while the VM runs, as the clone refuses.
//   - clone: a linked clone is PVE's from a template's base volumes; the
//     clone of a template is a CDI copy here, which serves full=0.
func (h *APIHandler) getQemuFeature(q *request) (any, *apiError) {
	g, e := h.guest(q)
	if e != nil {
		return nil, e
	}
	if e := q.p.allowOnly("feature", "snapname"); e != nil {
		return nil, e
	}
	feature, ok, e := q.p.str("feature")
	if e != nil {
		return nil, e
	}
	if !ok {
		return nil, paramErr("feature", "property is missing and it is not optional")
	}
	if snap := q.p["snapname"]; snap != "" {
		snaps, err := q.c.Snapshots(g)
		if err != nil {
			return nil, snapshotError(err)
		}
		if !slices.ContainsFunc(snaps, func(s kube.Snapshot) bool { return s.Name == snap }) {
			return nil, newError(http.StatusInternalServerError, "snapshot '%s' does not exist", snap)
		}
	}
	running := g.InstanceMeta() != nil && !g.InstanceMeta().IsFinal()
	var has bool
	switch feature {
	case "snapshot":
		has = q.c.CanSnapshot(g) == nil
	case "copy":
		has = !running
	case "clone":
		has = !running && g.Meta().Labels[translate.LabelTemplate] == "true"
	default:
		return nil, paramErr("feature", "value '%s' does not have a value in the enumeration 'snapshot, clone, copy'", feature)
	}
	nodes := []string{}
	for _, n := range h.nodes() {
		nodes = append(nodes, n.Name)
	}
	sort.Strings(nodes)
	return map[string]any{"hasFeature": boolInt(has), "nodes": nodes}, nil
}
