package api

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// guestRows keeps the wire rows of every VM encoded, so that lists and
// status/current answer by copying bytes. A row is rebuilt only when
// something it shows changed: its VM or instance (their resourceVersions),
// its node or vmid, its pool, or its usage reading. The uptime moves with
// the clock and is written into the bytes per answer. Rows are the same
// for every caller; what each caller may see is decided per answer
// (visibleRows), never stored.
type guestRows struct {
	poolOf func(c *kube.Cluster, g kube.Guest) string

	mu    sync.Mutex // serialises rebuilds of the list
	list  atomic.Pointer[rowList]
	byKey sync.Map // the VM's namespace/name (Guest.Key) -> *guestRow
	// built counts rows built outside a list rebuild; many of them prune
	// rows of VMs that are gone.
	built atomic.Int64
}

// rowList is every VM's row in vmid order, as of the versions it was built
// at.
type rowList struct {
	c               *kube.Cluster
	guests, metrics uint64
	rows            []*guestRow
}

// rowInputs is everything a row shows that can change.
type rowInputs struct {
	objects  rowObjects
	pool     string
	usage    kube.Usage
	hasUsage bool
	// lock is the snapshot or rollback lock held from the call on,
	// before KubeVirt marks the VM.
	lock string
	// noUserMigration: no migration a user asked for is under way (see
	// kube.Cluster.NoUserMigration).
	noUserMigration bool
}

// rowObjects are the objects a row is made of, at their versions: while
// they stay, the row's objectFacts do.
type rowObjects struct {
	vmid          int
	node          string
	vmUID, vmiUID types.UID
	vmRV, vmiRV   string
}

// guestRow is one VM's rows, encoded once each on first use.
type guestRow struct {
	in    rowInputs
	g     kube.Guest
	base  guestFacts // objectFacts
	f     guestFacts // uptime left 0: it is written per answer
	ns    string     // the VM's namespace, kept here for filtering
	acl   string     // the VM's ACL path, /vms/<vmid>
	since time.Time  // running since; zero when uptime is 0

	// resourceNoPool is the resource row for callers who may not see the
	// VM's pool (PVE leaves the pool out for them).
	resource, resourceNoPool, status, current atomic.Pointer[encodedRow]
	// checked is the inputsStamp at which in was last found current.
	checked atomic.Uint64
}

// sameObjects tells whether g is the VM and instance the row was made of,
// at the same versions (a new instance has a new one): checked apart from
// the other inputs, so that a row is never served for an object the
// cache has moved past, even before the change is counted.
func (row *guestRow) sameObjects(g kube.Guest) bool {
	o := row.in.objects
	return o.vmid == g.VMID && o.node == g.Node && o.vmRV == g.ResourceVersion() && o.vmiRV == g.InstanceVersion()
}

// encodedRow is a row's JSON with the uptime value cut out.
type encodedRow struct{ head, tail []byte }

// rowsKey names a row cache among the cluster's memos: handlers that share
// a cluster but differ in what they call the default pool keep their own.
type rowsKey struct{ defaultPool, defaultNamespace string }

// vmRows is the row cache for the handler's cluster and pool settings.
func (h *APIHandler) vmRows(c *kube.Cluster) *guestRows {
	if c == h.cluster && h.rows != nil {
		return h.rows
	}
	k := rowsKey{h.DefaultPool, h.defaultNamespace()}
	return c.Memo(k, func() any { return &guestRows{poolOf: h.guestPool} }).(*guestRows)
}

func (r *guestRows) inputs(c *kube.Cluster, g kube.Guest) rowInputs {
	in := rowInputs{objects: rowObjects{vmid: g.VMID, node: g.Node, vmUID: g.UID(), vmRV: g.ResourceVersion()}, pool: r.poolOf(c, g)}
	if m := g.InstanceMeta(); m != nil {
		in.objects.vmiUID, in.objects.vmiRV = m.UID, m.ResourceVersion
	}
	in.usage, in.hasUsage = usageOfGuest(c, g)
	in.lock = snapshotLock(c, g)
	in.noUserMigration = c != nil && c.NoUserMigration(g)
	return in
}

// inputsStamp changes whenever any row's inputs may have: a VM, an
// instance, a node, a pool, a snapshot, a migration (GuestsVersion) or a
// usage reading (MetricsVersion). Both only grow, so their sum changes
// with either.
func inputsStamp(c *kube.Cluster) uint64 {
	if c == nil {
		return 0
	}
	return c.GuestsVersion() + c.MetricsVersion()
}

