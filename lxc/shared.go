package lxc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"
)

// Several Caddy instances in front of the same guests act as one through
// Caddy's storage (the one a Caddy cluster already shares for its
// certificates: a shared file system, or a storage module):
//
//   - Activity. Each instance writes, per guest, when it last served it
//     (at most once per Share.Interval, and every interval while requests
//     or streams are open). Before an idle stop, an instance reads the
//     others' records and stops only when none has served the guest
//     within idle_timeout (plus one interval, the records' lag).
//   - Ownership. Posting a start, resume or stop takes the guest's storage
//     lock; whoever gets it second reads the status again and finds the
//     guest started (or stopped) instead of posting the same task: one
//     start serves every instance, the others wait on it.
//
// Storage keys: proxmox_wake/<cluster>/<vmid>/activity/<instance>, and the
// lock proxmox_wake/<cluster>/<vmid>/power. The cluster is the name in the
// config, which the instances must share.

// Share is how the instances share state.
type Share struct {
	// Storage is Caddy's storage (ctx.Storage()).
	Storage certmagic.Storage
	// Interval is how often at most this instance writes a guest's
	// activity (DefaultShareInterval).
	Interval time.Duration
}

// DefaultShareInterval is Share.Interval's default.
const DefaultShareInterval = 10 * time.Second

// shareRecordTTL: older activity records can no longer keep a guest up
// and are deleted by whoever reads them, so that instances that are gone
// leave nothing behind for long.
const shareRecordTTL = 24 * time.Hour

// shareIOTimeout bounds one storage operation.
const shareIOTimeout = 10 * time.Second

// instanceID names this process in the records: host, pid and a random
// part, so that two processes never share one (Caddy's own instance.uuid
// lives in the data directory, which containers may share).
var instanceID = func() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
}()

// SetShare makes the cluster's guests share activity and ownership
// through s (nil: each instance on its own). The proxmox app sets it when
// it starts.
func (c *Cluster) SetShare(s *Share) {
	if s != nil && s.Interval <= 0 {
		cp := *s
		cp.Interval = DefaultShareInterval
		s = &cp
	}
	c.share.Store(s)
}

func (c *Cluster) sharing() *Share {
	if c == nil {
		return nil
	}
	return c.share.Load()
}

// activityRecord is one instance's last activity on a guest.
type activityRecord struct {
	Instance     string    `json:"instance"`
	LastActivity time.Time `json:"last_activity"`
	// Busy: requests or streams were open when it was written (it is
	// then written again every interval).
	Busy bool `json:"busy,omitempty"`
}

func shareKey(cluster string, vmid int, parts ...string) string {
	return path.Join(append([]string{"proxmox_wake", cluster, strconv.Itoa(vmid)}, parts...)...)
}

// shareState is a guest's activity publishing; guarded by Guest.mu.
type shareState struct {
	lastWrite time.Time
	pending   bool // a write is scheduled or running
	dirty     bool // activity since the running write read its record
	timer     *time.Timer
	// writing counts running writes, for Destruct to wait on: a write
	// that outlives its runtime would race the next config's writes.
	writing sync.WaitGroup
	// deferLogged: the current run of deferrals to another instance was
	// logged at info already.
	deferLogged bool
}

// touchShareLocked notes activity to publish: written now if the last
// write is an interval old, else once that interval is over. Called from
// Begin and its end, with g.mu held; cheap when nothing is shared.
func (g *Guest) touchShareLocked() {
	if g.shared.pending {
		g.shared.dirty = true
		return
	}
	sh := g.currentLocked().c.sharing()
	if sh == nil {
		return
	}
	g.shared.pending = true
	wait := time.Until(g.shared.lastWrite.Add(sh.Interval))
	if wait <= 0 {
		go g.flushShare()
		return
	}
	g.shared.timer = time.AfterFunc(wait, g.flushShare)
}

