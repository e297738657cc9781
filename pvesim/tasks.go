package pvesim

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// task is one PVE worker task. Fields are guarded by sim.mu.
type task struct {
	upid, node, typ, id, user string
	pid, pstart               int
	start, end                time.Time
	done                      bool
	exit                      string
	log                       []string
}

// newTaskLocked registers a task that finishes after delay by calling
// finish (with sim.mu held), which returns the exit status ("OK" or an
// error text) and extra log lines. Called with sim.mu held.
func (s *Sim) newTaskLocked(node, typ, id string, delay time.Duration, finish func() (string, []string)) *task {
	s.pid++
	now := time.Now()
	t := &task{
		node: node, typ: typ, id: id, user: s.opts.TokenID,
		pid: s.pid, pstart: int(now.Sub(s.started)/(10*time.Millisecond)) + 1000,
		start: now,
	}
	t.upid = fmt.Sprintf("UPID:%s:%08X:%08X:%08X:%s:%s:%s:", node, t.pid, t.pstart, now.Unix(), typ, id, t.user)
	t.log = append(t.log, fmt.Sprintf("%s %s started", typ, id))
	s.tasks[t.upid] = t
	complete := func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed || t.done {
			return
		}
		exit, lines := finish()
		t.log = append(t.log, lines...)
		t.done, t.exit, t.end = true, exit, time.Now()
		switch {
		case exit == "OK":
			t.log = append(t.log, "TASK OK")
		case strings.HasPrefix(exit, "WARNINGS"):
			t.log = append(t.log, "TASK "+exit)
		default:
			t.log = append(t.log, "TASK ERROR: "+exit)
		}
		s.logf("pvesim: task %s finished: %s", t.upid, exit)
	}
	if delay <= 0 {
		// Still asynchronous: PVE answers the UPID before the worker ends.
		delay = time.Millisecond
	}
	time.AfterFunc(delay, complete)
	return t
}

// taskStatus is the task's /status answer.
func (t *task) statusRow() map[string]any {
	row := map[string]any{
		"upid": t.upid, "node": t.node, "pid": t.pid, "pstart": t.pstart,
		"starttime": t.start.Unix(), "type": t.typ, "id": t.id, "user": t.user,
		"status": "running",
	}
	if i := strings.Index(t.user, "!"); i > 0 {
		row["tokenid"] = t.user[i+1:]
	}
	if t.done {
		row["status"] = "stopped"
		row["exitstatus"] = t.exit
		row["endtime"] = t.end.Unix()
	}
	return row
}

// logRows is the task's /log answer for start and limit.
func (t *task) logRows(start, limit int) ([]map[string]any, int) {
	rows := []map[string]any{}
	for i, line := range t.log {
		if i < start || (limit > 0 && len(rows) >= limit) {
			continue
		}
		rows = append(rows, map[string]any{"n": i + 1, "t": line})
	}
	return rows, len(t.log)
}

// powerTaskType is PVE's worker type for a power action.
func powerTaskType(kind, action string) string {
	p := "vz"
	if kind == "qemu" {
		p = "qm"
	}
	return p + action
}

