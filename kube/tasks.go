package kube

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

const (
	taskLabel     = "pve.caddy-proxmox.io/task"
	taskNodeLabel = "pve.caddy-proxmox.io/task-node"
	taskPrefix    = "pve-task-"

	taskStatusIndex = "status"
	taskVMIndex     = "vm"
)

// Goal is what a task waits for in the cluster. A task's status is derived
// from its goal and the cluster state, so any replica can answer for it,
// and a task outlives the process that started it.
type Goal string

// Goals a task can wait for.
const (
	GoalNone      Goal = ""          // the work was done before the task was recorded
	GoalRunning   Goal = "running"   // an instance of the VM runs
	GoalStopped   Goal = "stopped"   // no instance runs
	GoalGone      Goal = "gone"      // the VM object no longer exists
	GoalPaused    Goal = "paused"    // the instance is paused
	GoalResumed   Goal = "resumed"   // the instance runs unpaused
	GoalRestarted Goal = "restarted" // a new instance (not PrevVMI) runs
	// GoalStoppedAfterStart: a stop asked for while KubeVirt still had a
	// start request to act on (see Cluster.StopAfterStart). No instance
	// means stopped only once the start request is gone or has failed.
	GoalStoppedAfterStart Goal = "stopped-after-start"
	// GoalProvisioned: the VM's volumes are ready (no longer Provisioning);
	// Object names a clone's state copy to wait for too (CloneState).
	GoalProvisioned Goal = "provisioned"
	// GoalSnapshotReady, GoalSnapshotGone and GoalRestored are about the
	// snapshot or restore named by TaskSpec.Object.
	GoalSnapshotReady Goal = "snapshot-ready"
	GoalSnapshotGone  Goal = "snapshot-gone"
	GoalRestored      Goal = "restored"
	// GoalRestoredStarted: GoalRestored, then the VM is started and runs
	// (a rollback with start=1).
	GoalRestoredStarted Goal = "restored-started"
	// GoalHomeNode: the VM's PVE node is TaskSpec.Target (an offline
	// migration). GoalMigrated: the live migration named by
	// TaskSpec.Object succeeded, the instance runs on TaskSpec.Target, and
	// the VM's PVE node has followed it.
	GoalHomeNode Goal = "home-node"
	GoalMigrated Goal = "migrated"
	// GoalImported: the DataVolume Namespace/Name (UID) imported its data;
	// the task fails with CDI's reason when the import fails.
	GoalImported Goal = "imported"
	// GoalClaimGone: the claim Namespace/Name (UID) no longer exists.
	GoalClaimGone Goal = "claim-gone"
	// GoalLiveUpdated: KubeVirt has taken the CPU sockets and guest
	// memory of the VM's generation TaskSpec.Object (or a later one) into
	// its running instance, or said they need a restart
	// (translate.LiveUpdateTaken). It never fails: past its deadline the
	// change shows as pending.
	GoalLiveUpdated Goal = "live-updated"
)

// lagGrace is how long a task waits for an object it was started about to
// show in the cache before it takes the absence as a deletion.
const lagGrace = 10 * time.Second

// TaskSpec describes a task being started.
type TaskSpec struct {
	Node, Type, ID, User string
	Goal                 Goal
	Namespace, Name      string
	UID                  types.UID // the VM the goal is about; guards against a namesake
	PrevVMI              types.UID
	// Object names the snapshot, restore or migration a goal is about.
	Object string
	// Target is the PVE node a migration goes to.
	Target  string
	Timeout time.Duration
	Log     []string
	// Err, when set, records a task that failed before waiting on anything.
	Err error
}

// Task is a recorded Proxmox task.
type Task struct {
	UPID       translate.UPID
	Status     string // "running" or "stopped"
	ExitStatus string // only when stopped
	Log        []string
	EndTime    time.Time

	goal            Goal
	namespace, name string
	uid, prevVMI    types.UID
	object, target  string
	deadline        time.Time
	started         time.Time // finer than the UPID's seconds, to order tasks
	cmName          string
	// connected is when a client attached to a GoalSession task.
	connected time.Time
}

// Running tells whether the task has not ended.
func (t *Task) Running() bool { return t.Status == "running" }

// ErrNoSuchTask is returned for an unknown UPID.
var ErrNoSuchTask = errors.New("no such task")

// Tasks keeps task records as ConfigMaps in the task namespace.
type Tasks struct {
	c      *Cluster
	mu     sync.Mutex
	recent map[string]*Task // written here, maybe not yet in the informer
	// recentFor indexes recent by subject (see Task.subject).
	recentFor map[string]map[string]*Task
	// removing holds the failed clones (by UPID) whose VM is being removed
	// before their end is recorded (conclude): no one evaluates them
	// meanwhile.
	removing map[string]bool
	// queue holds the subjects whose running tasks are to be evaluated,
	// or allTasks; its worker is run. Cluster events add the subjects they
	// are about, so that an event costs the tasks it may end, not every
	// running task.
	queue workqueue.TypedInterface[string]
	// Retention is how long ended tasks are kept.
	Retention time.Duration
	// Interval is the period of the pass over every running task, for
	// deadlines and the goals that wait on time rather than on an event
	// (the rest is driven by the events of the objects they are about).
	Interval time.Duration
	// evaluations counts goal evaluations, for the benchmark.
	evaluations atomic.Int64
	// passes counts the worker's completed passes over every running task,
	// so that tests can wait for it to have looked at a task.
	passes atomic.Uint64
}

// allTasks is the queue key of a pass over every running task; no
// namespace/name subject has this form.
const allTasks = "*"

func newTasks(c *Cluster) *Tasks {
	return &Tasks{c: c, recent: map[string]*Task{}, recentFor: map[string]map[string]*Task{}, removing: map[string]bool{}, Retention: 24 * time.Hour, Interval: time.Second}
}

