package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// vmidParam parses the {vmid} path segment.
func vmidParam(q *request) (int, *apiError) {
	id, err := translate.ParseVMID(q.r.PathValue("vmid"))
	if err != nil {
		return 0, paramErr("vmid", "%v", err)
	}
	return id, nil
}

// missingVM is PVE's answer for a VM that is not on the node: 500 with the
// config-file text that bpg, Telmate and Ansible all match on.
func missingVM(node string, vmid int) *apiError {
	return newError(http.StatusInternalServerError, "Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", node, vmid)
}

// guest resolves {node}/{vmid}. A VM that lives on another node is missing
// here, as on PVE; an ambiguous vmid is refused, never guessed.
func (h *APIHandler) guest(q *request) (kube.Guest, *apiError) {
	n, e := h.node(q)
	if e != nil {
		return kube.Guest{}, e
	}
	id, e := vmidParam(q)
	if e != nil {
		return kube.Guest{}, e
	}
	g, err := q.c.Guest(id)
	var amb *kube.AmbiguousError
	switch {
	case errors.As(err, &amb):
		return kube.Guest{}, paramErr("vmid", "%v", amb)
	case err != nil:
		return kube.Guest{}, missingVM(n.Name, id)
	case g.Node != n.Name:
		return kube.Guest{}, missingVM(n.Name, id)
	}
	return g, nil
}

func (h *APIHandler) getQemuList(q *request) (any, *apiError) {
	n, e := h.node(q)
	if e != nil {
		return nil, e
	}
	now := time.Now()
	full, e := q.p.boolean("full", false)
	if e != nil {
		return nil, e
	}
	out := []any{}
	for _, g := range h.visibleGuests(q) {
		if g.Node != n.Name {
			continue
		}
		f := factsOf(q.c, g, now)
		if full {
			out = append(out, vmCurrent(g, f))
		} else {
			out = append(out, vmStatus(g, f))
		}
	}
	return out, nil
}

func (h *APIHandler) getQemuIndex(q *request) (any, *apiError) {
	if _, e := h.guest(q); e != nil {
		return nil, e
	}
	return subdirs("agent", "clone", "cloudinit", "config", "migrate", "pending", "resize", "rrddata", "snapshot", "status", "template", "termproxy", "vncproxy", "vncwebsocket"), nil
}

func (h *APIHandler) getQemuStatusIndex(q *request) (any, *apiError) {
	if _, e := h.guest(q); e != nil {
		return nil, e
	}
	return subdirs("current", "reboot", "reset", "resume", "shutdown", "start", "stop", "suspend"), nil
}

func (h *APIHandler) getQemuStatusCurrent(q *request) (any, *apiError) {
	g, e := h.guest(q)
	if e != nil {
		return nil, e
	}
	return vmCurrent(g, factsOf(q.c, g, time.Now())), nil
}

func (h *APIHandler) getQemuConfig(q *request) (any, *apiError) {
	g, e := h.guest(q)
	if e != nil {
		return nil, e
	}
	return translate.ConfigView(g.VM, claimLookup(q, g.Namespace())), nil
}

// getQemuPending lists the config as PVE's pending view: entries whose
// running value differs from the configured one carry "pending".
func (h *APIHandler) getQemuPending(q *request) (any, *apiError) {
	g, e := h.guest(q)
	if e != nil {
		return nil, e
	}
	return translate.PendingView(g.VM, g.VMI, claimLookup(q, g.Namespace())), nil
}

// taskTimeout reads PVE's timeout= (seconds) for power tasks.
func taskTimeout(q *request, def time.Duration) (time.Duration, *apiError) {
	t, e := q.p.integer("timeout", int64(def/time.Second), 0, 7*24*3600)
	if e != nil {
		return 0, e
	}
	return time.Duration(t) * time.Second, nil
}

// taskSpec is a task about g, its log opened with logLine.
func (h *APIHandler) taskSpec(q *request, g kube.Guest, typ string, goal kube.Goal, timeout time.Duration, logLine string) kube.TaskSpec {
	spec := kube.TaskSpec{
		Node: g.Node, Type: typ, ID: strconv.Itoa(g.VMID), User: q.id.ID(), Goal: goal,
		Namespace: g.Namespace(), Name: g.Name(), UID: g.VM.UID, Timeout: timeout,
		Log: []string{logLine},
	}
	if g.VMI != nil {
		spec.PrevVMI = g.VMI.UID
	}
	return spec
}

