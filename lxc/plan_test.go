package lxc

import (
	"strings"
	"testing"
)

func st(status, qmp, lock string) guestStatus {
	return guestStatus{Status: status, QMPStatus: qmp, Lock: lock}
}

func ha(s guestStatus, state string) guestStatus {
	s.HA = haStatus{Managed: true, State: state}
	return s
}

func TestNextWakeStep(t *testing.T) {
	tmpl := st("stopped", "", "")
	tmpl.Template = true
	for _, c := range []struct {
		name      string
		kind      string
		st        guestStatus
		requested bool
		want      wakeAction
		public    string // substring of the words, when they matter
	}{
		{"stopped", "lxc", st("stopped", "", ""), false, actStart, ""},
		{"running", "lxc", st("running", "", ""), false, actUp, ""},
		{"running under a snapshot-mode backup", "qemu", st("running", "running", "backup"), false, actUp, ""},
		{"suspended to RAM", "qemu", st("running", "paused", ""), false, actResume, ""},
		{"guest S3", "qemu", st("running", "suspended", ""), false, actResume, ""},
		{"prelaunch for a backup", "qemu", st("running", "prelaunch", "backup"), false, actResume, ""},
		{"paused under a snapshot lock", "qemu", st("running", "paused", "snapshot"), false, actWait, "Snapshot in progress"},
		{"stopped CT under backup", "lxc", st("stopped", "", "backup"), false, actWait, "Backup in progress"},
		{"stopped VM migrating", "qemu", st("stopped", "stopped", "migrate"), false, actWait, "Migration in progress"},
		{"rollback", "lxc", st("stopped", "", "rollback"), false, actWait, "rollback"},
		{"unknown lock", "lxc", st("stopped", "", "fstrim"), false, actWait, "locked (fstrim)"},
		{"mounted CT starts", "lxc", st("stopped", "", "mounted"), false, actStart, ""},
		{"hibernated VM starts", "qemu", st("stopped", "stopped", "suspended"), false, actStart, ""},
		{"template", "lxc", tmpl, false, actFail, "template"},
		{"stopped again after an OK start", "lxc", st("stopped", "", ""), true, actFail, "stopped right after"},

		{"HA stopped", "lxc", ha(st("stopped", "", ""), "stopped"), false, actStart, ""},
		{"HA start requested, CRM not there yet", "lxc", ha(st("stopped", "", ""), "stopped"), true, actWait, "starting"},
		{"HA request_start", "lxc", ha(st("stopped", "", ""), "request_start"), true, actWait, "starting"},
		{"HA started, LRM not there yet", "lxc", ha(st("stopped", "", ""), "started"), true, actWait, "starting"},
		{"HA started and running", "lxc", ha(st("running", "", ""), "started"), true, actUp, ""},
		{"HA started, stopped under backup", "lxc", ha(st("stopped", "", "backup"), "started"), false, actWait, "Backup"},
		{"HA error", "lxc", ha(st("running", "", ""), "error"), false, actFail, "error state"},
		{"HA error, stopped", "lxc", ha(st("stopped", "", ""), "error"), false, actFail, "administrator"},
		{"HA fence", "lxc", ha(st("stopped", "", ""), "fence"), false, actWait, "fencing"},
		{"HA recovery", "qemu", ha(st("stopped", "stopped", ""), "recovery"), false, actWait, "recovering"},
		{"HA freeze", "lxc", ha(st("stopped", "", ""), "freeze"), false, actWait, "paused on the guest's node"},
		{"HA migrate", "qemu", ha(st("running", "running", "migrate"), "migrate"), false, actWait, "moved"},
		{"HA relocate", "lxc", ha(st("stopped", "", ""), "relocate"), false, actWait, "moved"},
		{"HA rebalance on start", "lxc", ha(st("stopped", "", ""), "request_start_balance"), true, actWait, "moved"},
		{"HA request_stop", "lxc", ha(st("running", "", ""), "request_stop"), false, actWait, "being stopped"},
		{"HA stopped but still running", "lxc", ha(st("running", "", ""), "stopped"), false, actWait, "being stopped"},
		{"HA stopped VM in prelaunch backup", "qemu", ha(st("running", "prelaunch", "backup"), "stopped"), false, actWait, "Backup"},
		{"HA-managed VM suspended", "qemu", ha(st("running", "paused", ""), "started"), false, actResume, ""},
		{"HA state unknown to us", "lxc", ha(st("stopped", "", ""), "queued"), false, actWait, "busy"},
		{"HA template", "qemu", func() guestStatus { s := ha(st("stopped", "stopped", ""), "stopped"); s.Template = true; return s }(), false, actFail, "template"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := nextWakeStep(c.kind, c.st, c.requested)
			if got.action != c.want {
				t.Fatalf("action %d, want %d (%+v)", got.action, c.want, got)
			}
			if c.public != "" && !contains(got.public, c.public) {
				t.Fatalf("words %q lack %q", got.public, c.public)
			}
			if (got.action == actWait || got.action == actFail) && (got.public == "" || got.detail == "") {
				t.Fatalf("no words: %+v", got)
			}
		})
	}
}

