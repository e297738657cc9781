package kube

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

func specFor(g Guest, goal Goal, typ string) TaskSpec {
	return TaskSpec{
		Node: g.Node, Type: typ, ID: fmt.Sprint(g.VMID), User: "root@pam",
		Goal: goal, Namespace: g.Namespace(), Name: g.Name(), UID: g.VM().UID,
		Log: []string{fmt.Sprintf("%s %d", typ, g.VMID)},
	}
}

// taskCM reads a task's record from the API (not through any cache).
func taskCM(e *env, ns string, u translate.UPID) (*corev1.ConfigMap, error) {
	return e.kube.CoreV1().ConfigMaps(ns).Get(e.ctx, taskPrefix+u.Key(), metav1.GetOptions{})
}

// waitTaskEnd polls Get until the task stopped.
func waitTaskEnd(t *testing.T, c *Cluster, upid string) *Task {
	t.Helper()
	var last *Task
	eventually(t, "task "+upid+" to end", func() (bool, string) {
		task, err := c.Tasks.Get(context.Background(), upid)
		if err != nil {
			return false, err.Error()
		}
		last = task
		return !task.Running(), task.Status
	})
	return last
}

// waitRecord polls the task's ConfigMap until it records the end.
func waitRecord(t *testing.T, e *env, ns string, u translate.UPID, exit string) *corev1.ConfigMap {
	t.Helper()
	var cm *corev1.ConfigMap
	eventually(t, "the task record to end", func() (bool, string) {
		var err error
		cm, err = taskCM(e, ns, u)
		if err != nil {
			return false, err.Error()
		}
		return cm.Data["status"] == "stopped", fmt.Sprint(cm.Data)
	})
	if cm.Data["exitstatus"] != exit {
		t.Fatalf("recorded exitstatus %q, want %q", cm.Data["exitstatus"], exit)
	}
	if last := lastLine(strings.Split(cm.Data["log"], "\n")); last != translate.TaskLogEnd(exit) {
		t.Fatalf("recorded log ends %q, want %q", last, translate.TaskLogEnd(exit))
	}
	if cm.Data["upid"] != u.String() || cm.Labels[taskLabel] != "true" || cm.Labels[taskNodeLabel] != u.Node {
		t.Fatalf("record %s: data %v labels %v", cm.Name, cm.Data, cm.Labels)
	}
	return cm
}

// waitPasses waits until the task worker of c has made n passes over the
// running tasks that began after the call (the one under way may have
// begun before).
func waitPasses(t *testing.T, c *Cluster, n uint64) {
	t.Helper()
	want := c.Tasks.passes.Load() + 1 + n
	eventually(t, fmt.Sprintf("%d passes of the task worker", n), func() (bool, string) {
		c.Tasks.poke()
		got := c.Tasks.passes.Load()
		return got >= want, fmt.Sprintf("%d of %d", got, want)
	})
}

