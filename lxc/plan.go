package lxc

import "fmt"

// The decisions of the state machine, kept free of I/O and clocks so that
// table tests reach every case: what a wake does next given the guest's
// status/current, which stop a guest gets, and why an idle guest must not
// be stopped now.

// wakeAction is what a wake does next about the guest's power state.
type wakeAction int

const (
	// actUp: running and not paused: go on to its address and probe.
	actUp wakeAction = iota
	// actStart posts a start (for an HA-managed guest, a request to HA).
	actStart
	// actResume posts a resume (a paused QEMU, prelaunch included).
	actResume
	// actWait polls again: a lock, HA at work, or a start under way.
	actWait
	// actFail ends the wake: nothing posted could help.
	actFail
)

// wakeStep is a decision with its words: the event while waiting, the
// public reason of a failure.
type wakeStep struct {
	action wakeAction
	// public is fit for anyone (the loading page); detail is for logs.
	public, detail string
}

// nextWakeStep decides from status/current what a wake does next.
// requested is set once this wake's start (or resume) task ended OK.
func nextWakeStep(kind string, st guestStatus, requested bool) wakeStep {
	running := st.Status == "running"
	if st.Template {
		r := templateReason(kind)
		return wakeStep{actFail, "The guest is a template and cannot be started.", r}
	}
	if st.HA.Managed {
		if s, ok := haWakeStep(st, requested); ok {
			return s
		}
	}
	switch {
	case running && !st.paused():
		return wakeStep{action: actUp}
	case running:
		// Paused: a resume is allowed during a backup (the backup of a
		// stopped VM runs it in prelaunch; qemu-server vm_resume).
		if st.Lock != "" && st.Lock != "backup" {
			return lockWait(st.Lock)
		}
		return wakeStep{action: actResume}
	case st.Lock != "" && !startsDespiteLock(kind, st.Lock):
		return lockWait(st.Lock)
	case requested && !bool(st.HA.Managed):
		// The start task ended OK, yet the guest is down again.
		return wakeStep{actFail, "The guest stopped right after it was started.", "status stopped after a successful start task"}
	}
	return wakeStep{action: actStart}
}

// haWakeStep decides for an HA-managed guest while HA's service state
// matters; ok is false when the plain power state decides. HA ignores
// requests in every state but started and stopped, so the wake asks
// nothing there: it fails on error (left only by an administrator) and
// waits out the transient ones (pve-ha-manager Manager.pm).
func haWakeStep(st guestStatus, requested bool) (wakeStep, bool) {
	running := st.Status == "running"
	state := st.HA.State
	switch state {
	case "error":
		return wakeStep{actFail, "The guest's high-availability resource is in an error state and needs an administrator.",
			"HA state error: every request is ignored until an administrator recovers the resource (ha-manager set <sid> --state disabled)"}, true
	case "fence":
		return haWait("The guest's node failed; high availability is fencing it", state), true
	case "recovery":
		return haWait("High availability is recovering the guest on another node", state), true
	case "freeze":
		return haWait("High availability is paused on the guest's node", state), true
	case "migrate", "relocate", "request_start_balance":
		return haWait("The guest is being moved to another node", state), true
	case "request_stop":
		return haWait("The guest is being stopped; it starts again afterwards", state), true
	case "request_start":
		return haWait("High availability is starting the guest", state), true
	case "started":
		if !running && st.Lock != "" {
			return lockWait(st.Lock), true
		}
		if !running {
			return haWait("High availability is starting the guest", state), true
		}
	case "stopped", "disabled", "":
		switch {
		case running && st.paused() && st.Lock != "":
			// A backup runs the stopped VM in prelaunch; resumed behind
			// HA's back, HA (which wants it stopped) would stop it.
			return lockWait(st.Lock), true
		case running && !st.paused():
			// HA still stops it (a request_stop just ended).
			return haWait("The guest is being stopped; it starts again afterwards", state), true
		case requested && !running:
			return haWait("High availability is starting the guest", state), true
		}
	default:
		// A state this code does not know: HA is at work; ask nothing.
		return haWait("High availability is busy with the guest", state), true
	}
	return wakeStep{}, false
}