// powerLocked runs a power action on g and returns its UPID, or a PVE
// error. Like PVE, the API checks only what it can see at once (running
// or not, HA or not) and answers a UPID; the worker checks the config
// (template, lock) and fails the task. For an HA-managed guest, start,
// stop and shutdown only ask HA (hastart/hastop tasks that end OK before
// anything happens), as qemu-server's and pve-container's API do.
// Called with sim.mu held.
func (s *Sim) powerLocked(g *guest, action string, params map[string]string) (string, *apiError) {
	label, vmid := g.kindLabel(), g.spec.VMID
	lxc := g.spec.Kind == "lxc"
	running := g.status == "running"
	delay := s.opts.TaskDelay
	var finish func() (string, []string)
	switch action {
	case "start":
		if lxc && running {
			return "", newErr(500, "CT %d already running", vmid)
		}
		if g.ha.managed() {
			return s.haTaskLocked(g, "hastart", fmt.Sprintf("Requesting HA start for %s %d", label, vmid), func() { s.haStartLocked(g) }), nil
		}
		if g.spec.StartDelay > 0 {
			delay = g.spec.StartDelay
		}
		finish = func() (string, []string) { return g.startWorkerLocked() }
	case "stop":
		if lxc && !running {
			return "", newErr(500, "CT %d not running", vmid)
		}
		if g.ha.managed() {
			return s.haTaskLocked(g, "hastop", fmt.Sprintf("Requesting HA stop for %s %d", label, vmid), func() { s.haStopLocked(g, 0) }), nil
		}
		finish = func() (string, []string) {
			if g.status != "running" {
				return "OK", nil // qemu-server: nothing to stop
			}
			if err := g.checkLockLocked("mounted"); err != "" {
				return err, nil
			}
			g.stopLocked()
			return "OK", nil
		}
	case "shutdown":
		force := params["forceStop"] == "1" || params["forceStop"] == "true"
		if lxc && !running {
			return "", newErr(500, "CT %d not running", vmid)
		}
		if !lxc && g.paused() {
			// qemu-server: a graceful shutdown of a paused VM would wait in
			// vain, and power it off once resumed.
			if !force {
				return "", newErr(500, "VM is paused - cannot shutdown")
			}
			return s.powerLocked(g, "stop", params)
		}
		timeout := 60
		if t, err := strconv.Atoi(params["timeout"]); err == nil {
			timeout = t
		}
		if g.ha.managed() {
			return s.haTaskLocked(g, "hastop", fmt.Sprintf("Requesting HA stop for %s %d", label, vmid), func() { s.haStopLocked(g, timeout) }), nil
		}
		graceful := g.shutdownDelay()
		delay = graceful
		if timeout > 0 && time.Duration(timeout)*time.Second < graceful {
			delay = time.Duration(timeout) * time.Second
		}
		finish = func() (string, []string) {
			if g.status != "running" {
				return "OK", nil
			}
			if err := g.checkLockLocked(""); err != "" {
				return err, nil
			}
			if delay < graceful {
				if !force {
					// The guest keeps running (lxc-stop --nokill).
					if lxc {
						return "container did not stop", nil
					}
					return "VM quit/powerdown failed - got timeout", nil
				}
				g.stopLocked()
				return "OK", []string{"VM still running - terminating now with SIGTERM"}
			}
			g.stopLocked()
			return "OK", nil
		}
	case "suspend":
		if !running || (lxc && g.checkpoint) {
			return "", newErr(500, "%s %d not running", label, vmid)
		}
		finish = func() (string, []string) {
			if lxc {
				return s.checkpointLocked(g)
			}
			if err := g.checkLockLocked("backup"); err != "" {
				return err, nil
			}
			g.qmp = "paused"
			g.gen++
			g.unserveLocked()
			return "OK", nil
		}
	case "resume":
		if lxc {
			// pve-container: resume restores a checkpoint into a stopped CT.
			if running {
				return "", newErr(500, "CT %d already running", vmid)
			}
			finish = func() (string, []string) {
				if !g.checkpoint || !s.opts.CRIU {
					return fmt.Sprintf("command 'lxc-checkpoint -n %d -r --foreground -D /var/lib/vz/dump' failed: exit code 1", vmid), nil
				}
				g.checkpoint = false
				g.startedLocked()
				return "OK", nil
			}
			break
		}
		if !running {
			return "", newErr(500, "VM %d not running", vmid)
		}
		finish = func() (string, []string) {
			if !g.paused() {
				return "OK", nil
			}
			if err := g.checkLockLocked("backup"); err != "" {
				return err, nil
			}
			g.resumeLocked()
			return "OK", nil
		}
	default:
		return "", newErr(501, "Method 'POST /nodes/%s/%s/%d/status/%s' not implemented", g.spec.Node, g.spec.Kind, vmid, action)
	}
	t := s.newTaskLocked(g.spec.Node, powerTaskType(g.spec.Kind, action), strconv.Itoa(vmid), delay, finish)
	s.logf("pvesim: %s %d: %s (%s)", g.spec.Kind, vmid, action, t.upid)
	return t.upid, nil
}