// subject is the namespace/name of the object a task waits on: the VM,
// or the DataVolume or claim of the storage tasks.
func (t *Task) subject() string { return t.namespace + "/" + t.name }

// touch asks for the running tasks about the objects namespace/name to be
// evaluated again. Before the worker runs (and after it stopped) it does
// nothing: the worker's first pass covers every task.
func (ts *Tasks) touch(keys ...string) {
	q := ts.queued()
	if q == nil {
		return
	}
	for _, k := range keys {
		q.Add(k)
	}
}

func (ts *Tasks) queued() workqueue.TypedInterface[string] {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.queue
}

// poke asks for a pass over every running task.
func (ts *Tasks) poke() { ts.touch(allTasks) }

// touchBy is a store's changeFunc: it touches what keys names of the old
// and the new object (a change may move an object from one to another).
func (ts *Tasks) touchBy(keys func(obj any) []string) changeFunc {
	return func(old, new any) {
		for _, o := range [2]any{old, new} {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if o != nil {
				ts.touch(keys(o)...)
			}
		}
	}
}

// ownKey names the object itself: the subject of tasks about a VM, its
// instance, a DataVolume or a claim.
func ownKey(obj any) []string {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil
	}
	return []string{m.GetNamespace() + "/" + m.GetName()}
}

// ownerKeys names the object and its owners (a DataVolume's VM).
func ownerKeys(obj any) []string {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil
	}
	out := []string{m.GetNamespace() + "/" + m.GetName()}
	for _, r := range m.GetOwnerReferences() {
		out = append(out, m.GetNamespace()+"/"+r.Name)
	}
	return out
}

// keys adapts an index function to touchBy.
func keys(index cache.IndexFunc) func(obj any) []string {
	return func(obj any) []string {
		out, _ := index(obj)
		return out
	}
}

// rememberLocked keeps t in recent (under ts.mu).
func (ts *Tasks) rememberLocked(t *Task) {
	key := t.UPID.String()
	ts.recent[key] = t
	if ts.recentFor[t.subject()] == nil {
		ts.recentFor[t.subject()] = map[string]*Task{}
	}
	ts.recentFor[t.subject()][key] = t
}

// forgetLocked drops a task from recent (under ts.mu).
func (ts *Tasks) forgetLocked(upid string) {
	t := ts.recent[upid]
	if t == nil {
		return
	}
	delete(ts.recent, upid)
	if m := ts.recentFor[t.subject()]; m != nil {
		delete(m, upid)
		if len(m) == 0 {
			delete(ts.recentFor, t.subject())
		}
	}
}

// Begin records a new task and returns it. The task is visible to every
// replica once this returns.
func (ts *Tasks) Begin(ctx context.Context, spec TaskSpec) (*Task, error) {
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, fmt.Errorf("task id: %w", err)
	}
	now := time.Now()
	u := translate.UPID{
		Node:      spec.Node,
		PID:       binary.BigEndian.Uint32(rnd[:4]),
		PStart:    binary.BigEndian.Uint32(rnd[4:]),
		StartTime: now.Unix(),
		Type:      spec.Type,
		ID:        spec.ID,
		User:      spec.User,
	}
	t := &Task{
		UPID: u, Status: "running", Log: append([]string(nil), spec.Log...),
		goal: spec.Goal, namespace: spec.Namespace, name: spec.Name, uid: spec.UID, prevVMI: spec.PrevVMI,
		object: spec.Object, target: spec.Target, cmName: taskPrefix + u.Key(), started: now,
	}
	if spec.Timeout <= 0 {
		spec.Timeout = 5 * time.Minute
	}
	t.deadline = now.Add(spec.Timeout)
	switch {
	case spec.Err != nil:
		t.finish(spec.Err.Error(), now)
	case spec.Goal == GoalNone:
		t.finish(translate.ExitOK, now)
	}
	cm := t.toConfigMap(ts.c.opts.TaskNamespace)
	// Task records are the plugin's own: callers need no rights on the
	// task namespace, and any replica may finish a task.
	if _, err := ts.c.own.kube.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("recording task %s: %w", u, err)
	}
	// Copy before publishing: once t is in recent, the worker may finish
	// it (a goal met already) and write to it under ts.mu.
	out := t.copy()
	ts.mu.Lock()
	ts.rememberLocked(t)
	ts.mu.Unlock()
	// Its own subject: the new task may be done already, and it ends the
	// earlier tasks on the VM that want another power state.
	ts.touch(t.subject())
	return out, nil
}

// Get returns the current state of a task by UPID, evaluating its goal
// against the cluster when it is still running.
func (ts *Tasks) Get(ctx context.Context, upid string) (*Task, error) {
	u, err := translate.ParseUPID(upid)
	if err != nil {
		return nil, ErrNoSuchTask
	}
	t := ts.lookup(ctx, u)
	if t == nil {
		return nil, ErrNoSuchTask
	}
	if t.Running() && !ts.removalUnderway(t) && ts.c.Healthy() == nil {
		if done, exit, lines := ts.evaluate(t, time.Now()); !done {
			ts.note(t, lines)
		} else if failedClone(t, exit) {
			// Its VM goes before the caller reads the end.
			ts.conclude(context.WithoutCancel(ctx), t, exit, lines, time.Now())
		} else {
			ts.end(t, exit, lines, time.Now())
			go ts.persist(context.Background(), t.copy())
		}
	}
	ts.c.seeEnd(ctx, t)
	return t, nil
}