// row returns g's row, built anew only when its inputs changed. A row
// checked since the last change anywhere is returned as it is, so that
// status/current, the hottest call, pays for the pool, usage and lock
// lookups only after a change.
func (r *guestRows) row(c *kube.Cluster, g kube.Guest) *guestRow {
	// The stamp is read before the inputs: a change while they are read
	// leaves the row's stamp behind it, and the next call checks again.
	stamp := inputsStamp(c)
	key := g.Key()
	v, _ := r.byKey.Load(key)
	prev, _ := v.(*guestRow)
	if prev != nil && c != nil && prev.checked.Load() == stamp && prev.sameObjects(g) {
		return prev
	}
	in := r.inputs(c, g)
	if prev != nil && prev.in == in {
		prev.checked.Store(stamp)
		return prev
	}
	row := buildRow(g, in, prev)
	row.checked.Store(stamp)
	r.byKey.Store(key, row)
	if r.built.Add(1)%4096 == 0 {
		r.prune(c)
	}
	return row
}

// buildRow makes g's row; of prev, its row before (nil for none), it
// keeps what the VM and instance give while their versions stay.
func buildRow(g kube.Guest, in rowInputs, prev *guestRow) *guestRow {
	// The row outlives the request: it keeps g without the objects
	// decoded for it (what it shows is in f, encoded from f).
	row := &guestRow{in: in, g: g.Packed(), ns: g.Namespace(), acl: "/vms/" + strconv.Itoa(g.VMID)}
	if prev != nil && prev.in.objects == in.objects {
		row.base, row.since = prev.base, prev.since
	} else {
		row.base = objectFacts(g)
		if row.base.state.Running() {
			row.since = g.InstanceSummary().Since
		}
	}
	row.f = row.base.withReading(in.usage, in.hasUsage, in.lock)
	row.f.dropMigrateLock(in.noUserMigration)
	return row
}

