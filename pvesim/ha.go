package pvesim

import (
	"fmt"
	"strconv"
	"time"
)

// haResource is a guest's pve-ha-manager service. Its state is the
// manager's service state (PVE/HA/Manager.pm): started, stopped,
// request_start, request_start_balance, request_stop, error, fence,
// recovery, freeze, migrate, relocate. An ignored service is in HA's
// config but "behaves as if not managed by HA" (PVE/HA/Config.pm): power
// calls go straight to the guest.
type haResource struct {
	state   string
	ignored bool
	// startNode is where HA's rebalance-on-start puts the guest when it
	// starts (crs ha-rebalance-on-start=1), "" for its own node.
	startNode string
	// gen changes on every outside state change, so that a pending step
	// of an earlier request does not act.
	gen int
}

func (h *haResource) managed() bool { return h != nil && !h.ignored }

// hastate is the "hastate" of a /cluster/resources row.
func (h *haResource) hastate() string {
	switch {
	case h == nil:
		return ""
	case h.ignored:
		return "ignored"
	}
	return h.state
}

// haTaskLocked forks the hastart/hastop worker: it runs ha-manager, which
// only records the request, and ends OK; request then runs. Called with
// sim.mu held.
func (s *Sim) haTaskLocked(g *guest, typ, line string, request func()) string {
	t := s.newTaskLocked(g.spec.Node, typ, strconv.Itoa(g.spec.VMID), s.opts.TaskDelay, func() (string, []string) {
		request()
		return "OK", []string{line}
	})
	s.logf("pvesim: %s %d: %s (%s)", g.spec.Kind, g.spec.VMID, typ, t.upid)
	return t.upid
}

// haLaterLocked runs f (with sim.mu held) one HA round later, unless the
// service's state was changed from outside meanwhile.
func (s *Sim) haLaterLocked(g *guest, f func()) {
	gen := g.ha.gen
	s.haLaterDelay(g, gen, s.opts.HADelay, f)
}

func (s *Sim) haLaterDelay(g *guest, gen int, d time.Duration, f func()) {
	time.AfterFunc(d, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed || g.ha == nil || g.ha.gen != gen {
			return
		}
		f()
	})
}

// haStartLocked is "ha-manager set <sid> --state started": the CRM moves a
// stopped service to request_start (or request_start_balance, then to the
// chosen node) and the LRM starts it. In every other state the request
// changes nothing (error is left only through disabled; fence, recovery,
// freeze, migrate and relocate finish first). Called with sim.mu held.
func (s *Sim) haStartLocked(g *guest) {
	if g.ha.state != "stopped" {
		return
	}
	g.ha.state = "request_start"
	s.haLaterLocked(g, func() {
		if t := g.ha.startNode; t != "" && t != g.spec.Node {
			g.ha.state = "request_start_balance"
			s.haLaterLocked(g, func() {
				s.logf("pvesim: HA moves %d from %s to %s for its start", g.spec.VMID, g.spec.Node, t)
				g.spec.Node = t
				s.haRunStartLocked(g)
			})
			return
		}
		s.haRunStartLocked(g)
	})
}

// haRunStartLocked marks the service started and lets the LRM start it.
func (s *Sim) haRunStartLocked(g *guest) {
	g.ha.state = "started"
	delay := s.opts.TaskDelay
	if g.spec.StartDelay > 0 {
		delay = g.spec.StartDelay
	}
	s.haLaterDelay(g, g.ha.gen, delay, func() {
		if g.status != "running" && g.lock == "" && g.failStart == "" {
			g.startedLocked()
		}
	})
}

// haStopLocked is "ha-manager crm-command stop <sid> <timeout>": in
// started, the CRM moves the service to request_stop and the LRM shuts it
// down with the timeout (0: a hard stop). Containers are shut down
// without forceStop (PVE/HA/Resources/PVECT.pm), VMs with it (PVEVM.pm);
// a guest still running afterwards puts the service in error
// (LRM.pm, Manager.pm next_state_request_stop). Called with sim.mu held.
func (s *Sim) haStopLocked(g *guest, timeout int) {
	if g.ha.state != "started" {
		return
	}
	s.haLaterLocked(g, func() {
		g.ha.state = "request_stop"
		graceful := g.shutdownDelay()
		limit := time.Duration(timeout) * time.Second
		d, stops := graceful, true
		switch {
		case timeout == 0:
			d = s.opts.TaskDelay
		case graceful > limit:
			d = limit
			stops = g.spec.Kind == "qemu" // forceStop
		}
		s.haLaterDelay(g, g.ha.gen, d, func() {
			if stops || g.status != "running" {
				g.stopLocked()
				g.ha.state = "stopped"
				return
			}
			s.logf("pvesim: HA could not stop %d (still running): service in error", g.spec.VMID)
			g.ha.state = "error"
		})
	})
}

// SetHAState puts vmid's HA service in state, as the CRM or an admin
// would: "error", "fence", "recovery", "freeze", "migrate", "relocate",
// "started", "stopped", or "ignored" (still in HA's config, but managed
// directly). Requests in progress are dropped.
func (s *Sim) SetHAState(vmid int, state string) {
	s.withGuest(vmid, func(g *guest) {
		if g.ha == nil {
			panic(fmt.Sprintf("pvesim: guest %d is not HA-managed", vmid))
		}
		g.ha.gen++
		g.ha.ignored = state == "ignored"
		if !g.ha.ignored {
			g.ha.state = state
		}
	})
}

// SetHAStartNode makes HA start vmid on node (its rebalance-on-start
// choice); "" starts it where it is.
func (s *Sim) SetHAStartNode(vmid int, node string) {
	s.withGuest(vmid, func(g *guest) {
		if g.ha == nil {
			panic(fmt.Sprintf("pvesim: guest %d is not HA-managed", vmid))
		}
		g.ha.startNode = node
	})
}

// HAState is vmid's hastate as /cluster/resources shows it ("" when not
// in HA).
func (s *Sim) HAState(vmid int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.guests[vmid]; g != nil {
		return g.ha.hastate()
	}
	return ""
}