// conclude ends t with exit after the log lines and records it. A failed
// clone's VM is removed first, and gone from the cache before anyone
// reads the end, as PVE's clone worker destroys its target before its
// task ends: a client that reads the end and destroys the VM finds none.
// Meanwhile the task reads as running and no one else evaluates it.
func (ts *Tasks) conclude(ctx context.Context, t *Task, exit string, lines []string, now time.Time) {
	if failedClone(t, exit) {
		if !ts.beginRemoval(t) {
			return // another caller concludes it
		}
		defer ts.endRemoval(t)
		if !ts.endRecorded(ctx, t) {
			ts.removeClone(ctx, t)
		}
	}
	ts.end(t, exit, lines, now)
	ts.persist(ctx, t)
}

// beginRemoval marks t's VM as being removed; false when it already is.
func (ts *Tasks) beginRemoval(t *Task) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	u := t.UPID.String()
	if ts.removing[u] {
		return false
	}
	ts.removing[u] = true
	return true
}

func (ts *Tasks) endRemoval(t *Task) {
	ts.mu.Lock()
	delete(ts.removing, t.UPID.String())
	ts.mu.Unlock()
}

// removalUnderway tells whether t's VM is being removed (conclude).
func (ts *Tasks) removalUnderway(t *Task) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.removing[t.UPID.String()]
}

// endRecorded tells whether t's record already says it ended (another
// replica ended it first, maybe OK), or cannot be read: then nothing is
// done on this replica's word.
func (ts *Tasks) endRecorded(ctx context.Context, t *Task) bool {
	cm, err := ts.c.own.kube.CoreV1().ConfigMaps(ts.c.opts.TaskNamespace).Get(ctx, t.cmName, metav1.GetOptions{})
	return err != nil || cm.Data["status"] == "stopped"
}

// List returns tasks on node (all nodes when ""), newest first.
func (ts *Tasks) List(node string) []*Task {
	seen := map[string]bool{}
	var out []*Task
	add := func(t *Task) {
		if seen[t.cmName] || (node != "" && t.UPID.Node != node) {
			return
		}
		seen[t.cmName] = true
		out = append(out, t)
	}
	for _, o := range ts.c.tasks.list() {
		if t, err := taskFromConfigMap(o.(*corev1.ConfigMap)); err == nil {
			add(t)
		}
	}
	ts.mu.Lock()
	for _, t := range ts.recent {
		add(t.copy())
	}
	ts.mu.Unlock()
	// Answer what Get would: a task whose goal is met is ended, even if
	// the worker has not recorded it yet.
	now := time.Now()
	healthy := ts.c.Healthy() == nil
	for _, t := range out {
		if t.Running() && healthy {
			done, exit, lines := ts.evaluate(t, now)
			t.addLog(lines...)
			if done {
				t.finish(exit, now)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].UPID.StartTime != out[j].UPID.StartTime {
			return out[i].UPID.StartTime > out[j].UPID.StartTime
		}
		return out[i].UPID.String() > out[j].UPID.String()
	})
	return out
}

// running returns the tasks not yet ended, through the status index so that
// a long history costs nothing per evaluation.
func (ts *Tasks) running() []*Task {
	ts.mu.Lock()
	recent := make([]*Task, 0, len(ts.recent))
	for _, t := range ts.recent {
		recent = append(recent, t)
	}
	ts.mu.Unlock()
	return ts.runningOf(recent, ts.c.tasks.byIndex(taskStatusIndex, "running"))
}

// runningFor returns the running tasks about subject (namespace/name),
// through the subject index.
func (ts *Tasks) runningFor(subject string) []*Task {
	ts.mu.Lock()
	var recent []*Task
	for _, t := range ts.recentFor[subject] {
		recent = append(recent, t)
	}
	ts.mu.Unlock()
	var cms []any
	for _, o := range ts.c.tasks.byIndex(taskVMIndex, subject) {
		if cm := o.(*corev1.ConfigMap); cm.Data["status"] == "running" {
			cms = append(cms, cm)
		}
	}
	return ts.runningOf(recent, cms)
}

// runningOf merges the running ones among recent, which win, and the
// records cms.
func (ts *Tasks) runningOf(recent []*Task, cms []any) []*Task {
	var out []*Task
	seen := map[string]bool{}
	ts.mu.Lock()
	for _, t := range recent {
		if t.Running() {
			out = append(out, t.copy())
			seen[t.cmName] = true
		}
	}
	ts.mu.Unlock()
	for _, o := range cms {
		cm := o.(*corev1.ConfigMap)
		if seen[cm.Name] {
			continue
		}
		if t, err := taskFromConfigMap(cm); err == nil {
			out = append(out, t)
		}
	}
	return out
}

func (ts *Tasks) lookup(ctx context.Context, u translate.UPID) *Task {
	name := taskPrefix + u.Key()
	var best *Task
	if o := ts.c.tasks.get(ts.c.opts.TaskNamespace, name); o != nil {
		if t, err := taskFromConfigMap(o.(*corev1.ConfigMap)); err == nil && t.UPID == u {
			best = t
		}
	}
	ts.mu.Lock()
	// Prefer what was written here when the cache has not caught up: an
	// end, or a session's renewed deadline.
	if r := ts.recent[u.String()]; r != nil && (best == nil || (best.Running() && (!r.Running() || r.deadline.After(best.deadline) || len(r.Log) > len(best.Log)))) {
		best = r.copy()
	}
	ts.mu.Unlock()
	if best != nil {
		return best
	}
	// Another replica may have written it an instant ago.
	cm, err := ts.c.own.kube.CoreV1().ConfigMaps(ts.c.opts.TaskNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	t, err := taskFromConfigMap(cm)
	if err != nil || t.UPID != u {
		return nil
	}
	return t
}

// run evaluates running tasks as the cluster changes, finishes those whose
// goal is met or whose deadline passed, and prunes old ones. Events queue
// the subjects they are about (touch), and only those subjects' tasks are
// evaluated; every Interval, and after an outage, all are.
func (ts *Tasks) run(ctx context.Context) {
	q := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: ""})
	ts.mu.Lock()
	ts.queue = q
	ts.mu.Unlock()
	defer func() {
		ts.mu.Lock()
		ts.queue = nil
		ts.mu.Unlock()
	}()
	q.Add(allTasks) // what happened before the worker ran
	go func() {
		tick := time.NewTicker(ts.Interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				q.ShutDown()
				return
			case <-tick.C:
				q.Add(allTasks)
			}
		}
	}()
	// The first prune waits a minute too: a replica that just started
	// has nothing urgent to delete, and tests that prune by hand are not
	// raced by it.
	lastPrune := time.Now()
	for {
		key, shutdown := q.Get()
		if shutdown || ctx.Err() != nil {
			return
		}
		ts.sync(ctx, key)
		q.Done(key)
		if key != allTasks {
			continue
		}
		if now := time.Now(); now.Sub(lastPrune) > time.Minute {
			lastPrune = now
			ts.prune(ctx, now)
			ts.c.collectClaims(ctx, now)
		}
		ts.passes.Add(1)
	}
}