func call(f func(ctx context.Context, c *Cluster, g Guest) error) func(t *testing.T, e *env, c *Cluster, g Guest) {
	return func(t *testing.T, e *env, c *Cluster, g Guest) {
		t.Helper()
		if err := f(e.ctx, c, g); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTaskGoals(t *testing.T) {
	type goalCase struct {
		name     string
		vmid     int
		prepare  func(t *testing.T, e *env, c *Cluster, g Guest) // before Begin
		spec     func(g Guest) TaskSpec
		act      func(t *testing.T, e *env, c *Cluster, g Guest) // after Begin
		wantExit string
		// immediate: Begin already returns the ended task.
		immediate bool
		check     func(t *testing.T, e *env, c *Cluster, g Guest) // after the end
	}
	waitUp := func(t *testing.T, _ *env, c *Cluster, g Guest) { waitRunning(t, c, g.VMID) }
	cases := []goalCase{{
		name: "none ends OK at once", vmid: 101, immediate: true,
		spec:     func(g Guest) TaskSpec { return specFor(g, GoalNone, translate.TaskConfig) },
		wantExit: translate.ExitOK,
	}, {
		name: "an error ends the task at once", vmid: 101, immediate: true,
		spec: func(g Guest) TaskSpec {
			s := specFor(g, GoalRunning, translate.TaskStart)
			s.Err = errors.New("disk scsi0: storage nfs does not exist")
			return s
		},
		wantExit: "disk scsi0: storage nfs does not exist",
	}, {
		name: "running ends OK when the instance runs", vmid: 101,
		spec:     func(g Guest) TaskSpec { return specFor(g, GoalRunning, translate.TaskStart) },
		act:      call(func(ctx context.Context, c *Cluster, g Guest) error { return c.StartVM(ctx, g) }),
		wantExit: translate.ExitOK,
		check: func(t *testing.T, _ *env, c *Cluster, g Guest) {
			if ok, state := vmiRunning(c, g.VMID); !ok {
				t.Errorf("task ended but the VMI is %s", state)
			}
		},
	}, {
		name: "stopped ends OK when no instance runs", vmid: 100, prepare: waitUp,
		spec:     func(g Guest) TaskSpec { return specFor(g, GoalStopped, translate.TaskStop) },
		act:      call(func(ctx context.Context, c *Cluster, g Guest) error { return c.StopVM(ctx, g, nil) }),
		wantExit: translate.ExitOK,
		check: func(t *testing.T, _ *env, c *Cluster, g Guest) {
			if g := mustGuest(t, c, g.VMID); g.VMI() != nil && !g.VMI().IsFinal() {
				t.Errorf("task ended but the VMI is %s", vmiState(c, g.VMID))
			}
		},
	}, {
		name: "gone ends OK when the VM object is deleted", vmid: 100, prepare: waitUp,
		spec:     func(g Guest) TaskSpec { return specFor(g, GoalGone, translate.TaskDestroy) },
		act:      call(func(ctx context.Context, c *Cluster, g Guest) error { return c.DeleteVM(ctx, g) }),
		wantExit: translate.ExitOK,
		check: func(t *testing.T, e *env, c *Cluster, g Guest) {
			if _, err := c.Guest(g.VMID); !errors.Is(err, ErrNotFound) {
				t.Errorf("task ended but Guest(%d) = %v", g.VMID, err)
			}
		},
	}, {
		name: "restarted needs a new instance", vmid: 100, prepare: waitUp,
		spec: func(g Guest) TaskSpec {
			s := specFor(g, GoalRestarted, translate.TaskReboot)
			s.PrevVMI = g.VMI().UID
			return s
		},
		act: func(t *testing.T, e *env, c *Cluster, g Guest) {
			// The old instance runs, but it is not a new one: the task
			// still runs after the worker looked at it a few times.
			waitPasses(t, c, 3)
			for _, task := range c.Tasks.List("") {
				if !task.Running() {
					t.Fatalf("restart task ended while the old instance runs: %s", task.ExitStatus)
				}
			}
			call(func(ctx context.Context, c *Cluster, g Guest) error { return c.RestartVM(ctx, g) })(t, e, c, g)
		},
		wantExit: translate.ExitOK,
		check: func(t *testing.T, _ *env, c *Cluster, g Guest) {
			now := mustGuest(t, c, g.VMID)
			if now.VMI() == nil || now.VMI().UID == g.VMI().UID {
				t.Errorf("task ended on instance %s (old %s)", vmiState(c, g.VMID), g.VMI().UID)
			}
		},
	}, {
		name: "paused", vmid: 100, prepare: waitUp,
		spec:     func(g Guest) TaskSpec { return specFor(g, GoalPaused, translate.TaskPause) },
		act:      call(func(ctx context.Context, c *Cluster, g Guest) error { return c.PauseVM(ctx, g) }),
		wantExit: translate.ExitOK,
	}, {
		name: "resumed", vmid: 100,
		prepare: func(t *testing.T, e *env, c *Cluster, g Guest) {
			waitRunning(t, c, g.VMID)
			call(func(ctx context.Context, c *Cluster, g Guest) error { return c.PauseVM(ctx, mustGuest(t, c, g.VMID)) })(t, e, c, g)
			eventually(t, "paused", func() (bool, string) { return paused(g.VMID, true)(c, g) })
		},
		spec:     func(g Guest) TaskSpec { return specFor(g, GoalResumed, translate.TaskResume) },
		act:      call(func(ctx context.Context, c *Cluster, g Guest) error { return c.UnpauseVM(ctx, g) }),
		wantExit: translate.ExitOK,
	}, {
		name: "a running goal fails when the VM is another one", vmid: 101,
		spec: func(g Guest) TaskSpec {
			s := specFor(g, GoalRunning, translate.TaskStart)
			s.UID = types.UID("an-earlier-namesake")
			return s
		},
		wantExit: "VM default/win-11 was deleted",
	}, {
		name: "deadline passed", vmid: 101,
		prepare: func(t *testing.T, _ *env, c *Cluster, g Guest) {
			eventually(t, "the printable status", func() (bool, string) {
				s := mustGuest(t, c, g.VMID).VM().Status.PrintableStatus
				return s == kubevirtv1.VirtualMachineStatusStopped, string(s)
			})
		},
		spec: func(g Guest) TaskSpec {
			s := specFor(g, GoalRunning, translate.TaskStart)
			s.Timeout = 150 * time.Millisecond
			return s
		},
		wantExit: "timeout waiting for the VM to be running (KubeVirt status: Stopped)",
	}, {
		name: "unknown goal", vmid: 101,
		spec: func(g Guest) TaskSpec {
			s := specFor(g, Goal("hibernated"), translate.TaskSuspend)
			return s
		},
		wantExit: `unknown task goal "hibernated"`,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{controller: true})
			c := e.cluster(Options{}, true)
			g := mustGuest(t, c, tc.vmid)
			if tc.prepare != nil {
				tc.prepare(t, e, c, g)
				g = mustGuest(t, c, tc.vmid)
			}
			spec := tc.spec(g)
			before := time.Now().Unix()
			task, err := c.Tasks.Begin(e.ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			u := task.UPID
			if u.Node != g.Node || u.Type != spec.Type || u.ID != spec.ID || u.User != "root@pam" ||
				u.StartTime < before || u.StartTime > time.Now().Unix() {
				t.Fatalf("UPID %s does not describe the task", u)
			}
			if parsed, err := translate.ParseUPID(u.String()); err != nil || parsed != u {
				t.Fatalf("UPID %s does not round-trip: %v", u, err)
			}
			if tc.immediate {
				if task.Running() || task.ExitStatus != tc.wantExit || task.EndTime.IsZero() {
					t.Fatalf("Begin = %s %q, want stopped %q at once", task.Status, task.ExitStatus, tc.wantExit)
				}
			} else if task.Status != "running" || task.ExitStatus != "" || !task.EndTime.IsZero() {
				t.Fatalf("Begin = %s %q, want running", task.Status, task.ExitStatus)
			}
			if tc.act != nil {
				// The goal is not met yet: the task runs until act.
				got, err := c.Tasks.Get(e.ctx, u.String())
				if err != nil || !got.Running() || got.ExitStatus != "" {
					t.Fatalf("Get before the action = %+v, %v; want running", got, err)
				}
				tc.act(t, e, c, g)
			}
			end := waitTaskEnd(t, c, u.String())
			if end.Status != "stopped" || end.ExitStatus != tc.wantExit {
				t.Fatalf("task ended %s %q, want %q", end.Status, end.ExitStatus, tc.wantExit)
			}
			wantLog := append(slices.Clone(spec.Log), translate.TaskLogEnd(tc.wantExit))
			if !slices.Equal(end.Log, wantLog) {
				t.Fatalf("log = %q, want %q", end.Log, wantLog)
			}
			if end.UPID != u || end.EndTime.Before(time.Unix(u.StartTime, 0)) {
				t.Fatalf("ended task: UPID %s end %v", end.UPID, end.EndTime)
			}
			if tc.wantExit != translate.ExitOK && !strings.HasPrefix(lastLine(end.Log), "TASK ERROR: ") {
				t.Fatalf("failed task's log ends %q", lastLine(end.Log))
			}
			waitRecord(t, e, c.TaskNamespace(), u, tc.wantExit)
			// The answer stands.
			again, err := c.Tasks.Get(e.ctx, u.String())
			if err != nil || again.Status != "stopped" || again.ExitStatus != tc.wantExit {
				t.Fatalf("second Get = %+v, %v", again, err)
			}
			if tc.check != nil {
				tc.check(t, e, c, g)
			}
		})
	}
}

// Any replica answers for a task, and finishes it, also after the replica
// that began it is gone.
func TestTaskOtherReplica(t *testing.T) {
	t.Run("both running", func(t *testing.T) {
		e := newEnv(t, envOptions{controller: true})
		a := e.cluster(Options{}, true)
		b := e.cluster(Options{}, true)
		g := mustGuest(t, a, 101)
		task, err := a.Tasks.Begin(e.ctx, specFor(g, GoalRunning, translate.TaskStart))
		if err != nil {
			t.Fatal(err)
		}
		upid := task.UPID.String()
		// b answers at once, even before its cache has the record.
		got, err := b.Tasks.Get(e.ctx, upid)
		if err != nil || got.UPID != task.UPID || !got.Running() || !slices.Equal(got.Log, task.Log) {
			t.Fatalf("b.Get = %+v, %v; want the running task", got, err)
		}
		if err := b.StartVM(e.ctx, mustGuest(t, b, 101)); err != nil {
			t.Fatal(err)
		}
		for name, c := range map[string]*Cluster{"b": b, "a": a} {
			end := waitTaskEnd(t, c, upid)
			if end.ExitStatus != translate.ExitOK || lastLine(end.Log) != "TASK OK" {
				t.Fatalf("%s: task ended %q, log %q", name, end.ExitStatus, end.Log)
			}
		}
		waitRecord(t, e, "default", task.UPID, translate.ExitOK)
		eventually(t, "b to list the ended task", func() (bool, string) {
			l := b.Tasks.List("")
			return len(l) == 1 && l[0].UPID == task.UPID && l[0].ExitStatus == translate.ExitOK, fmt.Sprint(l)
		})
	})
	t.Run("after a restart", func(t *testing.T) {
		e := newEnv(t, envOptions{controller: true})
		a := e.cluster(Options{}, true)
		g := mustGuest(t, a, 101)
		spec := specFor(g, GoalRunning, translate.TaskStart)
		task, err := a.Tasks.Begin(e.ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		a.Stop() // the replica that began the task is gone

		b := e.cluster(Options{}, true)
		if err := b.StartVM(e.ctx, mustGuest(t, b, 101)); err != nil {
			t.Fatal(err)
		}
		// Nobody asks b: its own loop must finish the record.
		cm := waitRecord(t, e, "default", task.UPID, translate.ExitOK)
		if want := strings.Join(append(slices.Clone(spec.Log), "TASK OK"), "\n"); cm.Data["log"] != want {
			t.Fatalf("recorded log %q, want %q", cm.Data["log"], want)
		}
		got, err := b.Tasks.Get(e.ctx, task.UPID.String())
		if err != nil || got.ExitStatus != translate.ExitOK || got.Running() {
			t.Fatalf("b.Get = %+v, %v", got, err)
		}
		b.Stop()
		// A third start still knows the task.
		c := e.cluster(Options{}, true)
		got, err = c.Tasks.Get(e.ctx, task.UPID.String())
		if err != nil || got.ExitStatus != translate.ExitOK || got.Running() || lastLine(got.Log) != "TASK OK" {
			t.Fatalf("c.Get = %+v, %v", got, err)
		}
	})
}

// recordTask stores a task record directly, as another replica would have.
func recordTask(t *testing.T, e *env, ns string, u translate.UPID, status, exit string, end time.Time) translate.UPID {
	t.Helper()
	task := &Task{UPID: u, Status: status, goal: GoalNone, cmName: taskPrefix + u.Key(), deadline: time.Now().Add(time.Hour)}
	if status == "stopped" {
		task.finish(exit, end)
	} else {
		task.goal = GoalRunning
		task.namespace, task.name, task.uid = "default", "win-11", seedWinUID
	}
	if _, err := e.kube.CoreV1().ConfigMaps(ns).Create(e.ctx, task.toConfigMap(ns), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return u
}

func upidAt(node string, pid uint32, start int64) translate.UPID {
	return translate.UPID{Node: node, PID: pid, PStart: 7, StartTime: start, Type: translate.TaskStart, ID: "101", User: "root@pam"}
}

func upids(ts []*Task) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.UPID.String())
	}
	return out
}

