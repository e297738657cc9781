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

// missingVM is PVE's answer for a VM that is not on the node: 500 with the
// config-file text that bpg, Telmate and Ansible all match on.
func missingVM(node string, vmid int) *apiError {
	return newError(http.StatusInternalServerError, "Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", node, vmid)
}

// guest resolves {node}/{vmid} (the VM the permission check resolved). A
// VM that lives on another node is missing here, as on PVE; an ambiguous
// vmid is refused, never guessed.
func (h *APIHandler) guest(q *request) (kube.Guest, *apiError) {
	n, e := h.node(q)
	if e != nil {
		return kube.Guest{}, e
	}
	v := q.pathVM()
	var amb *kube.AmbiguousError
	switch {
	case v.idErr != nil:
		return kube.Guest{}, paramErr("vmid", "%v", v.idErr)
	case v.err == nil && v.g.Node == n.Name:
		return v.g, nil
	case errors.As(v.err, &amb):
		return kube.Guest{}, paramErr("vmid", "%v", amb)
	case v.err != nil, v.g.Node != n.Name:
		return kube.Guest{}, missingVM(n.Name, v.id)
	}
	return v.g, nil
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
	rows := h.visibleRows(q, h.vmRows(q.c).rows(q.c))
	body := newBody(len(rows)*rowSizeHint + 64)
	body.b = append(body.b, '[')
	first := true
	for _, row := range rows {
		if row.in.objects.node != n.Name {
			continue
		}
		if !first {
			body.b = append(body.b, ',')
		}
		first = false
		if full {
			body.b = row.appendCurrent(body.b, now)
		} else {
			body.b = row.appendStatus(body.b, now)
		}
	}
	body.b = append(body.b, ']')
	return body, nil
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
	body := newBody(1024)
	body.b = h.vmRows(q.c).row(q.c, g).appendCurrent(body.b, time.Now())
	return body, nil
}

func (h *APIHandler) getQemuConfig(q *request) (any, *apiError) {
	g, e := h.guest(q)
	if e != nil {
		return nil, e
	}
	return translate.ConfigView(g.VM(), claimLookup(q, g.Namespace())), nil
}

// getQemuPending lists the config as PVE's pending view: entries whose
// running value differs from the configured one carry "pending".
func (h *APIHandler) getQemuPending(q *request) (any, *apiError) {
	g, e := h.guest(q)
	if e != nil {
		return nil, e
	}
	return translate.PendingView(g.VM(), g.VMI(), claimLookup(q, g.Namespace())), nil
}