// sync evaluates the running tasks of one queue key.
func (ts *Tasks) sync(ctx context.Context, key string) {
	// Stale caches must not end tasks: a goal met during an outage shows
	// only once the caches follow the cluster again, at the next pass over
	// all of them.
	if ts.c.Healthy() != nil {
		return
	}
	tasks := ts.running
	if key != allTasks {
		tasks = func() []*Task { return ts.runningFor(key) }
	}
	now := time.Now()
	for _, t := range tasks() {
		if ts.removalUnderway(t) {
			continue
		}
		if done, exit, lines := ts.evaluate(t, now); done {
			ts.conclude(ctx, t, exit, lines, now)
			if t.goal == GoalGone && exit == translate.ExitOK {
				ts.c.dropClaim(ctx, t.UPID.ID)
			}
		} else {
			ts.note(t, lines)
		}
	}
}

// end ends t with exit after the log lines. A failed clone says that its
// half-made VM goes (conclude removed it first), as PVE's clone worker destroys
// its target when the copy fails.
func (ts *Tasks) end(t *Task, exit string, lines []string, now time.Time) {
	t.addLog(lines...)
	if failedClone(t, exit) {
		t.Log = append(t.Log, fmt.Sprintf("removing the partly cloned VM %s/%s", t.namespace, t.name))
	}
	t.finish(exit, now)
}

// note adds the lines of a task that goes on (what evaluate says the
// cluster is doing meanwhile, such as an error CDI retries) to its log, in
// t and in the task as this replica keeps it until it ends; the record
// gets them when it ends.
func (ts *Tasks) note(t *Task, lines []string) {
	if len(lines) == 0 {
		return
	}
	t.addLog(lines...)
	ts.mu.Lock()
	if r := ts.recent[t.UPID.String()]; r != nil && r.Running() {
		r.addLog(lines...)
	}
	ts.mu.Unlock()
}

// addLog appends the lines not yet in t's log.
func (t *Task) addLog(lines ...string) {
	for _, l := range lines {
		if !slices.Contains(t.Log, l) {
			t.Log = append(t.Log, l)
		}
	}
}

// failedClone tells whether t, ending with exit, is a clone that failed:
// its subject is the clone's new VM (see the clone endpoint).
func failedClone(t *Task, exit string) bool {
	return t.UPID.Type == translate.TaskClone && exit != translate.ExitOK && t.uid != ""
}

// cloneGoneWait bounds how long a failed clone's end waits for its VM to
// leave the cache.
const cloneGoneWait = 10 * time.Second

// removeClone deletes the VM a failed clone made, guarded by its UID so
// that no other VM of that name is touched, and waits until the cache no
// longer has it. As the plugin: the request that made it has ended; its
// disks (DataVolumes) and cloud-init Secret are owned by it and go with
// it.
func (ts *Tasks) removeClone(ctx context.Context, t *Task) {
	uid := t.uid
	bg := metav1.DeletePropagationBackground
	err := ts.c.own.kv.KubevirtV1().VirtualMachines(t.namespace).Delete(ctx, t.name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uid}, PropagationPolicy: &bg,
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		ts.c.logger.Warn("removing a failed clone", zap.String("upid", t.UPID.String()), zap.String("vm", t.subject()), zap.Error(err))
		return
	}
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, cloneGoneWait, true, func(context.Context) (bool, error) {
		vm := ts.c.cachedVM(t.namespace, t.name)
		return vm == nil || !vm.hasUID(uid), nil
	})
	if err != nil {
		ts.c.logger.Warn("a failed clone's VM stays in the cache", zap.String("upid", t.UPID.String()), zap.String("vm", t.subject()), zap.Error(err))
	}
}

// persist records t's end unless another replica recorded one first; it
// tells whether t's record is the one that stands.
func (ts *Tasks) persist(ctx context.Context, t *Task) bool {
	ts.mu.Lock()
	if r := ts.recent[t.UPID.String()]; r != nil {
		*r = *t.copy()
	}
	ts.mu.Unlock()
	cm := t.toConfigMap(ts.c.opts.TaskNamespace)
	cur, err := ts.c.own.kube.CoreV1().ConfigMaps(cm.Namespace).Get(ctx, cm.Name, metav1.GetOptions{})
	if err != nil {
		ts.c.logger.Warn("task record unavailable", zap.String("upid", t.UPID.String()), zap.Error(err))
		return false
	}
	if cur.Data["status"] == "stopped" {
		return false // someone finished it first; the first answer stands
	}
	if fresh, err := taskFromConfigMap(cur); err == nil && fresh.deadline.After(t.deadline) {
		// The record was renewed (a console session attached or is alive)
		// after t was read, so t's verdict is stale.
		ts.mu.Lock()
		if r := ts.recent[t.UPID.String()]; r != nil {
			*r = *fresh
		}
		ts.mu.Unlock()
		return false
	}
	cur.Data = cm.Data
	updated, err := ts.c.own.kube.CoreV1().ConfigMaps(cm.Namespace).Update(ctx, cur, metav1.UpdateOptions{})
	if err != nil && !apierrors.IsConflict(err) {
		ts.c.logger.Warn("finishing task", zap.String("upid", t.UPID.String()), zap.Error(err))
		return false
	}
	if err == nil {
		// Into the cache before t leaves recent: a read in between would
		// otherwise end the task again from the cache's running record,
		// without the lines only recent had (note).
		ts.c.tasks.put(updated, false)
	}
	ts.mu.Lock()
	ts.forgetLocked(t.UPID.String())
	ts.mu.Unlock()
	return err == nil
}