// beginSpec records a task and answers its UPID.
func (h *APIHandler) beginSpec(q *request, spec kube.TaskSpec) (any, *apiError) {
	t, err := q.c.Tasks.Begin(q.ctx(), spec)
	if err != nil {
		return nil, kubeError(err)
	}
	h.logger.Info("task started", zap.String("upid", t.UPID.String()), zap.String("user", spec.User), zap.String("vm", spec.Namespace+"/"+spec.Name))
	return t.UPID.String(), nil
}

// begin records a task for g. When act fails, the task is recorded as
// failed with the error, as PVE's forked worker would end.
func (h *APIHandler) begin(q *request, g kube.Guest, typ string, goal kube.Goal, timeout time.Duration, logLine string, act func(ctx context.Context) error) (any, *apiError) {
	spec := h.taskSpec(q, g, typ, goal, timeout, logLine)
	if act != nil {
		if err := act(q.ctx()); err != nil {
			spec.Err = kubeTaskError(err)
		}
	}
	return h.beginSpec(q, spec)
}

// kubeTaskError turns a Kubernetes error into a task exit status line.
func kubeTaskError(err error) error {
	if d, ok := kube.AsAdmission(err); ok {
		return errors.New(admissionMessage(d))
	}
	if msg, ok := kube.StatusMessage(err); ok {
		return errors.New(msg)
	}
	return err
}

// kubeDenied is Kubernetes' refusal of a call made for the caller.
func kubeDenied(err error) *apiError {
	e := newError(http.StatusForbidden, "Permission check failed (%v)", err)
	e.kubeDenied = true
	return e
}

// kubeError answers a failed synchronous Kubernetes call.
func kubeError(err error) *apiError {
	var taken *kube.VMIDTakenError
	denial, refused := kube.AsAdmission(err)
	switch {
	case errors.As(err, &taken):
		return newError(http.StatusInternalServerError, "%v", taken)
	case refused:
		// A refusal of what was asked, not a fault: PVE dies with the
		// reason (500), which clients show.
		return newError(http.StatusInternalServerError, "%s", admissionMessage(denial))
	case kube.IsDenied(err):
		return kubeDenied(err)
	case kube.IsConflict(err), kube.IsAlreadyExists(err):
		return newError(http.StatusInternalServerError, "%v", err)
	case kube.IsUnavailable(err):
		return newError(http.StatusServiceUnavailable, "cluster unavailable: %v", err)
	}
	return newError(http.StatusInternalServerError, "%v", err)
}

// admissionMessage words an admission webhook's refusal as PVE words its
// own: the reason, then who refused.
func admissionMessage(d *kube.AdmissionError) string {
	if d.Reason == "" {
		return fmt.Sprintf("refused by KubeVirt (admission webhook %s)", d.Webhook)
	}
	return fmt.Sprintf("%s (refused by KubeVirt's admission webhook %s)", d.Reason, d.Webhook)
}

// snapshotLocked is qemu-server's check_lock for the locks a snapshot or
// a rollback holds (kube.Cluster.SnapshotLock): a call that would change
// the VM meanwhile is refused as PVE refuses it, where KubeVirt's VM
// webhook would refuse the write ("Cannot update vm running state until
// snapshot … completes"). skiplock=1, root's way past a lock on PVE, hands
// the call to KubeVirt, whose answer then stands.
func snapshotLocked(q *request, g kube.Guest) *apiError {
	skip, e := q.p.boolean("skiplock", false)
	switch {
	case e != nil:
		return e
	case skip && q.id.ID() != "root@pam":
		return paramErr("skiplock", "Only root may use this option.")
	case skip:
		return nil
	}
	if l := q.c.SnapshotLock(g); l != "" {
		return newError(http.StatusInternalServerError, "VM is locked (%s)", l)
	}
	return nil
}

func notRunning(g kube.Guest) *apiError {
	return newError(http.StatusInternalServerError, "VM %d not running", g.VMID)
}

