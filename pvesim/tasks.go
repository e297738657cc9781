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
// error. Called with sim.mu held.
func (s *Sim) powerLocked(g *guest, action string, params map[string]string) (string, *apiError) {
	id := strconv.Itoa(g.spec.VMID)
	label := g.kindLabel()
	running := g.status == "running"
	delay := s.opts.TaskDelay
	var finish func() (string, []string)
	switch action {
	case "start":
		if running {
			return "", newErr(500, "%s %d already running", label, g.spec.VMID)
		}
		if g.spec.StartDelay > 0 {
			delay = g.spec.StartDelay
		}
		finish = func() (string, []string) {
			if g.failStart != "" {
				return g.failStart, nil
			}
			if g.status == "running" {
				return "OK", []string{"already running"}
			}
			g.status, g.paused, g.since = "running", false, time.Now()
			g.gen++
			g.bootLocked()
			return "OK", nil
		}
	case "stop":
		if !running {
			return "", newErr(500, "%s %d not running", label, g.spec.VMID)
		}
		finish = func() (string, []string) {
			g.stopLocked()
			return "OK", nil
		}
	case "shutdown":
		if !running {
			return "", newErr(500, "%s %d not running", label, g.spec.VMID)
		}
		graceful := delay
		if g.spec.ShutdownDelay > 0 {
			graceful = g.spec.ShutdownDelay
		}
		delay = graceful
		timeout, _ := strconv.Atoi(params["timeout"])
		force := params["forceStop"] == "1" || params["forceStop"] == "true"
		if timeout > 0 && time.Duration(timeout)*time.Second < graceful {
			delay = time.Duration(timeout) * time.Second
			finish = func() (string, []string) {
				if !force {
					return fmt.Sprintf("%s %d shutdown failed - got timeout", label, g.spec.VMID), nil
				}
				g.stopLocked()
				return "OK", []string{"shutdown timeout reached, forcing stop"}
			}
		} else {
			finish = func() (string, []string) {
				g.stopLocked()
				return "OK", nil
			}
		}
	case "suspend":
		if !running || g.paused {
			return "", newErr(500, "%s %d not running", label, g.spec.VMID)
		}
		finish = func() (string, []string) {
			g.paused = true
			g.gen++
			g.unserveLocked()
			return "OK", nil
		}
	case "resume":
		if !running || !g.paused {
			return "", newErr(500, "%s %d not paused", label, g.spec.VMID)
		}
		finish = func() (string, []string) {
			g.paused = false
			g.gen++
			g.serveLocked()
			return "OK", nil
		}
	default:
		return "", newErr(501, "Method 'POST /nodes/%s/%s/%d/status/%s' not implemented", g.spec.Node, g.spec.Kind, g.spec.VMID, action)
	}
	t := s.newTaskLocked(g.spec.Node, powerTaskType(g.spec.Kind, action), id, delay, finish)
	s.logf("pvesim: %s %d: %s (%s)", g.spec.Kind, g.spec.VMID, action, t.upid)
	return t.upid, nil
}

// stopLocked powers the guest off. Called with sim.mu held.
func (g *guest) stopLocked() {
	g.status, g.paused = "stopped", false
	g.gen++
	g.unserveLocked()
}
