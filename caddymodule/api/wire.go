package api

import (
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// vmStatusRow is qemu-server's vmstatus(): the rows of /nodes/{n}/qemu and
// the base of status/current. Optional keys are omitted, never null:
// go-proxmox reads any "template" value as true, and Telmate treats a
// present "lock" as locked.
type vmStatusRow struct {
	VMID      int     `json:"vmid"`
	Name      string  `json:"name"`
	Status    string  `json:"status"`
	CPUs      int     `json:"cpus"`
	MaxMem    int64   `json:"maxmem"`
	MaxDisk   int64   `json:"maxdisk"`
	Disk      int64   `json:"disk"`
	Uptime    int64   `json:"uptime"`
	CPU       float64 `json:"cpu"`
	Mem       int64   `json:"mem"`
	NetIn     int64   `json:"netin"`
	NetOut    int64   `json:"netout"`
	DiskRead  int64   `json:"diskread"`
	DiskWrite int64   `json:"diskwrite"`
	PID       int     `json:"pid,omitempty"`
	Template  int     `json:"template,omitempty"`
	Lock      string  `json:"lock,omitempty"`
	Tags      string  `json:"tags,omitempty"`
	QMPStatus string  `json:"qmpstatus,omitempty"`
}

// vmCurrentRow is status/current: vmstatus plus the full-status keys.
type vmCurrentRow struct {
	vmStatusRow
	HA             map[string]any `json:"ha"`
	Agent          int            `json:"agent,omitempty"`
	RunningMachine string         `json:"running-machine,omitempty"`
	RunningQEMU    string         `json:"running-qemu,omitempty"`
	Balloon        int64          `json:"balloon,omitempty"`
	FreeMem        int64          `json:"freemem,omitempty"`
}

// resourceRow is a /cluster/resources row of type qemu or node. Numbers
// are numbers and template is always present (Telmate casts to float64).
type resourceRow struct {
	ID        string  `json:"id"`
	Type      string  `json:"type"`
	Node      string  `json:"node"`
	Status    string  `json:"status"`
	Name      string  `json:"name,omitempty"`
	VMID      int     `json:"vmid,omitempty"`
	Uptime    int64   `json:"uptime"`
	CPU       float64 `json:"cpu"`
	MaxCPU    int     `json:"maxcpu"`
	Mem       int64   `json:"mem"`
	MaxMem    int64   `json:"maxmem"`
	Disk      int64   `json:"disk"`
	MaxDisk   int64   `json:"maxdisk"`
	NetIn     *int64  `json:"netin,omitempty"`
	NetOut    *int64  `json:"netout,omitempty"`
	DiskRead  *int64  `json:"diskread,omitempty"`
	DiskWrite *int64  `json:"diskwrite,omitempty"`
	Template  *int    `json:"template,omitempty"`
	Pool      string  `json:"pool,omitempty"`
	Lock      string  `json:"lock,omitempty"`
	Tags      string  `json:"tags,omitempty"`
	Level     *string `json:"level,omitempty"`
	HAState   string  `json:"hastate,omitempty"`
}

// guestFacts are the values every VM row is built from.
type guestFacts struct {
	state   translate.GuestState
	tags    string // the stored config's tags
	agent   bool   // the stored config enables the guest agent
	cpus    int
	maxmem  int64
	maxdisk int64
	uptime  int64
	pid     int
	tmpl    int
	cpu     float64 // used cores / cpus, as PVE's 0..1 fraction
	mem     int64   // bytes in use
	// cumulative bytes since the instance started
	netin, netout, diskread, diskwrite int64
	// runningMachine is the running instance's machine type (read from
	// its spec here, so that encoding a row never decodes one).
	runningMachine string
}

// factsOf computes a VM row's values; c supplies usage metrics (nil: none).
func factsOf(c *kube.Cluster, g kube.Guest, now time.Time) guestFacts {
	u, ok := usageOfGuest(c, g)
	f := factsWith(g, u, ok, snapshotLock(c, g), now)
	f.dropMigrateLock(c != nil && c.NoUserMigration(g))
	return f
}

// dropMigrateLock lifts the migrate lock KubeVirt's printable status
// Migrating gives when no user's migration is under way: the migration
// is KubeVirt's own (a CPU or memory hot-plug, a new virt-launcher), or
// over while the VM's status has not caught up.
func (f *guestFacts) dropMigrateLock(noUserMigration bool) {
	if noUserMigration && f.state.Lock == translate.LockMigrate {
		f.state.Lock = ""
	}
}

// snapshotLock is the snapshot or rollback lock c holds on g ("" for none,
// or without a cluster).
func snapshotLock(c *kube.Cluster, g kube.Guest) string {
	if c == nil {
		return ""
	}
	return c.SnapshotLock(g)
}

// factsWith is factsOf with the usage reading (ok: there is one) and the
// snapshot lock given.
func factsWith(g kube.Guest, u kube.Usage, ok bool, lock string, now time.Time) guestFacts {
	f := objectFacts(g)
	if since := g.InstanceSummary().Since; f.state.Running() && !since.IsZero() {
		f.uptime = translate.UptimeSince(since, now)
	}
	return f.withReading(u, ok, lock)
}

// objectFacts are the facts only the VM and its instance give: all but
// the uptime, the usage reading and the snapshot lock. They decode
// nothing (the cache summarized both objects when it stored them); a row
// keeps them while the objects' versions stay (guestRows).
func objectFacts(g kube.Guest) guestFacts {
	s := g.Summary()
	f := guestFacts{state: g.State(), tags: s.Tags, agent: s.Agent, cpus: s.CPUs, maxmem: s.MaxMem, maxdisk: s.MaxDisk}
	// A lock recorded at create or clone holds while the volumes are
	// provisioned, then lifts by itself.
	if s.Lock != "" {
		f.state.Lock = s.Lock
	}
	if f.state.Running() {
		if meta := g.InstanceMeta(); meta != nil {
			f.pid = translate.PID(meta)
			f.runningMachine = g.InstanceSummary().Machine
		}
	}
	if g.Template() {
		f.tmpl = 1
	}
	return f
}

// withReading is f with the snapshot lock (a snapshot or rollback locks
// the VM from the moment it is asked for, unless it holds another lock)
// and, while it runs, the usage reading u (ok: there is one).
func (f guestFacts) withReading(u kube.Usage, ok bool, lock string) guestFacts {
	if f.state.Lock == "" {
		f.state.Lock = lock
	}
	if !f.state.Running() || !ok {
		return f
	}
	has := u.Fields()
	if has&kube.HasCPU != 0 {
		f.cpu = fraction(u.CPUCores, float64(f.cpus))
	}
	if has&kube.HasMem != 0 {
		f.mem = u.MemBytes
	}
	f.netin, f.netout, f.diskread, f.diskwrite = u.NetIn, u.NetOut, u.DiskRead, u.DiskWrite
	return f
}

func vmStatus(g kube.Guest, f guestFacts) vmStatusRow {
	return vmStatusRow{
		VMID: g.VMID, Name: g.PVEName(), Status: f.state.Status, CPUs: f.cpus,
		MaxMem: f.maxmem, MaxDisk: f.maxdisk, Uptime: f.uptime, PID: f.pid,
		CPU: f.cpu, Mem: f.mem, Template: f.tmpl, Lock: f.state.Lock, Tags: f.tags,
		NetIn: f.netin, NetOut: f.netout, DiskRead: f.diskread, DiskWrite: f.diskwrite,
	}
}

func vmCurrent(g kube.Guest, f guestFacts) vmCurrentRow {
	row := vmCurrentRow{vmStatusRow: vmStatus(g, f), HA: haStatus(g)}
	row.QMPStatus = f.state.QMPStatus
	if f.agent {
		row.Agent = 1
	}
	if f.state.Running() {
		row.RunningMachine = f.runningMachine
		row.RunningQEMU = translate.RunningQEMU
	}
	return row
}

// vmResource is a VM's /cluster/resources row; pool is "" for a VM in no
// pool (see APIHandler.poolOf).
func vmResource(g kube.Guest, f guestFacts, pool string) resourceRow {
	tmpl := f.tmpl
	return resourceRow{
		ID: "qemu/" + strconv.Itoa(g.VMID), Type: "qemu", Node: g.Node, Status: f.state.Status,
		Name: g.PVEName(), VMID: g.VMID, Uptime: f.uptime, CPU: f.cpu, MaxCPU: f.cpus, Mem: f.mem, MaxMem: f.maxmem,
		MaxDisk: f.maxdisk, NetIn: &f.netin, NetOut: &f.netout, DiskRead: &f.diskread, DiskWrite: &f.diskwrite,
		Template: &tmpl, Pool: pool, Lock: f.state.Lock, Tags: f.tags, HAState: haState(g),
	}
}

// nodeRow is a /nodes row; /cluster/resources uses the same values.
type nodeRow struct {
	ID      string  `json:"id"`
	Node    string  `json:"node"`
	Type    string  `json:"type"`
	Status  string  `json:"status"`
	Uptime  int64   `json:"uptime"`
	CPU     float64 `json:"cpu"`
	MaxCPU  int64   `json:"maxcpu"`
	Mem     int64   `json:"mem"`
	MaxMem  int64   `json:"maxmem"`
	Disk    int64   `json:"disk"`
	MaxDisk int64   `json:"maxdisk"`
	Level   string  `json:"level"`

	// Not in the row; /nodes/{n}/status shows them.
	load                [3]float64
	hasLoad             bool
	swapUsed, swapTotal int64
	wait, idle          float64
}

// nodeFacts computes a node row; c supplies usage metrics (nil: none).
func nodeFacts(c *kube.Cluster, n kube.Node, now time.Time) nodeRow {
	row := nodeRow{ID: "node/" + n.Name, Node: n.Name, Type: "node", Status: translate.NodeStatus(n.Ready)}
	if n.Obj == nil {
		return row
	}
	capacity := n.Obj.Status.Capacity
	row.MaxCPU = quantity(capacity, corev1.ResourceCPU)
	row.MaxMem = quantity(capacity, corev1.ResourceMemory)
	row.MaxDisk = quantity(capacity, corev1.ResourceEphemeralStorage)
	if n.Ready {
		for _, c := range n.Obj.Status.Conditions {
			if c.Type == corev1.NodeReady && !c.LastTransitionTime.IsZero() {
				row.Uptime = int64(now.Sub(c.LastTransitionTime.Time) / time.Second)
			}
		}
	}
	if u, ok := usageOfNode(c, n); ok {
		has := u.Fields()
		if has&kube.HasCPU != 0 {
			row.CPU = fraction(u.CPUCores, float64(row.MaxCPU))
		}
		if has&kube.HasMem != 0 {
			row.Mem = u.MemBytes
		}
		// node_exporter's numbers are the host's, as PVE's are.
		if has&kube.HasBootTime != 0 && u.BootTime > 0 && n.Ready {
			row.Uptime = max(now.Unix()-u.BootTime, 0)
		}
		if has&kube.HasRootTotal != 0 && has&kube.HasRootUsed != 0 {
			row.Disk, row.MaxDisk = u.RootUsed, u.RootTotal
		}
		row.load, row.hasLoad = u.Load, has&kube.HasLoad1 != 0
		if has&kube.HasSwapTotal != 0 && has&kube.HasSwapUsed != 0 {
			row.swapUsed, row.swapTotal = u.SwapUsed, u.SwapTotal
		}
		if has&kube.HasIOWait != 0 {
			row.wait = u.IOWait
		}
		if has&kube.HasIdle != 0 {
			row.idle = u.Idle
		}
	}
	return row
}

// fraction is used/total clamped to 0..1, 0 when total is unknown.
func fraction(used, total float64) float64 {
	if total <= 0 || used <= 0 {
		return 0
	}
	return min(used/total, 1)
}

func quantity(l corev1.ResourceList, name corev1.ResourceName) int64 {
	q, ok := l[name]
	if !ok {
		return 0
	}
	return q.Value()
}

func nodeResource(n nodeRow) resourceRow {
	level := n.Level
	return resourceRow{
		ID: n.ID, Type: "node", Node: n.Node, Status: n.Status, Uptime: n.Uptime, CPU: n.CPU,
		MaxCPU: int(n.MaxCPU), Mem: n.Mem, MaxMem: n.MaxMem, Disk: n.Disk, MaxDisk: n.MaxDisk, Level: &level,
	}
}

func usageOfGuest(c *kube.Cluster, g kube.Guest) (kube.Usage, bool) {
	if c == nil || g.InstanceMeta() == nil {
		return kube.Usage{}, false
	}
	return c.GuestMetrics(g.InstanceMeta().Namespace, g.InstanceMeta().Name)
}

func usageOfNode(c *kube.Cluster, n kube.Node) (kube.Usage, bool) {
	if c == nil || n.Obj == nil {
		return kube.Usage{}, false
	}
	return c.NodeMetrics(n.Obj.Name)
}