// postQemuStatus starts, stops, shuts down, reboots, resets, suspends or
// resumes a VM, answering a UPID whose task ends when KubeVirt reports the
// new state.
func (h *APIHandler) postQemuStatus(q *request) (any, *apiError) {
	g, e := h.guest(q)
	if e != nil {
		return nil, e
	}
	if e := snapshotLocked(q, g); e != nil {
		return nil, e
	}
	action := q.r.PathValue("action")
	c := q.c
	vmid := g.VMID
	switch action {
	case "start":
		to, e := taskTimeout(q, 5*time.Minute)
		if e != nil {
			return nil, e
		}
		line := fmt.Sprintf("starting VM %d (%s/%s)", vmid, g.Namespace(), g.Name())
		if g.Template() {
			return h.begin(q, g, translate.TaskStart, kube.GoalRunning, to, line, func(context.Context) error {
				return errors.New("you can't start a vm if it's a template")
			})
		}
		if g.State().Running() {
			return h.begin(q, g, translate.TaskStart, kube.GoalRunning, to, line, func(context.Context) error {
				return fmt.Errorf("VM %d already running", vmid)
			})
		}
		return h.begin(q, g, translate.TaskStart, kube.GoalRunning, to, line, func(ctx context.Context) error { return c.StartVM(ctx, g) })
	case "stop":
		to, e := taskTimeout(q, 5*time.Minute)
		if e != nil {
			return nil, e
		}
		line := fmt.Sprintf("stopping VM %d (%s/%s)", vmid, g.Namespace(), g.Name())
		if !g.State().Running() && g.VMI == nil {
			return h.begin(q, g, translate.TaskStop, kube.GoalStopped, to, line, nil)
		}
		zero := int64(0)
		return h.begin(q, g, translate.TaskStop, kube.GoalStopped, to, line, func(ctx context.Context) error { return c.StopVM(ctx, g, &zero) })
	case "shutdown":
		to, e := taskTimeout(q, 0)
		if e != nil {
			return nil, e
		}
		forceStop, e := q.p.boolean("forceStop", false)
		if e != nil {
			return nil, e
		}
		deadline := to + 2*time.Minute
		line := fmt.Sprintf("shutting down VM %d (%s/%s)", vmid, g.Namespace(), g.Name())
		// As on PVE, shutting down a stopped VM is a task that ends OK
		// (Terraform shuts down right after reading the status, racing
		// a guest that powers off by itself).
		if !g.State().Running() && g.VMI == nil {
			return h.begin(q, g, translate.TaskShutdown, kube.GoalStopped, deadline, line, nil)
		}
		var grace *int64
		if to > 0 {
			s := int64(to / time.Second)
			grace = &s
		}
		// A paused guest cannot react to ACPI: PVE refuses, or stops it
		// with forceStop.
		if g.State().QMPStatus == translate.QMPPaused {
			if !forceStop {
				return nil, newError(http.StatusInternalServerError, "VM is paused - cannot shutdown")
			}
			zero := int64(0)
			grace = &zero
		}
		return h.begin(q, g, translate.TaskShutdown, kube.GoalStopped, deadline, line, func(ctx context.Context) error { return c.StopVM(ctx, g, grace) })
	case "reboot":
		to, e := taskTimeout(q, 5*time.Minute)
		if e != nil {
			return nil, e
		}
		if !g.State().Running() {
			return nil, notRunning(g)
		}
		line := fmt.Sprintf("rebooting VM %d (%s/%s)", vmid, g.Namespace(), g.Name())
		return h.begin(q, g, translate.TaskReboot, kube.GoalRestarted, to, line, func(ctx context.Context) error { return c.RestartVM(ctx, g) })
	case "reset":
		if !g.State().Running() {
			return nil, notRunning(g)
		}
		if err := c.ResetVM(q.ctx(), g); err != nil {
			return nil, powerError(err)
		}
		return h.begin(q, g, translate.TaskReset, kube.GoalNone, 0, fmt.Sprintf("resetting VM %d", vmid), nil)
	case "suspend":
		todisk, e := q.p.boolean("todisk", false)
		if e != nil {
			return nil, e
		}
		if todisk {
			return nil, newError(http.StatusNotImplemented, "suspend to disk (hibernate) is not supported: KubeVirt cannot save a VM's RAM state")
		}
		if !g.State().Running() {
			return nil, notRunning(g)
		}
		if err := c.PauseVM(q.ctx(), g); err != nil {
			return nil, powerError(err)
		}
		return h.begin(q, g, translate.TaskSuspend, kube.GoalPaused, time.Minute, fmt.Sprintf("suspending VM %d", vmid), nil)
	case "resume":
		if g.VMI == nil || g.VMI.IsFinal() {
			return nil, notRunning(g)
		}
		if err := c.UnpauseVM(q.ctx(), g); err != nil {
			return nil, powerError(err)
		}
		return h.begin(q, g, translate.TaskResume, kube.GoalResumed, time.Minute, fmt.Sprintf("resuming VM %d", vmid), nil)
	}
	return nil, newError(http.StatusNotImplemented, "Method 'POST %s' not implemented", q.r.URL.Path[len("/api2/json"):])
}

// powerError answers a refused synchronous power call.
func powerError(err error) *apiError {
	if errors.Is(err, kube.ErrNeedsVirtAPI) {
		return newError(http.StatusNotImplemented, "%v", err)
	}
	return kubeError(err)
}