func haWait(msg, state string) wakeStep {
	return wakeStep{actWait, msg, "HA state " + state}
}

// startsDespiteLock: PVE starts an LXC with the "mounted" lock and a VM
// hibernated with "suspended" (it resumes it); every other lock fails
// the start (check_lock).
func startsDespiteLock(kind, lock string) bool {
	return (kind == "lxc" && lock == "mounted") || (kind == "qemu" && lock == "suspended")
}

func lockWait(lock string) wakeStep {
	return wakeStep{actWait, lockText(lock), "config lock " + lock}
}

// lockText says in words what a config lock means.
func lockText(lock string) string {
	switch lock {
	case "backup":
		return "Backup in progress"
	case "migrate":
		return "Migration in progress"
	case "snapshot":
		return "Snapshot in progress"
	case "snapshot-delete":
		return "Snapshot removal in progress"
	case "rollback":
		return "Snapshot rollback in progress"
	case "clone":
		return "Clone in progress"
	case "create":
		return "The guest is being created"
	case "disk":
		return "Disk operation in progress"
	case "mounted":
		return "The guest's volumes are mounted for maintenance"
	case "suspending":
		return "The guest is being suspended"
	}
	return fmt.Sprintf("The guest is locked (%s)", lock)
}

// templateReason is PVE's own refusal to start a template (qemu-server
// vm_start, pve-container's start worker).
func templateReason(kind string) string {
	if kind == "qemu" {
		return "you can't start a vm if it's a template"
	}
	return "you can't start a CT if it's a template"
}

// stopPlan is how a guest is put to sleep.
type stopPlan struct {
	// action is the PVE power call: shutdown, stop or suspend.
	action string
	// warn, when set, explains why action differs from stop_method.
	warn string
	// force: a failed shutdown is followed by a hard stop.
	force bool
}

// planStop maps stop_method onto the guest. LXC suspend is PVE's
// experimental CRIU checkpoint-and-stop (pve-container Status.pm; criu is
// not even installed by default), so containers are shut down instead.
// HA shuts containers down without forceStop, and one that outlives the
// timeout lands in HA's error state (PVECT.pm, LRM.pm), from which only
// an administrator brings it back: an HA-managed container therefore gets
// HA's hard stop. HA forces VMs itself (PVEVM.pm), so they keep shutdown.
func planStop(method, kind string, ha bool) stopPlan {
	p := stopPlan{action: method}
	if kind == "lxc" && method == StopSuspend {
		p.action = StopShutdown
		p.warn = "stop_method suspend is PVE's experimental checkpoint for containers (CRIU, not installed by default, and a later start cold-boots): shutting the container down instead"
	}
	if kind == "lxc" && ha && p.action == StopShutdown {
		p.action = StopStop
		p.warn = "HA never forces a container's shutdown, and one that outlives the timeout would leave the resource in HA's error state: asking HA for a hard stop instead (take the container out of HA for a graceful shutdown)"
	}
	// Without HA, PVE forces the shutdown itself (forceStop); a shutdown
	// that fails otherwise gets a hard stop. With HA, the request is all
	// there is.
	p.force = p.action == StopShutdown && !ha
	return p
}

// idleBlocker is why an idle guest is not stopped now ("" when it may
// be), from its last /cluster/resources row: a config lock (PVE refuses
// the stop, and a hard stop would hit a backup), HA busy with the guest,
// or no status at all (pvestatd stalled).
func idleBlocker(res Resource) string {
	switch {
	case res.Status == "unknown":
		return "its node reports no status"
	case res.Lock != "":
		return lockText(res.Lock)
	case haBusy(res.HAState):
		return "HA state " + res.HAState
	}
	return ""
}

// haBusy: any HA state but started (or none, or ignored) means HA either
// works on the guest or ignores requests.
func haBusy(hastate string) bool {
	switch hastate {
	case "", "started", "ignored":
		return false
	}
	return true
}
