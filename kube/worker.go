package kube

import (
	"context"
)

// GoalWorker is the goal of a task whose work runs in the replica that
// started it (a download the plugin streams itself), like PVE's forked
// worker: that replica renews the task's deadline while it works and ends
// it with Session.EndWith; if the replica dies, the deadline passes and
// any replica ends the task with ExitWorkerLost.
const GoalWorker Goal = "worker"

// ExitWorkerLost ends a worker task whose replica stopped renewing it.
const ExitWorkerLost = "task lost: the instance running it stopped (restart the task)"

// BeginWorker records a running task (spec's goal and timeout are
// replaced: the task runs while the returned Session renews it) and keeps
// it running until Session.End or EndWith.
func (ts *Tasks) BeginWorker(ctx context.Context, spec TaskSpec) (*Session, *Task, error) {
	spec.Goal, spec.Timeout = GoalWorker, sessionLease
	t, err := ts.Begin(ctx, spec)
	if err != nil {
		return nil, nil, err
	}
	s := &Session{ts: ts, upid: t.UPID.String(), name: t.cmName, stop: make(chan struct{}), done: make(chan struct{})}
	if !t.Running() {
		// spec.Err: ended already, nothing to renew.
		close(s.done)
		s.once.Do(func() { close(s.stop) })
		return s, t, nil
	}
	go s.renew()
	return s, t, nil
}