// flushShare writes this instance's activity record of the guest; while
// requests are open, or when activity came during the write, it schedules
// the next write an interval later.
func (g *Guest) flushShare() {
	g.mu.Lock()
	if g.ctx.Err() != nil {
		g.shared.pending = false
		g.mu.Unlock()
		return
	}
	g.shared.writing.Add(1)
	defer g.shared.writing.Done()
	b := g.currentLocked()
	sh, vmid := b.c.sharing(), g.target.vmid
	rec := activityRecord{Instance: instanceID, LastActivity: g.lastActivity, Busy: g.inflight > 0}
	if rec.Busy {
		rec.LastActivity = time.Now()
	}
	g.shared.dirty = false
	g.mu.Unlock()
	if sh != nil && vmid != 0 {
		data, _ := json.Marshal(rec)
		ctx, cancel := context.WithTimeout(g.ctx, shareIOTimeout)
		err := sh.Storage.Store(ctx, shareKey(g.clusterName, vmid, "activity", instanceID), data)
		cancel()
		if err != nil {
			g.logger.Warn("writing the guest's activity to the shared storage", zap.Error(err))
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.shared.lastWrite, g.shared.pending = time.Now(), false
	if sh != nil && (g.inflight > 0 || g.shared.dirty) && g.ctx.Err() == nil {
		g.shared.pending = true
		g.shared.timer = time.AfterFunc(sh.Interval, g.flushShare)
	}
}

// stopShare stops the activity writes (the runtime is destroyed); with
// g.ctx already cancelled, no write starts after it. Called with g.mu held:
// the caller waits on g.shared.writing once it has let go.
func (g *Guest) stopShare() {
	if g.shared.timer != nil {
		g.shared.timer.Stop()
	}
}

// peerActivity is the latest activity other instances recorded for the
// guest, deleting records too old to matter.
func (g *Guest) peerActivity(ctx context.Context, sh *Share, vmid int) (latest time.Time, who string, err error) {
	prefix := shareKey(g.clusterName, vmid, "activity")
	keys, err := sh.Storage.List(ctx, prefix, false)
	if errors.Is(err, fs.ErrNotExist) {
		return time.Time{}, "", nil
	}
	if err != nil {
		return time.Time{}, "", err
	}
	mine := shareKey(g.clusterName, vmid, "activity", instanceID)
	for _, k := range keys {
		if k == mine {
			continue
		}
		data, err := sh.Storage.Load(ctx, k)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return time.Time{}, "", err
		}
		var rec activityRecord
		if json.Unmarshal(data, &rec) != nil {
			continue
		}
		if time.Since(rec.LastActivity) > shareRecordTTL {
			_ = sh.Storage.Delete(ctx, k)
			continue
		}
		if rec.LastActivity.After(latest) {
			latest, who = rec.LastActivity, rec.Instance
		}
	}
	return latest, who, nil
}

// lockPower takes the guest's power lock in the shared storage; waiting
// is called (once) when another instance holds it. It returns the unlock.
func lockPower(ctx context.Context, sh *Share, cluster string, vmid int, waiting func()) (func(), error) {
	name := shareKey(cluster, vmid, "power")
	locked := false
	if tl, ok := sh.Storage.(certmagic.TryLocker); ok {
		got, err := tl.TryLock(ctx, name)
		if err != nil {
			return nil, err
		}
		locked = got
	}
	if !locked {
		if waiting != nil {
			waiting()
		}
		if err := sh.Storage.Lock(ctx, name); err != nil {
			return nil, err
		}
	}
	return func() {
		uctx, cancel := context.WithTimeout(context.Background(), shareIOTimeout)
		defer cancel()
		_ = sh.Storage.Unlock(uctx, name)
	}, nil
}

func noop() {}

// claimStart takes the power lock before a start or resume is posted
// (st is the status it was decided on). changed reports that the guest
// is no longer as st says (another instance started it meanwhile): the
// caller releases and decides again.
func (g *Guest) claimStart(ctx context.Context, c *Cluster, t target, st guestStatus) (release func(), changed bool) {
	sh := c.sharing()
	if sh == nil {
		return noop, false
	}
	unlock, err := lockPower(ctx, sh, g.clusterName, t.vmid, func() {
		g.emit(Event{Phase: "waiting", Message: "Another server is starting the guest.", Detail: "Another Caddy instance holds the guest's power lock", Progress: 20})
	})
	if err != nil {
		// The wake's time is up, or the storage fails: post anyway, as a
		// single instance would (PVE refuses a second start).
		g.logger.Warn("taking the guest's power lock in the shared storage", zap.Error(err))
		return noop, false
	}
	now, err := status(ctx, c.Client(), t)
	if err == nil && (now.Status != st.Status || now.QMPStatus != st.QMPStatus || now.obs() != st.obs()) {
		return unlock, true
	}
	return unlock, false
}

// claimStop takes the power lock before a stop is posted and, for an
// idle stop, checks the other instances' activity: wait > 0 means one
// served the guest within idle_timeout, and the stop is put off that
// long (nothing is locked then).
func (g *Guest) claimStop(ctx context.Context, b *Binding, t target, reason string) (release func(), wait time.Duration) {
	sh := b.c.sharing()
	if sh == nil || t.vmid == 0 {
		return noop, 0
	}
	cfg := b.cfg
	unlock, err := lockPower(ctx, sh, g.clusterName, t.vmid, nil)
	if err != nil {
		g.logger.Warn("taking the guest's power lock in the shared storage; stop put off", zap.Error(err))
		return noop, max(cfg.IdleTimeout, time.Second)
	}
	if reason != "idle" {
		return unlock, 0
	}
	latest, who, err := g.peerActivity(ctx, sh, t.vmid)
	if err != nil {
		unlock()
		g.logger.Warn("reading the other instances' activity from the shared storage; stop put off", zap.Error(err))
		return noop, max(cfg.IdleTimeout, time.Second)
	}
	if until := latest.Add(cfg.IdleTimeout + sh.Interval); !latest.IsZero() && time.Now().Before(until) {
		unlock()
		g.mu.Lock()
		first := !g.shared.deferLogged
		g.shared.deferLogged = true
		g.mu.Unlock()
		log := g.logger.Debug
		if first {
			log = g.logger.Info
		}
		log("idle stop deferred: another Caddy instance served the guest", zap.String("instance", who),
			zap.Time("its_last_activity", latest), zap.Int("vmid", t.vmid))
		return noop, max(time.Until(until), 10*time.Millisecond)
	}
	g.mu.Lock()
	g.shared.deferLogged = false
	g.mu.Unlock()
	return unlock, 0
}

// deferStopToPeer ends a stop that another instance's activity put off:
// the guest is as before, and the idle check runs again after wait.
func (g *Guest) deferStopToPeer(done chan struct{}, wait time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopDone = nil
	close(done)
	if g.wake == nil {
		g.setStateLocked(g.beforeStop)
	}
	g.armIdleLocked(wait)
}