// rows returns the rows of every served VM in vmid order, as current as
// c's caches: rebuilt when a VM, an instance, a node or a usage reading
// changed since the last call (including this process's own writes), and
// even then re-encoding only the rows whose inputs changed.
func (r *guestRows) rows(c *kube.Cluster) []*guestRow {
	gv, mv := c.GuestsVersion(), c.MetricsVersion()
	if l := r.list.Load(); l != nil && l.c == c && l.guests == gv && l.metrics == mv {
		return l.rows
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// The versions are read before the guests: a change while building
	// leaves the list behind them, and the next call builds again.
	gv, mv = c.GuestsVersion(), c.MetricsVersion()
	if l := r.list.Load(); l != nil && l.c == c && l.guests == gv && l.metrics == mv {
		return l.rows
	}
	guests := c.Guests()
	l := &rowList{c: c, guests: gv, metrics: mv, rows: make([]*guestRow, len(guests))}
	seen := make(map[string]bool, len(guests))
	for i, g := range guests {
		key := g.Key()
		seen[key] = true
		in := r.inputs(c, g)
		v, _ := r.byKey.Load(key)
		prev, _ := v.(*guestRow)
		if prev != nil && prev.in == in {
			l.rows[i] = prev
			continue
		}
		l.rows[i] = buildRow(g, in, prev)
		r.byKey.Store(key, l.rows[i])
	}
	r.byKey.Range(func(k, _ any) bool {
		if !seen[k.(string)] {
			r.byKey.Delete(k)
		}
		return true
	})
	r.list.Store(l)
	return l.rows
}

// prune drops the rows of VMs no longer cached.
func (r *guestRows) prune(c *kube.Cluster) {
	r.byKey.Range(func(k, v any) bool {
		g := v.(*guestRow).g
		if g2, err := c.Guest(g.VMID); err != nil || g2.UID() != g.UID() {
			r.byKey.Delete(k)
		}
		return true
	})
}

// encode marshals a row whose uptime is 0 and cuts the value out. A JSON
// string cannot hold the bytes "uptime":0 (its quotes are escaped), so the
// first match is the key.
func encode(v any) *encodedRow {
	buf, err := json.Marshal(v)
	if err != nil {
		panic("encoding a VM row: " + err.Error()) // rows are plain structs
	}
	const key = `"uptime":`
	i := bytes.Index(buf, []byte(key+"0"))
	return &encodedRow{head: buf[:i+len(key)], tail: buf[i+len(key)+1:]}
}

func (row *guestRow) encoded(slot *atomic.Pointer[encodedRow], build func() any) *encodedRow {
	if e := slot.Load(); e != nil {
		return e
	}
	e := encode(build())
	slot.Store(e)
	return e
}

// appendResource appends the /cluster/resources row.
func (row *guestRow) appendResource(b []byte, now time.Time, showPool bool) []byte {
	if !showPool && row.in.pool != "" {
		e := row.encoded(&row.resourceNoPool, func() any { return vmResource(row.g, row.f, "") })
		return row.appendAt(b, e, now)
	}
	e := row.encoded(&row.resource, func() any { return vmResource(row.g, row.f, row.in.pool) })
	return row.appendAt(b, e, now)
}

// appendStatus appends the /nodes/{n}/qemu row.
func (row *guestRow) appendStatus(b []byte, now time.Time) []byte {
	e := row.encoded(&row.status, func() any { return vmStatus(row.g, row.f) })
	return row.appendAt(b, e, now)
}

// appendCurrent appends the status/current answer (and full=1 rows).
func (row *guestRow) appendCurrent(b []byte, now time.Time) []byte {
	e := row.encoded(&row.current, func() any { return vmCurrent(row.g, row.f) })
	return row.appendAt(b, e, now)
}

func (row *guestRow) appendAt(b []byte, e *encodedRow, now time.Time) []byte {
	b = append(b, e.head...)
	var up int64
	if !row.since.IsZero() {
		up = translate.UptimeSince(row.since, now)
	}
	b = strconv.AppendInt(b, up, 10)
	return append(b, e.tail...)
}

// rowSizeHint is about the length of one encoded VM row.
const rowSizeHint = 320

// encodedBody is a whole answer, {"data":...}, assembled from encoded
// rows; writeData sends it as it is. Its buffer is reused by later answers
// once sent.
type encodedBody struct{ b []byte }

var bodyPool = sync.Pool{New: func() any { return &encodedBody{} }}

// newBody starts an answer; sizeHint is the expected length.
func newBody(sizeHint int) *encodedBody {
	e := bodyPool.Get().(*encodedBody)
	if cap(e.b) < sizeHint {
		e.b = make([]byte, 0, sizeHint)
	}
	e.b = append(e.b[:0], `{"data":`...)
	return e
}

// bytes ends the answer and returns it.
func (e *encodedBody) bytes() []byte { return append(e.b, '}') }

// release returns the buffer for reuse; e must not be used after. Very
// large buffers are left to the garbage collector when they would
// otherwise pin much more than the next answers need.
func (e *encodedBody) release() {
	if cap(e.b) > 64<<20 {
		return
	}
	bodyPool.Put(e)
}

// appendJSON appends v marshalled, for the few rows that are not cached
// (nodes, storages).
func (e *encodedBody) appendJSON(v any) {
	buf, err := json.Marshal(v)
	if err != nil {
		panic("encoding a row: " + err.Error()) // rows are plain values
	}
	e.b = append(e.b, buf...)
}

// visibleRows keeps the rows the caller may audit, as visibleGuests does.
func (h *APIHandler) visibleRows(q *request, rows []*guestRow) []*guestRow {
	if h.auth.noAuth || h.perms.allAdmin {
		return rows
	}
	sees := h.rowSees(q)
	out := make([]*guestRow, 0, len(rows))
	for _, row := range rows {
		if sees(row) {
			out = append(out, row)
		}
	}
	return out
}

// rowSees decides VM.Audit on rows for one request, as sees would, once
// per what the answer can depend on rather than once per VM (a list of
// 10,000 VMs spent more on these checks than on its rows): under
// impersonation the namespace; under the configured grants the pool,
// since only a grant naming one VM tells VMs of a pool apart, and those
// are a map of their paths.
func (h *APIHandler) rowSees(q *request) func(*guestRow) bool {
	const priv = "VM.Audit"
	memo := map[string]bool{}
	if h.perms.impersonate {
		return func(r *guestRow) bool {
			ok, known := memo[r.ns]
			if !known {
				ok = h.sees(q, r.acl, r.ns, r.in.pool, priv)
				memo[r.ns] = ok
			}
			return ok
		}
	}
	var shared []GrantConfig
	single := map[string]bool{} // VMs' ACL paths granted priv
	for _, g := range h.perms.grants(q.id) {
		if strings.HasPrefix(g.Path, "/vms/") {
			single[g.Path] = single[g.Path] || roleHas[g.Role][priv]
			continue
		}
		shared = append(shared, g)
	}
	return func(r *guestRow) bool {
		if single[r.acl] {
			return true
		}
		ok, known := memo[r.in.pool]
		if !known {
			ok = granted(shared, r.acl, r.in.pool, priv)
			memo[r.in.pool] = ok
		}
		return ok
	}
}
