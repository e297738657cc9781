package kube

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GoalSession is the goal of a console task (vncproxy, termproxy): like
// PVE's worker, the task runs while it waits for the client (its deadline
// is SessionConnectTimeout after the start; then it ends with "connection
// timed out") and while the session is open. The replica bridging the
// session renews the deadline and ends the task with Session.End; if that
// replica dies, the deadline passes and any replica ends the task.
// TaskSpec.Object carries the TicketKey of the session's ticket.
const GoalSession Goal = "session"

const (
	// SessionConnectTimeout is how long PVE's vncproxy and termproxy
	// workers wait for the client to connect.
	SessionConnectTimeout = 10 * time.Second
	// sessionLabel carries a session task's TicketKey, so that the replica
	// the client connects to finds the task by the ticket.
	sessionLabel = "pve.caddy-proxmox.io/console-session"

	// ExitConnectTimeout is PVE's exit status of a console task whose
	// client never connected.
	ExitConnectTimeout = "connection timed out"
)

// sessionLease is how long an attached session task stays running without
// a renewal; sessionRenew how often the bridge renews it. Variables for
// tests.
var (
	sessionLease = 2 * time.Minute
	sessionRenew = 30 * time.Second
)

// ErrSessionEnded is returned by AttachSession when the session's task has
// ended: the client came too late, or the ticket was used already.
var ErrSessionEnded = errors.New("the console session has ended")

func sessionTimeoutExit(t *Task) string {
	if t.connected.IsZero() {
		return ExitConnectTimeout
	}
	return "console session lost: the instance bridging it stopped renewing the task"
}

// Session is an attached console session task. End it exactly once.
type Session struct {
	ts   *Tasks
	upid string
	name string

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// UPID is the session task's UPID.
func (s *Session) UPID() string { return s.upid }

// AttachSession marks the running session task of the ticket with key
// (TicketKey) as connected and keeps it running until End. It returns
// ErrNoSuchTask when no such task exists and ErrSessionEnded (wrapped,
// with the task's exit status) when it has ended or is attached already.
func (ts *Tasks) AttachSession(ctx context.Context, key string) (*Session, error) {
	// Session tasks are task records: the plugin's own (see Begin).
	cms := ts.c.own.kube.CoreV1().ConfigMaps(ts.c.opts.TaskNamespace)
	list, err := cms.List(ctx, metav1.ListOptions{LabelSelector: sessionLabel + "=" + key})
	if err != nil {
		return nil, fmt.Errorf("looking up the console task: %w", err)
	}
	if len(list.Items) == 0 {
		return nil, ErrNoSuchTask
	}
	cm := &list.Items[0]
	for attempt := 0; ; attempt++ {
		t, err := taskFromConfigMap(cm)
		if err != nil {
			return nil, err
		}
		if t.goal != GoalSession {
			return nil, ErrNoSuchTask
		}
		if !t.Running() {
			return nil, fmt.Errorf("%w: %s", ErrSessionEnded, t.ExitStatus)
		}
		if !t.connected.IsZero() {
			return nil, fmt.Errorf("%w: a client is connected already", ErrSessionEnded)
		}
		now := time.Now()
		if now.After(t.deadline) {
			t.finish(ExitConnectTimeout, now)
		} else {
			t.connected = now
			t.deadline = now.Add(sessionLease)
			t.Log = append(t.Log, "client connected")
		}
		cm.Data = t.toConfigMap(cm.Namespace).Data
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) && attempt < 5 {
			if cm, err = cms.Get(ctx, cm.Name, metav1.GetOptions{}); err != nil {
				return nil, fmt.Errorf("looking up the console task: %w", err)
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("recording the console connection: %w", err)
		}
		ts.remember(t)
		if !t.Running() {
			return nil, fmt.Errorf("%w: %s", ErrSessionEnded, t.ExitStatus)
		}
		s := &Session{ts: ts, upid: t.UPID.String(), name: cm.Name, stop: make(chan struct{}), done: make(chan struct{})}
		go s.renew()
		return s, nil
	}
}

// remember makes this replica answer from t until its cache catches up.
func (ts *Tasks) remember(t *Task) {
	ts.mu.Lock()
	if r := ts.recent[t.UPID.String()]; r != nil {
		*r = *t.copy()
	}
	ts.mu.Unlock()
	ts.touch(t.subject())
}

func (s *Session) renew() {
	defer close(s.done)
	tick := time.NewTicker(sessionRenew)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		err := s.update(func(t *Task) bool {
			if !t.Running() {
				return false
			}
			t.deadline = time.Now().Add(sessionLease)
			return true
		})
		if err != nil {
			s.ts.c.logger.Warn("renewing a console task", zap.String("upid", s.upid), zap.Error(err))
		}
	}
}

// End ends the session's task with exit ("OK" for a session
// that closed normally). Later calls do nothing.
func (s *Session) End(ctx context.Context, exit string) { s.EndWith(ctx, exit, nil) }

// EndWith is End that first adds log lines to the task.
func (s *Session) EndWith(ctx context.Context, exit string, log []string) {
	s.once.Do(func() {
		close(s.stop)
		<-s.done
		err := s.update(func(t *Task) bool {
			// Past its deadline any replica may have judged it lost:
			// that first answer stands.
			if !t.Running() || time.Now().After(t.deadline) {
				return false
			}
			t.Log = append(t.Log, log...)
			t.finish(exit, time.Now())
			return true
		})
		if err != nil {
			s.ts.c.logger.Warn("ending a console task", zap.String("upid", s.upid), zap.Error(err))
		}
	})
}

// update applies change to the task record, retrying on conflicts; change
// returns false to leave the record alone.
func (s *Session) update(change func(*Task) bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cms := s.ts.c.own.kube.CoreV1().ConfigMaps(s.ts.c.opts.TaskNamespace)
	for attempt := 0; ; attempt++ {
		cm, err := cms.Get(ctx, s.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		t, err := taskFromConfigMap(cm)
		if err != nil {
			return err
		}
		if !change(t) {
			return nil
		}
		cm.Data = t.toConfigMap(cm.Namespace).Data
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) && attempt < 5 {
			continue
		}
		if err == nil {
			s.ts.remember(t)
		}
		return err
	}
}