func TestTaskList(t *testing.T) {
	e := newEnv(t, envOptions{})
	c := e.cluster(Options{}, true)
	now := time.Now().Unix()
	t1 := recordTask(t, e, "default", upidAt("n1", 1, now-300), "stopped", "OK", time.Unix(now-290, 0))
	t2 := recordTask(t, e, "default", upidAt("n2", 2, now-200), "stopped", "boom", time.Unix(now-190, 0))
	t3 := recordTask(t, e, "default", upidAt("n1", 3, now-100), "running", "", time.Time{})
	// Same start: the larger UPID first.
	t5 := recordTask(t, e, "default", upidAt("n3", 0x10, now-50), "stopped", "OK", time.Unix(now-40, 0))
	t6 := recordTask(t, e, "default", upidAt("n3", 0x20, now-50), "stopped", "OK", time.Unix(now-40, 0))
	// Records elsewhere or unreadable are not tasks.
	recordTask(t, e, "lab", upidAt("n1", 9, now), "stopped", "OK", time.Unix(now, 0))
	bad := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: taskPrefix + "bad", Namespace: "default", Labels: map[string]string{taskLabel: "true"}},
		Data:       map[string]string{"upid": "UPID:broken", "status": "stopped"},
	}
	unlabeled := bad.DeepCopy()
	unlabeled.Name, unlabeled.Labels = taskPrefix+"unlabeled", nil
	unlabeled.Data["upid"] = upidAt("n1", 8, now).String()
	for _, cm := range []*corev1.ConfigMap{bad, unlabeled} {
		if _, err := e.kube.CoreV1().ConfigMaps("default").Create(e.ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	g := mustGuest(t, c, 101)
	begun, err := c.Tasks.Begin(e.ctx, TaskSpec{Node: "n1", Type: translate.TaskConfig, ID: "101", User: "root@pam", Namespace: g.Namespace(), Name: g.Name(), UID: g.VM().UID})
	if err != nil {
		t.Fatal(err)
	}
	t4 := begun.UPID

	eventually(t, "the records in the cache", func() (bool, string) {
		return len(c.Tasks.List("")) == 6, fmt.Sprint(upids(c.Tasks.List("")))
	})
	cases := []struct {
		node string
		want []translate.UPID
	}{
		{"", []translate.UPID{t4, t6, t5, t3, t2, t1}},
		{"n1", []translate.UPID{t4, t3, t1}},
		{"n2", []translate.UPID{t2}},
		{"n3", []translate.UPID{t6, t5}},
		{"n4", nil},
	}
	for _, tc := range cases {
		var want []string
		for _, u := range tc.want {
			want = append(want, u.String())
		}
		if got := upids(c.Tasks.List(tc.node)); !slices.Equal(got, want) {
			t.Errorf("List(%q) =\n %q\nwant\n %q", tc.node, got, want)
		}
	}
	byUPID := map[translate.UPID]*Task{}
	for _, task := range c.Tasks.List("") {
		byUPID[task.UPID] = task
	}
	for u, want := range map[translate.UPID][3]string{
		t1: {"stopped", "OK", "TASK OK"}, t2: {"stopped", "boom", "TASK ERROR: boom"},
		t3: {"running", "", ""}, t4: {"stopped", "OK", "TASK OK"},
	} {
		task := byUPID[u]
		if got := [3]string{task.Status, task.ExitStatus, lastLine(task.Log)}; got != want {
			t.Errorf("%s: %q, want %q", u, got, want)
		}
	}
	if end := byUPID[t2].EndTime; !end.Equal(time.Unix(now-190, 0)) {
		t.Errorf("t2 endtime %v", end)
	}
}

func TestTaskPrune(t *testing.T) {
	e := newEnv(t, envOptions{})
	c := e.cluster(Options{}, true, func(c *Cluster) { c.Tasks.Retention = 5 * time.Second })
	now := time.Now()
	old := recordTask(t, e, "default", upidAt("n1", 1, now.Add(-time.Hour).Unix()), "stopped", "OK", now.Add(-50*time.Minute))
	oldRunning := recordTask(t, e, "default", upidAt("n1", 2, now.Add(-time.Hour).Unix()), "running", "", time.Time{})
	g := mustGuest(t, c, 101)
	ended, err := c.Tasks.Begin(e.ctx, specFor(g, GoalNone, translate.TaskConfig))
	if err != nil {
		t.Fatal(err)
	}
	waiting, err := c.Tasks.Begin(e.ctx, specFor(g, GoalRunning, translate.TaskStart))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the records in the cache", func() (bool, string) {
		return len(c.Tasks.List("")) == 4, fmt.Sprint(upids(c.Tasks.List("")))
	})

	steps := []struct {
		name   string
		at     time.Time
		kept   []translate.UPID
		pruned []translate.UPID
	}{
		{"only tasks ended longer ago than Retention go", time.Now(),
			[]translate.UPID{ended.UPID, waiting.UPID, oldRunning}, []translate.UPID{old}},
		{"later, the recent one goes too; running ones never", time.Now().Add(time.Minute),
			[]translate.UPID{waiting.UPID, oldRunning}, []translate.UPID{old, ended.UPID}},
	}
	for _, st := range steps {
		c.Tasks.prune(e.ctx, st.at)
		for _, u := range st.pruned {
			if _, err := taskCM(e, "default", u); !apierrors.IsNotFound(err) {
				t.Errorf("%s: record of %s: %v, want deleted", st.name, u, err)
			}
			eventually(t, "the pruned task to be unknown", func() (bool, string) {
				_, err := c.Tasks.Get(e.ctx, u.String())
				return errors.Is(err, ErrNoSuchTask), errString(err)
			})
		}
		for _, u := range st.kept {
			if _, err := taskCM(e, "default", u); err != nil {
				t.Errorf("%s: record of %s: %v, want kept", st.name, u, err)
			}
			if _, err := c.Tasks.Get(e.ctx, u.String()); err != nil {
				t.Errorf("%s: Get(%s): %v", st.name, u, err)
			}
		}
		var want []string
		for _, u := range st.kept {
			want = append(want, u.String())
		}
		slices.Sort(want)
		eventually(t, "List to match", func() (bool, string) {
			got := upids(c.Tasks.List(""))
			slices.Sort(got)
			return slices.Equal(got, want), fmt.Sprint(got)
		})
	}
}

