package wake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/caddy-proxmox/caddy-proxmox/lxc"
)

// A guest reference with placeholders ("lab/{labels.2}") is resolved per
// request. It serves only guests that carry the handler's opt-in tag
// (caddy-wake unless tag says otherwise), so that a host name can never
// wake an arbitrary guest; every other name is answered 404 from the last
// cluster poll, before anything is allocated or asked of Proxmox. A served
// guest gets its own runtime (shared with any other config naming it, as
// literal references do), with the handler's settings overridden by its
// caddy-<option>-<value> tags.

// hasPlaceholder reports whether a guest reference is resolved per
// request.
func hasPlaceholder(ref string) bool { return strings.ContainsAny(ref, "{}") }

// dynamicGuests are the guests a placeholder reference resolved to, by
// vmid. Only guests found in the poll and carrying the tag get an entry,
// so the map is bounded by the cluster's tagged guests, whatever names
// clients send.
type dynamicGuests struct {
	cluster *lxc.Cluster
	ref     string // the reference's guest part, with placeholders
	tag     string
	base    lxc.GuestConfig
	logger  *zap.Logger

	mu     sync.Mutex
	bound  map[int]*dynamicGuest
	closed bool
	// refused are the tags of guests whose tags make no config, logged
	// once per set of tags rather than per request.
	refused map[int]string
}

// dynamicGuest is one resolved guest: its binding, and the tags its
// config was made from (new tags, new binding).
type dynamicGuest struct {
	b    *lxc.Binding
	tags string
}

func newDynamicGuests(c *lxc.Cluster, ref, tag string, base lxc.GuestConfig, logger *zap.Logger) *dynamicGuests {
	d := &dynamicGuests{cluster: c, ref: ref, tag: tag, base: base, logger: logger, bound: map[int]*dynamicGuest{}}
	d.adoptResolved()
	return d
}

// errTagConfig is a guest whose tags make no valid config.
var errTagConfig = errors.New("the guest's caddy- tags make an invalid configuration")

// bind returns the binding of the guest res, creating it on first use or
// when its tags changed.
func (d *dynamicGuests) bind(res lxc.Resource) (*lxc.Binding, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errors.New("config unloaded")
	}
	prev := d.bound[res.VMID]
	b, err := d.bindLocked(res.VMID, res.Tags)
	if err == nil && (prev == nil || prev.b != b) {
		// The app started before this guest was known.
		b.Guest().ScheduleKeepWarm()
	}
	return b, err
}

func (d *dynamicGuests) bindLocked(vmid int, tags []string) (*lxc.Binding, error) {
	sig := strings.Join(tags, ";")
	cur := d.bound[vmid]
	if cur != nil && cur.tags == sig {
		return cur.b, nil
	}
	if d.refused[vmid] == sig {
		return nil, errTagConfig
	}
	cfg, ignored, err := d.base.WithTags(tags, d.tag)
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		d.refuseLocked(vmid, sig)
		d.logger.Error("not serving the guest: fix its tags", zap.Int("vmid", vmid), zap.Strings("tags", tags), zap.Error(err))
		return nil, fmt.Errorf("%w: %v", errTagConfig, err)
	}
	if len(ignored) > 0 {
		d.logger.Warn("tags with the caddy- prefix that are no override (see the README's placeholder references)",
			zap.Int("vmid", vmid), zap.Strings("ignored", ignored))
	}
	b, err := lxc.AcquireGuest(d.cluster, strconv.Itoa(vmid), cfg, d.logger)
	if err != nil {
		d.refuseLocked(vmid, sig)
		d.logger.Error("not serving the guest", zap.Int("vmid", vmid), zap.Error(err))
		return nil, fmt.Errorf("%w: %v", errTagConfig, err)
	}
	delete(d.refused, vmid)
	if cur != nil {
		_ = cur.b.Release()
	}
	d.bound[vmid] = &dynamicGuest{b: b, tags: sig}
	resolvedBefore.remember(d.key(), vmid, tags)
	return b, nil
}

func (d *dynamicGuests) refuseLocked(vmid int, sig string) {
	if d.refused == nil {
		d.refused = map[int]string{}
	}
	d.refused[vmid] = sig
}

// key names the reference across configs: same cluster, reference and tag.
func (d *dynamicGuests) key() string {
	return d.cluster.Name() + "/" + d.ref + "|" + d.tag
}

// adoptResolved binds, at provision, the guests the same reference of the
// previous config resolved to: a reload then keeps their runtimes (idle
// timers, wakes in progress), as it keeps those of literal references,
// instead of dropping them until a request comes. It makes no request.
func (d *dynamicGuests) adoptResolved() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for vmid, tags := range resolvedBefore.get(d.key()) {
		_, _ = d.bindLocked(vmid, tags)
	}
}