func (ts *Tasks) prune(ctx context.Context, now time.Time) {
	for _, t := range ts.List("") {
		if t.Running() || now.Sub(t.EndTime) < ts.Retention {
			continue
		}
		err := ts.c.own.kube.CoreV1().ConfigMaps(ts.c.opts.TaskNamespace).Delete(ctx, t.cmName, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			ts.c.logger.Debug("pruning task", zap.String("upid", t.UPID.String()), zap.Error(err))
			continue
		}
		// Tasks that ended at once (GoalNone, spec.Err) are never persisted
		// again, so only this drops them from the write-through map.
		ts.mu.Lock()
		ts.forgetLocked(t.UPID.String())
		ts.mu.Unlock()
	}
}

// stopRequestPending tells whether vm has a stop request virt-controller
// has not yet acted on and cleared.
func stopRequestPending(vm *kubevirtv1.VirtualMachine) bool {
	for _, r := range vm.Status.StateChangeRequests {
		if r.Action == kubevirtv1.StopRequest {
			return true
		}
	}
	return false
}

// evaluate decides whether a running task's goal is met.
func (ts *Tasks) evaluate(t *Task, now time.Time) (done bool, exit string, log []string) {
	ts.evaluations.Add(1)
	// vm and vmi are metadata and status (the specs stay packed): most
	// goals are states; the few that read a spec decode it (whole).
	var cvm *packedVM
	if p := ts.c.cachedVM(t.namespace, t.name); p != nil && p.hasUID(t.uid) {
		cvm = p
	}
	cvmi := ts.c.cachedVMI(t.namespace, t.name)
	vm, vmi := cvm.meta(), cvmi.meta()
	running := translate.VMIRunning(vmi)
	final := vmi == nil || vmi.IsFinal()
	// notes: lines for the log of a task that goes on (see note).
	var notes []string
	switch t.goal {
	case GoalNone:
		return true, translate.ExitOK, nil
	case GoalGone:
		if vm == nil {
			return true, translate.ExitOK, nil
		}
	case GoalStopped:
		// virt-api refuses a start while a stop request is pending
		// ("stop/start already underway"); virt-controller clears it only
		// once the instance is gone. Until then the guest is not stopped
		// as PVE means it: a start right after the task must work.
		if vm == nil || (final && !stopRequestPending(vm)) {
			return true, translate.ExitOK, nil
		}
	case GoalStoppedAfterStart:
		// virt-controller drops the start request in the status update
		// that sets Created: a cached VM without the request but not yet
		// its instance (the caches follow separate watches) reads Created.
		if vm == nil {
			return true, translate.ExitOK, nil
		}
		starting := StartPending(vm) || vm.Status.Created
		if final && (!starting || reason(vm) != "") {
			return true, translate.ExitOK, nil
		}
	case GoalProvisioned:
		if vm == nil {
			return true, fmt.Sprintf("VM %s/%s was deleted", t.namespace, t.name), nil
		}
		if vm.Status.PrintableStatus == kubevirtv1.VirtualMachineStatusPvcNotFound {
			return true, "volume provisioning failed (KubeVirt status: " + string(vm.Status.PrintableStatus) + ")" + reason(vm), nil
		}
		if msg := ts.c.stateCopyFailure(vm, t.object); msg != "" {
			// CDI will not finish the copy of the EFI/TPM state by itself.
			return true, "copying the EFI/TPM state failed: " + msg, nil
		}
		if msg := ts.c.invalidClaim(cvm.full(), t.object); msg != "" {
			// CDI retries forever; the storage's admin must act.
			return true, "volume provisioning failed: " + msg +
				" (CDI cannot pick the access and volume mode of its claim: set them in the storage class's StorageProfile, spec.claimPropertySets)", nil
		}
		if msg := reason(vm); strings.Contains(msg, "not authorized to create DataVolume") {
			msg = msg[strings.Index(msg, "not authorized to create DataVolume"):]
			// KubeVirt retries forever: the clone's DataVolumes are not made
			// until someone grants the right.
			return true, "volume provisioning failed: " + msg +
				" (KubeVirt clones from another namespace as the VM's ServiceAccount, default: it needs create on datavolumes/source there)", nil
		}
		// KubeVirt's DataVolumeError need not be final (importRetrying):
		// the task fails on what CDI gives up on, and meanwhile says what
		// CDI retries.
		failed, retrying := ts.c.dataVolumeTrouble(cvm.full(), t.object)
		switch {
		case failed != "":
			return true, "volume provisioning failed: " + failed, nil
		case retrying != "":
			notes = append(notes, "CDI retries after an error: "+retrying)
		case vm.Status.PrintableStatus == kubevirtv1.VirtualMachineStatusDataVolumeError && !ts.c.HasCDI():
			// No DataVolumes to judge by: KubeVirt's word stands.
			return true, "volume provisioning failed (KubeVirt status: DataVolumeError)" + reason(vm), nil
		}
		switch vm.Status.PrintableStatus {
		case kubevirtv1.VirtualMachineStatusProvisioning, kubevirtv1.VirtualMachineStatusWaitingForVolumeBinding, "":
		default:
			// KubeVirt may report Stopped before it has looked at the
			// volumes.
			if ts.c.volumesProvisioned(cvm.full(), t.object) {
				return true, translate.ExitOK, nil
			}
		}
	case GoalMoved:
		if done, exit, lines := ts.evaluateMoved(t, cvm.full(), now); done {
			return done, exit, lines
		}
	case GoalSnapshotReady:
		exists, ready, failure := ts.c.snapshotState(t.namespace, t.object)
		switch {
		case failure != "":
			return true, failure, nil
		case ready && !lockedBy(vm, t.object, false):
			// KubeVirt marks the snapshot ready, then lets go of the
			// VM; PVE's task ends once its lock is gone.
			return true, translate.ExitOK, nil
		case !exists && now.Sub(time.Unix(t.UPID.StartTime, 0)) > 10*time.Second:
			return true, "snapshot " + t.object + " was deleted", nil
		}
	case GoalSnapshotGone:
		if exists, _, _ := ts.c.snapshotState(t.namespace, t.object); !exists {
			return true, translate.ExitOK, nil
		}
	case GoalHomeNode:
		if vm == nil {
			return true, fmt.Sprintf("VM %s/%s was deleted", t.namespace, t.name), nil
		}
		if guestNode(ts.c.nodeTable(), vm) == t.target {
			return true, translate.ExitOK, migrationFinished(t, now)
		}
	case GoalMigrated:
		if done, exit, lines := ts.evaluateMigrated(t, cvm, vmi, now); done {
			return done, exit, lines
		}
	case GoalImported:
		dv := ts.c.DataVolume(t.namespace, t.name)
		switch {
		case !ts.c.HasCDI():
			return true, ErrNoCDI.Error(), nil
		case dv == nil || dv.UID != t.uid:
			if now.Sub(t.started) > lagGrace {
				return true, fmt.Sprintf("download failed: DataVolume %s/%s was deleted", t.namespace, t.name), nil
			}
		case dv.Status.Phase == cdiv1.Succeeded:
			var lines []string
			switch src := dv.Spec.Source; {
			case src != nil && src.HTTP != nil:
				lines = append(lines, fmt.Sprintf("download of '%s' to '%s' finished", src.HTTP.URL, ClaimPath(t.namespace, t.name)))
			case src != nil && src.Upload != nil:
				lines = append(lines, "finished file import successfully")
			}
			return true, translate.ExitOK, lines
		default:
			if why := importFailure(dv); why != "" {
				return true, "download failed: " + why, nil
			}
			if why := importRetrying(dv); why != "" {
				notes = append(notes, "CDI retries after an error: "+why)
			}
		}
	case GoalClaimGone:
		if pvc := ts.c.CachedPVC(t.namespace, t.name); pvc == nil || pvc.UID != t.uid {
			var lines []string
			if t.object != "" {
				lines = append(lines, fmt.Sprintf("Removed volume '%s'", t.object))
			}
			return true, translate.ExitOK, lines
		}
	case GoalLiveUpdated:
		gen, _ := strconv.ParseInt(t.object, 10, 64)
		if vm == nil || final || (vm.Generation >= gen && translate.LiveUpdateTaken(cvm.full(), cvmi.full())) {
			return true, translate.ExitOK, nil
		}
	case GoalSession, GoalWorker:
		// Ended by its Session, or by its deadline below.
	case GoalRestored, GoalRestoredStarted:
		if _, complete := ts.c.restoreState(t.namespace, t.object); complete && !lockedBy(vm, t.object, true) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := ts.c.reapplySnapshotConfig(ctx, t.namespace, t.object)
			if err == nil && t.goal == GoalRestoredStarted {
				started, why := ts.startRestored(ctx, t, cvm, vmi)
				cancel()
				if started {
					return true, why, nil
				}
				break
			}
			cancel()
			if err == nil {
				return true, translate.ExitOK, nil
			}
			// Tried again on the next pass, until the deadline.
			ts.c.logger.Warn("rollback", zap.String("upid", t.UPID.String()), zap.Error(err))
		}
	case GoalRunning, GoalRestarted, GoalResumed, GoalPaused:
		if vm == nil {
			return true, fmt.Sprintf("VM %s/%s was deleted", t.namespace, t.name), nil
		}
		if vmi != nil && vmi.Status.Phase == kubevirtv1.Failed {
			return true, "start failed: the VM instance failed" + reason(vm), nil
		}
		if t.goal != GoalPaused {
			if why := startBlocked(vm, vmi, now.Sub(t.started)); why != "" {
				return true, "start failed: " + why, nil
			}
		}
		paused := vmi != nil && translate.VMIPaused(vmi)
		switch {
		case t.goal == GoalRunning && running:
			return true, translate.ExitOK, nil
		case t.goal == GoalRestarted && running && vmi.UID != t.prevVMI:
			return true, translate.ExitOK, nil
		case t.goal == GoalResumed && running && !paused:
			return true, translate.ExitOK, nil
		case t.goal == GoalPaused && running && paused:
			return true, translate.ExitOK, nil
		}
	default:
		return true, "unknown task goal " + strconv.Quote(string(t.goal)), nil
	}
	if later := ts.supersededBy(t); later != nil {
		return true, fmt.Sprintf("interrupted by a later %s request (%s) before the VM was %s", later.UPID.Type, later.UPID, t.goal), nil
	}
	// A deadline that passed during an outage is extended briefly: the controllers catch up only once the cluster
	// answers again, and the task should tell what really happened.
	if now.After(t.deadline) && now.Sub(ts.c.health.recovered()) > outageGrace {
		switch t.goal {
		case GoalSession:
			return true, sessionTimeoutExit(t), nil
		case GoalWorker:
			return true, ExitWorkerLost, nil
		case GoalLiveUpdated:
			return true, translate.ExitOK, []string{"KubeVirt has not applied the CPU or memory change to the running VM yet: it shows as pending"}
		}
		switch t.goal {
		case GoalImported:
			state := "not found"
			if dv := ts.c.DataVolume(t.namespace, t.name); dv != nil {
				state = fmt.Sprintf("%s, progress %s", dv.Status.Phase, dv.Status.Progress)
			}
			return true, fmt.Sprintf("download failed: timeout waiting for DataVolume %s/%s (%s)", t.namespace, t.name, state), nil
		case GoalClaimGone:
			return true, fmt.Sprintf("timeout waiting for claim %s/%s to be deleted (still used by a running instance?)", t.namespace, t.name), nil
		}
		state := "not found"
		if vm != nil {
			state = string(vm.Status.PrintableStatus)
		}
		return true, fmt.Sprintf("timeout waiting for the VM to be %s (KubeVirt status: %s)", t.goal, state), notes
	}
	return false, "", notes
}