// startWorkerLocked is the start worker of qemu-server's vm_start and
// pve-container's vm_start API, in their order of checks. Called with
// sim.mu held.
func (g *guest) startWorkerLocked() (string, []string) {
	vmid := g.spec.VMID
	if g.spec.Template {
		if g.spec.Kind == "qemu" {
			return "you can't start a vm if it's a template", nil
		}
		return "you can't start a CT if it's a template", nil
	}
	if g.failStart != "" {
		return g.failStart, nil
	}
	if g.spec.Kind == "qemu" {
		if g.lock == "backup" && g.status == "running" {
			// A backup runs the VM's QEMU: start it in that instance.
			g.resumeLocked()
			return "OK", nil
		}
		if err := g.checkLockLocked("suspended"); err != "" {
			return err, nil
		}
		if g.status == "running" {
			return fmt.Sprintf("VM %d already running", vmid), nil
		}
	} else {
		if err := g.checkLockLocked("mounted"); err != "" {
			return err, nil
		}
		if g.status == "running" {
			return fmt.Sprintf("CT %d already running", vmid), nil
		}
	}
	g.startedLocked()
	return "OK", nil
}

// checkLockLocked is PVE's check_lock: the task fails while the config
// has a lock other than allowed.
func (g *guest) checkLockLocked(allowed string) string {
	if g.lock != "" && g.lock != allowed {
		return fmt.Sprintf("%s is locked (%s)", g.guestType(), g.lock)
	}
	return ""
}

// checkpointLocked is pve-container's suspend worker: lxc-checkpoint -s
// checkpoints the container and stops it. Called with sim.mu held.
func (s *Sim) checkpointLocked(g *guest) (string, []string) {
	if err := g.checkLockLocked(""); err != "" {
		return err, nil
	}
	if !s.opts.CRIU {
		return fmt.Sprintf("command 'lxc-checkpoint -n %d -s -D /var/lib/vz/dump' failed: exit code 1", g.spec.VMID),
			[]string{"lxc-checkpoint: criu not found"}
	}
	g.stopLocked()
	g.checkpoint = true
	// The container stopped behind HA's back: the LRM starts any
	// "started" resource that does not run.
	if g.ha.managed() && g.ha.state == "started" {
		s.haLaterLocked(g, func() {
			if g.status == "stopped" && g.ha.state == "started" {
				g.startedLocked()
			}
		})
	}
	return "OK", nil
}

func (g *guest) shutdownDelay() time.Duration {
	if g.spec.ShutdownDelay > 0 {
		return g.spec.ShutdownDelay
	}
	return g.sim.opts.TaskDelay
}

// startedLocked powers the guest on. Called with sim.mu held.
func (g *guest) startedLocked() {
	g.status, g.qmp, g.since = "running", "", time.Now()
	g.gen++
	g.bootLocked()
}

// resumeLocked lets a paused QEMU run the guest: a VM suspended to RAM
// serves again at once, one in prelaunch boots. Called with sim.mu held.
func (g *guest) resumeLocked() {
	was := g.qmp
	g.qmp = ""
	g.gen++
	if was == "prelaunch" {
		g.since = time.Now()
		g.bootLocked()
		return
	}
	g.serveLocked()
}

// stopLocked powers the guest off. Called with sim.mu held.
func (g *guest) stopLocked() {
	g.status, g.qmp = "stopped", ""
	g.gen++
	g.unserveLocked()
}