// taskTimeout reads PVE's timeout= (seconds) for power tasks.
// pveShutdownTimeout is how long PVE's shutdown waits without timeout.
const pveShutdownTimeout = 60 * time.Second

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
		Namespace: g.Namespace(), Name: g.Name(), UID: g.Meta().UID, Timeout: timeout,
		Log: []string{logLine},
	}
	if g.InstanceMeta() != nil {
		spec.PrevVMI = g.InstanceMeta().UID
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

// guestTask is a task about one guest, as begin records it.
type guestTask struct {
	typ     string        // PVE's task type (translate.TaskStart...)
	goal    kube.Goal     // the state that ends it
	timeout time.Duration // how long reaching the goal may take (0: no limit)
	log     string        // the first line of its log
	more    []string      // further lines
	// act makes the change; when it fails, the task is recorded as failed
	// with the error, as PVE's forked worker would end. nil: nothing to do.
	act func(ctx context.Context) error
}

// begin runs t's change on g and records the task.
func (h *APIHandler) begin(q *request, g kube.Guest, t guestTask) (any, *apiError) {
	spec := h.taskSpec(q, g, t.typ, t.goal, t.timeout, t.log)
	spec.Log = append(spec.Log, t.more...)
	if t.act != nil {
		if err := t.act(q.ctx()); err != nil {
			spec.Err = kubeTaskError(err)
		}
	}
	return h.beginSpec(q, spec)
}

// stopAfterStart records t for a VM whose start KubeVirt has not acted on
// yet (no instance, a start request pending) and stops the VM once the
// instance exists: answering OK at once would leave the start to bring the
// VM up after its stop, and waiting for a stopped state nothing would
// cause would never end.
func (h *APIHandler) stopAfterStart(q *request, g kube.Guest, t guestTask, grace *int64) (any, *apiError) {
	spec := h.taskSpec(q, g, t.typ, kube.GoalStoppedAfterStart, t.timeout, t.log)
	spec.Log = append(spec.Log, "waiting for the pending start (KubeVirt has not created the instance yet)")
	upid, e := h.beginSpec(q, spec)
	if e != nil {
		return nil, e
	}
	q.c.StopAfterStart(q.ctx(), g, grace, upid.(string))
	return upid, nil
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
	action := q.pathValue("action")
	c := q.c
	vmid := g.VMID
	if res, handled, e := h.haPower(q, g, action); handled {
		return res, e
	}
	switch action {
	case "start":
		to, e := taskTimeout(q, 5*time.Minute)
		if e != nil {
			return nil, e
		}
		line := fmt.Sprintf("starting VM %d (%s/%s)", vmid, g.Namespace(), g.Name())
		if g.Template() {
			return h.begin(q, g, guestTask{typ: translate.TaskStart, goal: kube.GoalRunning, timeout: to, log: line, act: func(context.Context) error {
				return errors.New("you can't start a vm if it's a template")
			}})
		}
		if g.State().Running() {
			return h.begin(q, g, guestTask{typ: translate.TaskStart, goal: kube.GoalRunning, timeout: to, log: line, act: func(context.Context) error {
				return fmt.Errorf("VM %d already running", vmid)
			}})
		}
		return h.begin(q, g, guestTask{typ: translate.TaskStart, goal: kube.GoalRunning, timeout: to, log: line, act: func(ctx context.Context) error { return c.StartVM(ctx, g) }})
	case "stop":
		to, e := taskTimeout(q, 5*time.Minute)
		if e != nil {
			return nil, e
		}
		line := fmt.Sprintf("stopping VM %d (%s/%s)", vmid, g.Namespace(), g.Name())
		zero := int64(0)
		if !g.State().Running() && (g.InstanceMeta() == nil || g.InstanceMeta().IsFinal()) {
			if kube.StartPending(g.Meta()) {
				return h.stopAfterStart(q, g, guestTask{typ: translate.TaskStop, timeout: to, log: line}, &zero)
			}
			return h.begin(q, g, guestTask{typ: translate.TaskStop, goal: kube.GoalStopped, timeout: to, log: line})
		}
		return h.begin(q, g, guestTask{typ: translate.TaskStop, goal: kube.GoalStopped, timeout: to, log: line, act: func(ctx context.Context) error { return c.StopVM(ctx, g, &zero) }})
	case "shutdown":
		// PVE waits timeout seconds (60 without it) for the guest to power
		// off (qemu-server vm_stop).
		to, e := taskTimeout(q, pveShutdownTimeout)
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
		// a guest that powers off by itself). A finished instance that
		// KubeVirt has not deleted yet is stopped too: virt-api answers a
		// stop of it with 409 "VM is not running".
		// KubeVirt's stop is an ACPI shutdown with a grace period, after
		// which virt-handler kills the guest (without one: the instance's
		// terminationGracePeriodSeconds, else 30 seconds). The grace
		// period is PVE's wait: with forceStop that is PVE's shutdown;
		// without it PVE would leave a guest that ignores the request
		// running and fail the task, which KubeVirt cannot (a stop is
		// not taken back), and the log says so.
		grace := int64(to / time.Second)
		if !g.State().Running() && (g.InstanceMeta() == nil || g.InstanceMeta().IsFinal()) {
			if kube.StartPending(g.Meta()) {
				return h.stopAfterStart(q, g, guestTask{typ: translate.TaskShutdown, timeout: deadline, log: line}, &grace)
			}
			return h.begin(q, g, guestTask{typ: translate.TaskShutdown, goal: kube.GoalStopped, timeout: deadline, log: line})
		}
		log := []string{line}
		// A paused guest cannot react to ACPI: PVE refuses, or stops it
		// with forceStop.
		if g.State().QMPStatus == translate.QMPPaused {
			if !forceStop {
				return nil, newError(http.StatusInternalServerError, "VM is paused - cannot shutdown")
			}
			grace = 0
		} else if !forceStop {
			log = append(log, fmt.Sprintf("waiting up to %d seconds for the guest to power off; KubeVirt then stops it hard (PVE without forceStop would leave it running)", grace))
		}
		return h.begin(q, g, guestTask{typ: translate.TaskShutdown, goal: kube.GoalStopped, timeout: deadline, log: log[0], more: log[1:],
			act: func(ctx context.Context) error { return c.StopVM(ctx, g, &grace) }})
	case "reboot":
		to, e := taskTimeout(q, 5*time.Minute)
		if e != nil {
			return nil, e
		}
		if !g.State().Running() {
			return nil, notRunning(g)
		}
		line := fmt.Sprintf("rebooting VM %d (%s/%s)", vmid, g.Namespace(), g.Name())
		return h.begin(q, g, guestTask{typ: translate.TaskReboot, goal: kube.GoalRestarted, timeout: to, log: line, act: func(ctx context.Context) error { return c.RestartVM(ctx, g) }})
	case "reset":
		if !g.State().Running() {
			return nil, notRunning(g)
		}
		if err := c.ResetVM(q.ctx(), g); err != nil {
			return nil, powerError(err)
		}
		return h.begin(q, g, guestTask{typ: translate.TaskReset, goal: kube.GoalNone, log: fmt.Sprintf("resetting VM %d", vmid)})
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
		return h.begin(q, g, guestTask{typ: translate.TaskSuspend, goal: kube.GoalPaused, timeout: time.Minute, log: fmt.Sprintf("suspending VM %d", vmid)})
	case "resume":
		if g.InstanceMeta() == nil || g.InstanceMeta().IsFinal() {
			return nil, notRunning(g)
		}
		if err := c.UnpauseVM(q.ctx(), g); err != nil {
			return nil, powerError(err)
		}
		return h.begin(q, g, guestTask{typ: translate.TaskResume, goal: kube.GoalResumed, timeout: time.Minute, log: fmt.Sprintf("resuming VM %d", vmid)})
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