// volumeBindingGrace is how long a start waits for KubeVirt's
// WaitingForVolumeBinding to end: claims of WaitForFirstConsumer storage
// bind once the virt-launcher pod is scheduled, within seconds; claims
// still unbound after this wait on storage that is not coming.
const volumeBindingGrace = 2 * time.Minute

// startBlocked tells why KubeVirt will not start vm's instance without
// someone changing the cluster (a claim or network that does not exist,
// an image that cannot be pulled, a guest that keeps crashing, claims
// that do not bind), in KubeVirt's words, or "" while the start may
// still succeed. virt-controller reports these as the instance's
// Synchronized=False condition (pkg/virt-controller/watch/vmi
// lifecycle.go) and the VM's printableStatus (vm.go setPrintableStatus),
// and retries them forever.
func startBlocked(vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance, waited time.Duration) string {
	if vmi != nil && !vmi.IsRunning() && !vmi.IsFinal() {
		for _, c := range vmi.Status.Conditions {
			if c.Type != kubevirtv1.VirtualMachineInstanceSynchronized || c.Status != corev1.ConditionFalse {
				continue
			}
			switch {
			case c.Reason == "FailedCreate" && strings.Contains(c.Message, "failed to locate network attachment definition "):
				// A Multus network is a PVE bridge (net<n>: bridge=<name>).
				nad := c.Message[strings.LastIndex(c.Message, " ")+1:]
				return fmt.Sprintf("bridge '%s' does not exist (KubeVirt: %s)", nad[strings.LastIndex(nad, "/")+1:], c.Message)
			case c.Reason == "FailedCreate" && strings.Contains(c.Message, "failed to render launch manifest"),
				c.Reason == "FailedPvcNotFound", c.Reason == "ErrImagePull", c.Reason == "ImagePullBackOff":
				return fmt.Sprintf("%s (KubeVirt: %s)", c.Message, c.Reason)
			}
		}
	}
	switch st := vm.Status.PrintableStatus; {
	case st == kubevirtv1.VirtualMachineStatusCrashLoopBackOff:
		why := "the VM instance keeps failing"
		if f := vm.Status.StartFailure; f != nil {
			why = fmt.Sprintf("the VM instance failed %d times in a row", f.ConsecutiveFailCount)
		}
		return fmt.Sprintf("%s (KubeVirt status: %s)%s", why, st, reason(vm))
	case st == kubevirtv1.VirtualMachineStatusPvcNotFound, st == kubevirtv1.VirtualMachineStatusErrImagePull, st == kubevirtv1.VirtualMachineStatusImagePullBackOff:
		return fmt.Sprintf("KubeVirt status: %s%s", st, reason(vm))
	case st == kubevirtv1.VirtualMachineStatusWaitingForVolumeBinding && waited > volumeBindingGrace:
		return fmt.Sprintf("the VM's volumes are not bound after %s (KubeVirt status: %s)%s", volumeBindingGrace, st, reason(vm))
	}
	return ""
}