func TestTaskUnknownUPID(t *testing.T) {
	e := newEnv(t, envOptions{})
	c := e.cluster(Options{}, true)
	g := mustGuest(t, c, 101)
	task, err := c.Tasks.Begin(e.ctx, specFor(g, GoalNone, translate.TaskConfig))
	if err != nil {
		t.Fatal(err)
	}
	u := task.UPID
	otherUser, otherType := u, u
	otherUser.User = "admin@pve"
	otherType.Type = translate.TaskStop
	cases := []struct {
		name, upid string
		found      bool
	}{
		{"empty", "", false},
		{"garbage", "garbage", false},
		{"no trailing colon", strings.TrimSuffix(u.String(), ":"), false},
		{"short pid", "UPID:pve:1:00000000:00000000:qmstart:100:root@pam:", false},
		{"never begun", upidAt(g.Node, 0xdead, time.Now().Unix()).String(), false},
		{"same record, other user", otherUser.String(), false},
		{"same record, other type", otherType.String(), false},
		{"the task", u.String(), true},
		{"lower-case prefix", "upid:" + strings.TrimPrefix(u.String(), "UPID:"), false},
		{"lower-case hex digits", fmt.Sprintf("UPID:%s:%08x:%08x:%08x:%s:%s:%s:", u.Node, u.PID, u.PStart, u.StartTime, u.Type, u.ID, u.User), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.Tasks.Get(e.ctx, tc.upid)
			if !tc.found {
				if !errors.Is(err, ErrNoSuchTask) || got != nil {
					t.Fatalf("Get(%q) = %+v, %v; want ErrNoSuchTask", tc.upid, got, err)
				}
				return
			}
			if err != nil || got.UPID != u || got.ExitStatus != translate.ExitOK {
				t.Fatalf("Get(%q) = %+v, %v", tc.upid, got, err)
			}
		})
	}
	// A second replica does not know it either.
	other := e.cluster(Options{}, true)
	if _, err := other.Tasks.Get(e.ctx, otherUser.String()); !errors.Is(err, ErrNoSuchTask) {
		t.Errorf("other replica: %v", err)
	}
}

