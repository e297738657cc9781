package kube

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

func sessionSpec(g Guest, key string, connect time.Duration) TaskSpec {
	spec := specFor(g, GoalSession, "vncproxy")
	spec.Object, spec.Timeout = key, connect
	return spec
}

func shortLease(t *testing.T, lease, renew time.Duration) {
	oldLease, oldRenew := sessionLease, sessionRenew
	sessionLease, sessionRenew = lease, renew
	t.Cleanup(func() { sessionLease, sessionRenew = oldLease, oldRenew })
}

// Like PVE's vncproxy worker, a console task nobody connects to ends after
// the connect timeout with "connection timed out", and then refuses the
// connection.
func TestSessionConnectTimeout(t *testing.T) {
	e := newEnv(t, envOptions{})
	c := e.cluster(Options{}, true)
	g := mustGuest(t, c, 101)
	key := TicketKey("ticket-1")
	task, err := c.Tasks.Begin(e.ctx, sessionSpec(g, key, 300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.Tasks.Get(e.ctx, task.UPID.String()); err != nil || !got.Running() {
		t.Fatalf("fresh console task: %+v, %v", got, err)
	}
	cm, err := taskCM(e, "default", task.UPID)
	if err != nil || cm.Labels[sessionLabel] != key {
		t.Fatalf("record labels %v, %v", cm.Labels, err)
	}
	end := waitTaskEnd(t, c, task.UPID.String())
	if end.ExitStatus != ExitConnectTimeout {
		t.Fatalf("exit %q", end.ExitStatus)
	}
	waitRecord(t, e, "default", task.UPID, ExitConnectTimeout)
	if _, err := c.Tasks.AttachSession(e.ctx, key); !errors.Is(err, ErrSessionEnded) || !strings.Contains(err.Error(), ExitConnectTimeout) {
		t.Fatalf("late attach: %v", err)
	}
	if _, err := c.Tasks.AttachSession(e.ctx, TicketKey("unknown")); !errors.Is(err, ErrNoSuchTask) {
		t.Fatalf("attach without a task: %v", err)
	}
}

// A session attached on another replica keeps the task running past the
// connect timeout and past its lease (renewed), on both replicas; End
// finishes it OK everywhere, and the task cannot be attached twice.
func TestSessionOnAnotherReplica(t *testing.T) {
	shortLease(t, 1500*time.Millisecond, 100*time.Millisecond)
	e := newEnv(t, envOptions{})
	a := e.cluster(Options{}, true)
	b := e.cluster(Options{}, true)
	g := mustGuest(t, a, 101)
	key := TicketKey("ticket-2")
	task, err := a.Tasks.Begin(e.ctx, sessionSpec(g, key, 500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	s, err := b.Tasks.AttachSession(e.ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	attached := time.Now()
	if s.UPID() != task.UPID.String() {
		t.Fatalf("attached %s, began %s", s.UPID(), task.UPID)
	}
	if _, err := a.Tasks.AttachSession(e.ctx, key); !errors.Is(err, ErrSessionEnded) {
		t.Fatalf("second attach: %v", err)
	}
	// Past the connect timeout and more than one lease, the session has
	// renewed the task and both workers have looked at it since: still
	// running.
	time.Sleep(time.Until(attached.Add(2500 * time.Millisecond)))
	waitPasses(t, a, 3)
	waitPasses(t, b, 3)
	cm, err := taskCM(e, "default", task.UPID)
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := taskFromConfigMap(cm); err != nil || !rec.deadline.After(attached.Add(sessionLease)) {
		t.Fatalf("the session did not renew its task: record %v, %v", cm.Data, err)
	}
	for name, c := range map[string]*Cluster{"a": a, "b": b} {
		got, err := c.Tasks.Get(e.ctx, task.UPID.String())
		if err != nil || !got.Running() {
			t.Fatalf("%s: open session's task %+v, %v", name, got, err)
		}
	}
	s.End(e.ctx, translate.ExitOK)
	s.End(e.ctx, "ignored")
	for name, c := range map[string]*Cluster{"b": b, "a": a} {
		end := waitTaskEnd(t, c, task.UPID.String())
		if end.ExitStatus != translate.ExitOK || lastLine(end.Log) != "TASK OK" || !strings.Contains(strings.Join(end.Log, "\n"), "client connected") {
			t.Fatalf("%s: ended %q, log %q", name, end.ExitStatus, end.Log)
		}
	}
	waitRecord(t, e, "default", task.UPID, translate.ExitOK)
}

// When the replica bridging a session stops renewing its task (it died),
// the lease runs out and any replica ends the task with an error.
func TestSessionLost(t *testing.T) {
	shortLease(t, 500*time.Millisecond, time.Hour)
	e := newEnv(t, envOptions{})
	c := e.cluster(Options{}, true)
	g := mustGuest(t, c, 101)
	key := TicketKey("ticket-3")
	task, err := c.Tasks.Begin(e.ctx, sessionSpec(g, key, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Tasks.AttachSession(e.ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	end := waitTaskEnd(t, c, task.UPID.String())
	if !strings.HasPrefix(end.ExitStatus, "console session lost") {
		t.Fatalf("exit %q", end.ExitStatus)
	}
	cm := waitRecord(t, e, "default", task.UPID, end.ExitStatus)
	if cm.Data["connected"] == "" {
		t.Fatalf("record %v", cm.Data)
	}
	s.End(e.ctx, translate.ExitOK) // too late: the first end stands
	waitRecord(t, e, "default", task.UPID, end.ExitStatus)
}