func contains(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}

func TestPlanStop(t *testing.T) {
	for _, c := range []struct {
		method, kind string
		ha           bool
		action       string
		force, warn  bool
	}{
		{StopShutdown, "lxc", false, StopShutdown, true, false},
		{StopShutdown, "qemu", false, StopShutdown, true, false},
		{StopShutdown, "qemu", true, StopShutdown, false, false}, // HA forces VMs itself
		{StopShutdown, "lxc", true, StopStop, false, true},       // never HA's error state
		{StopStop, "lxc", true, StopStop, false, false},
		{StopStop, "qemu", false, StopStop, false, false},
		{StopSuspend, "qemu", false, StopSuspend, false, false},
		{StopSuspend, "qemu", true, StopSuspend, false, false},
		{StopSuspend, "lxc", false, StopShutdown, true, true}, // CRIU checkpoint: not for us
		{StopSuspend, "lxc", true, StopStop, false, true},
	} {
		p := planStop(c.method, c.kind, c.ha)
		if p.action != c.action || p.force != c.force || (p.warn != "") != c.warn {
			t.Errorf("%s %s ha=%v: %+v", c.method, c.kind, c.ha, p)
		}
	}
}

func TestIdleBlocker(t *testing.T) {
	for _, c := range []struct {
		res  Resource
		want string
	}{
		{Resource{Status: "running"}, ""},
		{Resource{Status: "running", HAState: "started"}, ""},
		{Resource{Status: "running", HAState: "ignored"}, ""},
		{Resource{Status: "running", Lock: "backup"}, "Backup in progress"},
		{Resource{Status: "running", Lock: "snapshot"}, "Snapshot in progress"},
		{Resource{Status: "running", HAState: "error"}, "HA state error"},
		{Resource{Status: "running", HAState: "migrate"}, "HA state migrate"},
		{Resource{Status: "running", HAState: "freeze"}, "HA state freeze"},
		{Resource{Status: "unknown"}, "its node reports no status"},
	} {
		if got := idleBlocker(c.res); got != c.want {
			t.Errorf("%+v: %q, want %q", c.res, got, c.want)
		}
	}
}

func TestObservedState(t *testing.T) {
	row := func(status, kind, lock string) Resource { return Resource{Status: status, Kind: kind, Lock: lock} }
	for _, c := range []struct {
		name     string
		cur      State
		res      Resource
		template bool
		want     State
		external bool
	}{
		{"first poll, running", StateUnknown, row("running", "lxc", ""), false, StateRunning, true},
		{"first poll, stopped", StateUnknown, row("stopped", "lxc", ""), false, StateStopped, false},
		{"started by someone", StateStopped, row("running", "lxc", ""), false, StateRunning, true},
		{"stopped by someone", StateReady, row("stopped", "lxc", ""), false, StateStopped, false},
		{"ready stays ready", StateReady, row("running", "lxc", ""), false, StateReady, false},
		{"unknown row never demotes", StateReady, row("unknown", "lxc", ""), false, StateReady, false},
		{"unknown row on a stopped guest", StateStopped, row("unknown", "lxc", ""), false, StateStopped, false},
		{"backup prelaunch is no start", StateStopped, row("running", "qemu", "backup"), false, StateStopped, false},
		{"backup prelaunch at first poll", StateUnknown, row("running", "qemu", "backup"), false, StateStopped, false},
		{"running CT under backup, started by someone", StateStopped, row("running", "lxc", "backup"), false, StateRunning, true},
		{"suspended VM is running to PVE", StateSuspended, row("running", "qemu", ""), false, StateSuspended, false},
		{"suspended VM stopped by someone", StateSuspended, row("stopped", "qemu", ""), false, StateStopped, false},
		{"missing comes back stopped", StateMissing, row("stopped", "lxc", ""), false, StateStopped, false},
		{"failed, someone started it", StateFailed, row("running", "lxc", ""), false, StateRunning, true},
		{"failed, now stopped", StateFailed, row("stopped", "lxc", ""), false, StateStopped, false},
		{"template", StateUnknown, row("stopped", "qemu", ""), true, StateMissing, false},
	} {
		got, ext, _ := observedState(c.cur, c.res, c.template)
		if got != c.want || ext != c.external {
			t.Errorf("%s: %s external=%v, want %s %v", c.name, got, ext, c.want, c.external)
		}
	}
}