// A goal met when the task begins (stop of a stopped VM) ends the task
// through the worker at once; Begin's answer must not race with it.
func TestTaskGoalMetAtBegin(t *testing.T) {
	e := newEnv(t, envOptions{})
	c := e.cluster(Options{}, true)
	g := mustGuest(t, c, 101) // win-11: no instance
	var tasks []*Task
	for range 20 {
		task, err := c.Tasks.Begin(e.ctx, specFor(g, GoalStopped, translate.TaskStop))
		if err != nil {
			t.Fatal(err)
		}
		if task.Status != "running" || len(task.Log) != 1 {
			t.Fatalf("Begin = %s %q", task.Status, task.Log)
		}
		tasks = append(tasks, task)
	}
	for _, task := range tasks {
		waitRecord(t, e, "default", task.UPID, translate.ExitOK)
		end := waitTaskEnd(t, c, task.UPID.String())
		if end.ExitStatus != translate.ExitOK || !slices.Equal(end.Log, []string{"qmstop 101", "TASK OK"}) {
			t.Fatalf("task ended %q with log %q", end.ExitStatus, end.Log)
		}
	}
}

// TestTaskSuperseded: a start still waiting when a later stop is asked
// for ends at once, saying so, rather than waiting for its deadline.
func TestTaskSuperseded(t *testing.T) {
	e := newEnv(t, envOptions{}) // no controller: nothing ever starts
	c := e.cluster(Options{}, true)
	g := mustGuest(t, c, 101)
	start, err := c.Tasks.Begin(e.ctx, specFor(g, GoalRunning, translate.TaskStart))
	if err != nil {
		t.Fatal(err)
	}
	stop, err := c.Tasks.Begin(e.ctx, specFor(g, GoalStopped, translate.TaskStop))
	if err != nil {
		t.Fatal(err)
	}
	if end := waitTaskEnd(t, c, stop.UPID.String()); end.ExitStatus != translate.ExitOK {
		t.Fatalf("stop: %q", end.ExitStatus)
	}
	end := waitTaskEnd(t, c, start.UPID.String())
	if !strings.HasPrefix(end.ExitStatus, "interrupted by a later qmstop request") {
		t.Fatalf("superseded start ended %q", end.ExitStatus)
	}
	waitRecord(t, e, "default", start.UPID, end.ExitStatus)
}

