package pvesim

import (
	"net"
	"sync/atomic"
	"time"
)

// Load is what a running guest does besides the HTTP it serves: CPU as a
// fraction of its CPUs (PVE's cpu: 1 = all of them busy) and byte rates
// per second, as a transcode, a download or a backup job inside it would.
type Load struct {
	CPU                                float64
	NetIn, NetOut, DiskRead, DiskWrite float64
}

// loadSeg is a load in force from a moment on.
type loadSeg struct {
	from time.Time
	load Load
}

// usageModel is a guest's measured usage. Like PVE's, the counters count
// since the guest started (a restart resets them), the network ones
// include the bytes its service really exchanged, and /cluster/resources
// shows what pvestatd measured at its last round (every StatInterval),
// while status/current is live.
type usageModel struct {
	loads []loadSeg
	// served bytes of the service, in total; the run's own are counted
	// from servedBase, taken when a new run (since) is first seen.
	servedIn, servedOut atomic.Uint64
	run                 time.Time
	baseIn, baseOut     uint64
}

// usage is one measurement.
type usage struct {
	cpu                                float64
	netin, netout, diskread, diskwrite uint64
}

// SetLoad makes vmid work at l from now on (Load{} ends it). It shows in
// the guest's cpu, netin, netout, diskread and diskwrite while it runs.
func (s *Sim) SetLoad(vmid int, l Load) {
	s.withGuest(vmid, func(g *guest) {
		g.usage.loads = append(g.usage.loads, loadSeg{from: time.Now(), load: l})
	})
}

// measureLocked is the guest's usage as of t (not after now): the
// integral of its loads over [since, t] plus the bytes its service
// exchanged in this run. Called with sim.mu held.
func (g *guest) measureLocked(t time.Time) usage {
	m := &g.usage
	if g.status != "running" || g.paused() || t.Before(g.since) {
		return usage{}
	}
	if !m.run.Equal(g.since) {
		m.run, m.baseIn, m.baseOut = g.since, m.servedIn.Load(), m.servedOut.Load()
	}
	var u usage
	var in, out, rd, wr float64
	for i, seg := range m.loads {
		from := seg.from
		if from.Before(g.since) {
			from = g.since
		}
		to := t
		if i+1 < len(m.loads) && m.loads[i+1].from.Before(to) {
			to = m.loads[i+1].from
		}
		if !from.Before(to) {
			if !seg.from.After(t) {
				u.cpu = seg.load.CPU
			}
			continue
		}
		d := to.Sub(from).Seconds()
		in += seg.load.NetIn * d
		out += seg.load.NetOut * d
		rd += seg.load.DiskRead * d
		wr += seg.load.DiskWrite * d
		u.cpu = seg.load.CPU
	}
	u.netin = uint64(in) + m.servedIn.Load() - m.baseIn
	u.netout = uint64(out) + m.servedOut.Load() - m.baseOut
	u.diskread, u.diskwrite = uint64(rd), uint64(wr)
	return u
}

// statRoundLocked is the last pvestatd round at or before now.
func (s *Sim) statRoundLocked(now time.Time) time.Time {
	n := now.Sub(s.started) / s.opts.StatInterval
	return s.started.Add(n * s.opts.StatInterval)
}

// measuredLocked is the usage /cluster/resources shows: as of the last
// pvestatd round.
func (s *Sim) measuredLocked(g *guest) usage {
	return g.measureLocked(s.statRoundLocked(time.Now()))
}

func (u usage) fields() map[string]any {
	return map[string]any{"cpu": u.cpu, "netin": u.netin, "netout": u.netout, "diskread": u.diskread, "diskwrite": u.diskwrite}
}

// countingListener counts the bytes the guest's service exchanges.
type countingListener struct {
	net.Listener
	in, out *atomic.Uint64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, in: l.in, out: l.out}, nil
}

type countingConn struct {
	net.Conn
	in, out *atomic.Uint64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.in.Add(uint64(n))
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.out.Add(uint64(n))
	return n, err
}