// resolvedBefore remembers, per reference, the guests it resolved to and
// their tags then: bounded by the cluster's tagged guests.
var resolvedBefore = &resolvedGuests{m: map[string]map[int][]string{}}

type resolvedGuests struct {
	mu sync.Mutex
	m  map[string]map[int][]string
}

func (r *resolvedGuests) remember(key string, vmid int, tags []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m[key] == nil {
		r.m[key] = map[int][]string{}
	}
	r.m[key][vmid] = append([]string(nil), tags...)
}

func (r *resolvedGuests) get(key string) map[int][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[int][]string, len(r.m[key]))
	for id, tags := range r.m[key] {
		out[id] = tags
	}
	return out
}

// Release ends every binding (config unload).
func (d *dynamicGuests) Release() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for id, x := range d.bound {
		_ = x.b.Release()
		delete(d.bound, id)
	}
}

// Guests are the runtimes of the guests resolved so far.
func (d *dynamicGuests) Guests() []*lxc.Guest {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]*lxc.Guest, 0, len(d.bound))
	for _, x := range d.bound {
		out = append(out, x.b.Guest())
	}
	return out
}

// serveDynamic resolves the guest of this request and serves it as a
// handler of that guest would; names that resolve to no tagged guest get
// a 404 and change nothing.
func (h *WakeHandler) serveDynamic(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	d := h.dynamic
	repl, _ := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if repl == nil {
		repl = caddy.NewReplacer()
	}
	ref := repl.ReplaceAll(d.ref, "")
	res, err := d.cluster.LookupTagged(ref, d.tag)
	if lxc.IsNotPolled(err) {
		// Caddy just started: the first poll is on its way.
		ctx, cancel := context.WithTimeout(r.Context(), min(h.hold, 10*time.Second))
		werr := d.cluster.WaitReady(ctx)
		cancel()
		if werr != nil {
			return h.unavailable(w, r, http.StatusServiceUnavailable, 5*time.Second, "The Proxmox cluster is not reachable.")
		}
		res, err = d.cluster.LookupTagged(ref, d.tag)
	}
	if err != nil {
		if lxc.IsNotServed(err) {
			h.logger.Debug("placeholder reference names no guest to serve", zap.String("ref", ref), zap.Error(err))
			return h.notServed(w, r)
		}
		return h.unavailable(w, r, http.StatusServiceUnavailable, 5*time.Second, "The Proxmox cluster is not reachable.")
	}
	b, err := d.bind(res)
	if err != nil {
		return h.unavailable(w, r, http.StatusServiceUnavailable, 30*time.Second, "The service is misconfigured.")
	}
	// A copy of the handler bound to this guest: everything below reads
	// its guest, binding and port from it.
	hc := *h
	hc.dynamic = nil
	hc.binding, hc.guest, hc.port = b, b.Guest(), b.Config().Port
	hc.Guest = h.clusterName() + "/" + strconv.Itoa(res.VMID)
	return hc.ServeHTTP(w, r, next)
}

// clusterName is the cluster part of the guest reference.
func (h *WakeHandler) clusterName() string {
	c, _, _ := strings.Cut(h.Guest, "/")
	return c
}

// notServed answers a name that is no guest to serve here: 404, the same
// for unknown guests and untagged ones (the answer tells nothing of what
// the cluster holds), never cached.
func (h *WakeHandler) notServed(w http.ResponseWriter, r *http.Request) error {
	const msg = "There is no service at this address."
	hd := w.Header()
	hd.Set("Cache-Control", "no-store")
	var body []byte
	if strings.Contains(r.Header.Get("Accept"), "json") {
		hd.Set("Content-Type", "application/json")
		body, _ = json.Marshal(map[string]string{"error": msg})
	} else {
		hd.Set("Content-Type", "text/plain; charset=utf-8")
		body = []byte(msg + "\n")
	}
	hd.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusNotFound)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
	return nil
}

// validateTag checks tag: PVE's tag format, and only with a placeholder
// reference (a literal reference names its guest itself).
func (h *WakeHandler) validateTag() error {
	if h.Tag == "" {
		return nil
	}
	if _, ref, _ := strings.Cut(h.Guest, "/"); !hasPlaceholder(ref) {
		return fmt.Errorf("proxmox_wake %s: tag applies to references with placeholders ({labels.2}) only", h.Guest)
	}
	if err := lxc.ValidateTag(h.Tag); err != nil {
		return fmt.Errorf("proxmox_wake %s: %w", h.Guest, err)
	}
	return nil
}