// ExitInterrupted is the exit status of a task stopped by DELETE
// …/tasks/{upid}: PVE's worker dies with "received interrupt" on the
// signal pve-manager sends it (PVE::RESTEnvironment::fork_worker).
const ExitInterrupted = "received interrupt"

// Interrupt ends the running task upid as a stopped PVE worker ends: its
// goal is no longer waited for, and a clone's half-made VM is removed.
func (ts *Tasks) Interrupt(ctx context.Context, upid string) {
	ts.fail(ctx, upid, ExitInterrupted)
}

// fail ends the running task upid with exit, as its worker would.
func (ts *Tasks) fail(ctx context.Context, upid, exit string) {
	u, err := translate.ParseUPID(upid)
	if err != nil {
		return
	}
	t := ts.lookup(ctx, u)
	if t == nil || !t.Running() {
		return
	}
	ts.conclude(ctx, t, exit, nil, time.Now())
}

func reason(vm *kubevirtv1.VirtualMachine) string {
	for _, c := range vm.Status.Conditions {
		if c.Type == kubevirtv1.VirtualMachineFailure && c.Message != "" {
			return ": " + c.Message
		}
	}
	return ""
}

func (t *Task) finish(exit string, at time.Time) {
	t.Status = "stopped"
	t.ExitStatus = exit
	t.EndTime = at
	t.Log = append(t.Log, translate.TaskLogEnd(exit))
}

func (t *Task) copy() *Task {
	c := *t
	c.Log = append([]string(nil), t.Log...)
	return &c
}