// TestTaskWaitsOutOutage: while the cluster is unreachable the caches are
// stale, so no task is judged on them; once it is back, tasks end.
func TestTaskWaitsOutOutage(t *testing.T) {
	e := newEnv(t, envOptions{})
	c := e.cluster(Options{}, true)
	g := mustGuest(t, c, 101) // no instance: a stop's goal is met
	c.health.report(errors.New("connection refused"))
	task, err := c.Tasks.Begin(e.ctx, specFor(g, GoalStopped, translate.TaskStop))
	if err != nil {
		t.Fatal(err)
	}
	waitPasses(t, c, 3)
	if got, err := c.Tasks.Get(e.ctx, task.UPID.String()); err != nil || !got.Running() {
		t.Fatalf("task judged during the outage: %v %v", got, err)
	}
	if c.Healthy() == nil {
		t.Fatal("Healthy during the outage")
	}
	c.health.report(nil)
	if end := waitTaskEnd(t, c, task.UPID.String()); end.ExitStatus != translate.ExitOK {
		t.Fatalf("after the outage: %q", end.ExitStatus)
	}
}

// TestTaskStopAfterPendingStart: a stop that comes while KubeVirt has not
// yet acted on a start request (no instance; virt-controller waits for the
// VM's volumes) neither ends at once, leaving the start to bring the VM up
// after it, nor waits for a stop nobody asked for: it stops the instance
// once KubeVirt creates it, and ends when it is gone.
func TestTaskStopAfterPendingStart(t *testing.T) {
	e := newEnv(t, envOptions{}) // no controller: this test plays it
	c := e.cluster(Options{}, true)
	g := mustGuest(t, c, 101) // win-11: no instance
	if err := c.StartVM(e.ctx, g); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the start request in the cache", func() (bool, string) {
		g = mustGuest(t, c, 101)
		return StartPending(g.VM()), fmt.Sprint(g.VM().Status.StateChangeRequests)
	})
	task, err := c.Tasks.Begin(e.ctx, specFor(g, GoalStoppedAfterStart, translate.TaskStop))
	if err != nil {
		t.Fatal(err)
	}
	c.StopAfterStart(e.ctx, g, nil, task.UPID.String())
	waitPasses(t, c, 3)
	if got, err := c.Tasks.Get(e.ctx, task.UPID.String()); err != nil || !got.Running() {
		t.Fatalf("stop ended before the pending start was acted on: %v %v", got, err)
	}

	// KubeVirt acts on the start: the instance, then the request dropped.
	vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{
		Name: g.Name(), Namespace: g.Namespace(),
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(g.VM(), kubevirtv1.VirtualMachineGroupVersionKind)},
	}, Status: kubevirtv1.VirtualMachineInstanceStatus{Phase: kubevirtv1.Scheduling}}
	if _, err := e.kv.KubevirtV1().VirtualMachineInstances(g.Namespace()).Create(e.ctx, vmi, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vm := e.mustGetVM(g.Namespace(), g.Name())
	vm.Status.StateChangeRequests, vm.Status.Created = nil, true
	if _, err := e.kv.KubevirtV1().VirtualMachines(vm.Namespace).UpdateStatus(e.ctx, vm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a stop request for the instance", func() (bool, string) {
		vm := e.mustGetVM(g.Namespace(), g.Name())
		for _, r := range vm.Status.StateChangeRequests {
			if r.Action == kubevirtv1.StopRequest {
				return true, ""
			}
		}
		return false, fmt.Sprint(vm.Status.StateChangeRequests)
	})
	if got, err := c.Tasks.Get(e.ctx, task.UPID.String()); err != nil || !got.Running() {
		t.Fatalf("stop ended while the instance exists: %v %v", got, err)
	}
	if err := e.kv.KubevirtV1().VirtualMachineInstances(g.Namespace()).Delete(e.ctx, g.Name(), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	vm = e.mustGetVM(g.Namespace(), g.Name())
	vm.Status.StateChangeRequests, vm.Status.Created = nil, false
	if _, err := e.kv.KubevirtV1().VirtualMachines(vm.Namespace).UpdateStatus(e.ctx, vm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if end := waitTaskEnd(t, c, task.UPID.String()); end.ExitStatus != translate.ExitOK {
		t.Fatalf("stop ended %q", end.ExitStatus)
	}
}

// TestTaskStopAfterFailedStart: a stop waiting for a pending start ends OK
// when KubeVirt reports that it cannot create the instance.
func TestTaskStopAfterFailedStart(t *testing.T) {
	e := newEnv(t, envOptions{})
	c := e.cluster(Options{}, true)
	g := mustGuest(t, c, 101)
	if err := c.StartVM(e.ctx, g); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the start request in the cache", func() (bool, string) {
		g = mustGuest(t, c, 101)
		return StartPending(g.VM()), fmt.Sprint(g.VM().Status.StateChangeRequests)
	})
	task, err := c.Tasks.Begin(e.ctx, specFor(g, GoalStoppedAfterStart, translate.TaskStop))
	if err != nil {
		t.Fatal(err)
	}
	waitPasses(t, c, 3)
	if got, err := c.Tasks.Get(e.ctx, task.UPID.String()); err != nil || !got.Running() {
		t.Fatalf("stop ended before the pending start was acted on: %v %v", got, err)
	}
	vm := e.mustGetVM(g.Namespace(), g.Name())
	vm.Status.Conditions = append(vm.Status.Conditions, kubevirtv1.VirtualMachineCondition{
		Type: kubevirtv1.VirtualMachineFailure, Status: corev1.ConditionTrue, Reason: "FailedCreate",
		Message: "Failure while starting VMI: admission webhook denied the request"})
	if _, err := e.kv.KubevirtV1().VirtualMachines(vm.Namespace).UpdateStatus(e.ctx, vm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if end := waitTaskEnd(t, c, task.UPID.String()); end.ExitStatus != translate.ExitOK {
		t.Fatalf("stop ended %q", end.ExitStatus)
	}
}

// TestTaskStopAfterStartOfDeletedVM: a stop waiting for a pending start
// ends OK when the VM is deleted meanwhile (it read the gone VM's status
// and brought the task worker down).
func TestTaskStopAfterStartOfDeletedVM(t *testing.T) {
	e := newEnv(t, envOptions{})
	c := e.cluster(Options{}, true)
	g := mustGuest(t, c, 101)
	if err := c.StartVM(e.ctx, g); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the start request in the cache", func() (bool, string) {
		g = mustGuest(t, c, 101)
		return StartPending(g.VM()), fmt.Sprint(g.VM().Status.StateChangeRequests)
	})
	task, err := c.Tasks.Begin(e.ctx, specFor(g, GoalStoppedAfterStart, translate.TaskStop))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.kv.KubevirtV1().VirtualMachines(g.Namespace()).Delete(e.ctx, g.Name(), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if end := waitTaskEnd(t, c, task.UPID.String()); end.ExitStatus != translate.ExitOK {
		t.Fatalf("stop ended %q", end.ExitStatus)
	}
}