func (t *Task) toConfigMap(ns string) *corev1.ConfigMap {
	data := map[string]string{
		"upid":      t.UPID.String(),
		"status":    t.Status,
		"goal":      string(t.goal),
		"namespace": t.namespace,
		"name":      t.name,
		"uid":       string(t.uid),
		"prevVMI":   string(t.prevVMI),
		"object":    t.object,
		"target":    t.target,
		"deadline":  t.deadline.UTC().Format(time.RFC3339Nano),
		"started":   t.started.UTC().Format(time.RFC3339Nano),
		"log":       strings.Join(t.Log, "\n"),
	}
	labels := map[string]string{taskLabel: "true", taskNodeLabel: t.UPID.Node}
	if t.goal == GoalSession && t.object != "" {
		labels[sessionLabel] = t.object
	}
	if !t.connected.IsZero() {
		data["connected"] = t.connected.UTC().Format(time.RFC3339Nano)
	}
	if !t.Running() {
		data["exitstatus"] = t.ExitStatus
		data["endtime"] = strconv.FormatInt(t.EndTime.Unix(), 10)
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: t.cmName, Namespace: ns,
			Labels: labels,
		},
		Data: data,
	}
}

func taskFromConfigMap(cm *corev1.ConfigMap) (*Task, error) {
	u, err := translate.ParseUPID(cm.Data["upid"])
	if err != nil {
		return nil, fmt.Errorf("task record %s: %w", cm.Name, err)
	}
	t := &Task{
		UPID: u, Status: cm.Data["status"], ExitStatus: cm.Data["exitstatus"],
		goal: Goal(cm.Data["goal"]), namespace: cm.Data["namespace"], name: cm.Data["name"],
		uid: types.UID(cm.Data["uid"]), prevVMI: types.UID(cm.Data["prevVMI"]), object: cm.Data["object"], target: cm.Data["target"], cmName: cm.Name,
	}
	if l := cm.Data["log"]; l != "" {
		t.Log = strings.Split(l, "\n")
	}
	t.deadline, _ = time.Parse(time.RFC3339Nano, cm.Data["deadline"])
	t.connected, _ = time.Parse(time.RFC3339Nano, cm.Data["connected"])
	if t.started, err = time.Parse(time.RFC3339Nano, cm.Data["started"]); err != nil {
		t.started = time.Unix(u.StartTime, 0)
	}
	if s, err := strconv.ParseInt(cm.Data["endtime"], 10, 64); err == nil {
		t.EndTime = time.Unix(s, 0)
	}
	if t.Status != "running" && t.Status != "stopped" {
		return nil, fmt.Errorf("task record %s: bad status %q", cm.Name, t.Status)
	}
	return t, nil
}

func taskStatusIndexFunc(obj any) ([]string, error) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return nil, nil
	}
	return []string{cm.Data["status"]}, nil
}

// powerSense groups the power goals by the state they want: a task whose
// goal is not met yet ends when a later task on the same VM wants another.
func powerSense(g Goal) int {
	switch g {
	case GoalRunning, GoalRestarted, GoalResumed:
		return 1
	case GoalStopped, GoalStoppedAfterStart:
		return 2
	case GoalPaused:
		return 3
	}
	return 0
}

// supersededBy returns a later task on the same VM that wants another
// power state than t, if any: like PVE's per-VM lock, the last request
// decides, and t ends saying so instead of waiting for its deadline.
func (ts *Tasks) supersededBy(t *Task) *Task {
	sense := powerSense(t.goal)
	if sense == 0 {
		return nil
	}
	later := func(o *Task) bool {
		return o.cmName != t.cmName && o.uid == t.uid && o.started.After(t.started) &&
			powerSense(o.goal) != 0 && powerSense(o.goal) != sense
	}
	ts.mu.Lock()
	for _, o := range ts.recent {
		if o.namespace == t.namespace && o.name == t.name && later(o) {
			ts.mu.Unlock()
			return o.copy()
		}
	}
	ts.mu.Unlock()
	for _, obj := range ts.c.tasks.byIndex(taskVMIndex, t.namespace+"/"+t.name) {
		cm := obj.(*corev1.ConfigMap)
		// This runs for every waiting power task on every pass of the
		// worker: rule records out on their raw fields before parsing.
		if cm.Name == t.cmName || types.UID(cm.Data["uid"]) != t.uid {
			continue
		}
		if s := powerSense(Goal(cm.Data["goal"])); s == 0 || s == sense {
			continue
		}
		if o, err := taskFromConfigMap(cm); err == nil && later(o) {
			return o
		}
	}
	return nil
}

func taskVMIndexFunc(obj any) ([]string, error) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok || cm.Data["name"] == "" {
		return nil, nil
	}
	return []string{cm.Data["namespace"] + "/" + cm.Data["name"]}, nil
}

// startRestored starts a VM rolled back with start=1 (PVE's rollback
// starts it in its task) and tells when it runs. The start is the
// plugin's own, as the rest of the rollback after its request ended, and
// is asked for again only while KubeVirt has neither an instance nor a
// start request: any replica judging the task may run this.
func (ts *Tasks) startRestored(ctx context.Context, t *Task, cvm *packedVM, vmi *kubevirtv1.VirtualMachineInstance) (bool, string) {
	vm := cvm.meta()
	switch {
	case vm == nil:
		return true, fmt.Sprintf("VM %s/%s was deleted", t.namespace, t.name)
	case translate.VMIRunning(vmi):
		return true, translate.ExitOK
	case vmi != nil && vmi.Status.Phase == kubevirtv1.Failed:
		return true, "start failed: the VM instance failed" + reason(vm)
	case vmi != nil || StartPending(vm):
		return false, ""
	}
	if err := ts.c.StartVM(ctx, ts.c.guest(0, cvm, ts.c.nodeTable())); err != nil {
		// A start another replica asked for first answers 409; the
		// next pass sees it.
		ts.c.logger.Warn("start after rollback", zap.String("upid", t.UPID.String()), zap.Error(err))
	}
	return false, ""
}
