package api

import (
	"cmp"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// migrateParams are the parameters of POST …/migrate (qemu-server's
// migrate_vm); with-conntrack-state is PVE 9's.
var migrateParams = []string{"node", "vmid", "target", "online", "force", "migration_type", "migration_network",
	"with-local-disks", "targetstorage", "bwlimit", "with-conntrack-state"}

// migrateRequest is a parsed POST …/migrate.
type migrateRequest struct {
	target     kube.Node
	online     bool
	withLocal  bool
	storageMap *translate.StorageMap
	notes      []string // log lines about options KubeVirt decides itself
}

// parseMigrate checks the parameters in qemu-server's order: the schema,
// the target (not the local node, a cluster node), then the options only
// root@pam may use.
func (h *APIHandler) parseMigrate(q *request) (migrateRequest, *apiError) {
	var r migrateRequest
	if e := q.p.allowOnly(migrateParams...); e != nil {
		return r, e
	}
	target, ok, e := q.p.str("target")
	if e != nil {
		return r, e
	}
	if !ok {
		return r, paramErr("target", "property is missing and it is not optional")
	}
	if !translate.ValidNodeName(target) {
		return r, paramErr("target", "invalid format - value does not look like a valid node name")
	}
	var force, conntrack bool
	for _, b := range []struct {
		name string
		to   *bool
	}{{"online", &r.online}, {"force", &force}, {"with-local-disks", &r.withLocal}, {"with-conntrack-state", &conntrack}} {
		if *b.to, e = q.p.boolean(b.name, false); e != nil {
			return r, e
		}
	}
	bw, e := q.p.integer("bwlimit", -1, 0, 1<<53)
	if e != nil {
		return r, e
	}
	mtype, _, e := q.p.str("migration_type")
	if e != nil {
		return r, e
	}
	if mtype != "" && mtype != "secure" && mtype != "insecure" {
		return r, paramErr("migration_type", "value '%s' does not have a value in the enumeration 'secure, insecure'", mtype)
	}
	mnet, _, e := q.p.str("migration_network")
	if e != nil {
		return r, e
	}
	if mnet != "" {
		if _, _, err := net.ParseCIDR(mnet); err != nil {
			return r, paramErr("migration_network", "invalid format - value does not look like a valid CIDR network")
		}
	}
	if ts, ok, e := q.p.str("targetstorage"); e != nil {
		return r, e
	} else if ok && ts != "" {
		m, err := translate.ParseStorageMap(ts)
		if err != nil {
			return r, paramErr("targetstorage", "failed to parse storage map: %v", err)
		}
		r.storageMap = &m
	}

	src, e := h.node(q)
	if e != nil {
		return r, e
	}
	if target == src.Name {
		return r, paramErr("target", "target is local node.")
	}
	if r.target, e = h.nodeNamed(target); e != nil {
		return r, e
	}
	// As in PVE, a token of root@pam is not root@pam.
	if root := q.id.ID() == "root@pam"; !root {
		for _, o := range []struct {
			name string
			set  bool
		}{{"force", force}, {"migration_type", mtype != ""}, {"migration_network", mnet != ""}} {
			if o.set {
				return r, paramErr(o.name, "Only root may use this option.")
			}
		}
	}
	if bw >= 0 {
		r.notes = append(r.notes, fmt.Sprintf("bwlimit %d KiB/s ignored: KubeVirt's migration configuration sets the bandwidth", bw))
	}
	if mtype != "" || mnet != "" {
		r.notes = append(r.notes, "migration_type and migration_network ignored: KubeVirt's migration configuration sets the network and transport")
	}
	if conntrack {
		r.notes = append(r.notes, "with-conntrack-state ignored: KubeVirt keeps the pod network's connection state by itself")
	}
	return r, nil
}

// vmLocked is PVE's check_lock refusal; a migration KubeVirt has not
// finished holds the migrate lock from the moment it was asked for.
func vmLocked(c *kube.Cluster, g kube.Guest) *apiError {
	f := factsOf(nil, g, time.Now())
	f.dropMigrateLock(c.NoUserMigration(g))
	l := f.state.Lock
	if l == "" && c.Migrating(g) {
		l = translate.LockMigrate
	}
	if l != "" {
		return newError(http.StatusInternalServerError, "VM is locked (%s)", l)
	}
	if c.MigratingItself(g) {
		// No lock of the user's, but KubeVirt runs one migration of an
		// instance at a time.
		return newError(http.StatusInternalServerError, "VM %d is being live-migrated by KubeVirt to apply a CPU or memory change; try again once it has finished", g.VMID)
	}
	return nil
}

// postQemuMigrate moves a VM to another node. A stopped VM's PVE node (the
// home-node annotation, and its hostname pins) moves at once; a running
// VM is live-migrated by KubeVirt (online=1, as PVE requires), and its
// node follows once the instance runs on the target. The qmigrate task
// ends when the VM is there, or with KubeVirt's reason.
func (h *APIHandler) postQemuMigrate(q *request) (any, *apiError) {
	r, e := h.parseMigrate(q)
	if e != nil {
		return nil, e
	}
	g, e := h.guest(q)
	if e != nil {
		return nil, e
	}
	if e := vmLocked(q.c, g); e != nil {
		return nil, e
	}
	live := g.State().Running()
	if live && !r.online {
		return nil, newError(http.StatusInternalServerError, "can't migrate running VM without --online")
	}
	if e := h.checkTargetStorage(q, g, r); e != nil {
		return nil, e
	}
	target := r.target
	lines := append([]string{fmt.Sprintf("starting migration of VM %d to node '%s' (%s)", g.VMID, target.Name, nodeIP(target))}, r.notes...)
	c := q.c
	if target.Obj != nil && !c.NodeAllows(g, target, !live) {
		hint := ""
		if live {
			hint = " (a running instance keeps its pins: migrate it stopped)"
		}
		return nil, newError(http.StatusInternalServerError, "can't migrate VM %d to node '%s': its node selector or node affinity does not allow that node%s", g.VMID, target.Name, hint)
	}
	spec := h.taskSpec(q, g, translate.TaskMigrate, kube.GoalHomeNode, 5*time.Minute, lines[0])
	spec.Log, spec.Target = lines, target.Name

	srcKube := ""
	if g.InstanceMeta() != nil {
		srcKube = g.InstanceMeta().Status.NodeName
	}
	if live && srcKube != target.KubeName {
		var refusals []string
		for _, d := range h.localDisks(g) {
			// Disks on node-local storage are what PVE asks about; CD-ROMs
			// and cloud-init drives are not attached disks there.
			if d.attached && !d.CDROM && !d.CloudInit && !r.withLocal {
				refusals = append(refusals, fmt.Sprintf("can't migrate local disk '%s': can't live migrate attached local disks without with-local-disks option", d.VolID))
			}
		}
		if len(refusals) == 0 {
			// with-local-disks or not, KubeVirt moves no claim's data: it
			// live-migrates only guests whose claims all are ReadWriteMany.
			refusals = unsharedClaimRefusals(g, c.UnsharedClaims(g))
		}
		if len(refusals) > 0 {
			spec.Log = append(spec.Log, refusals...)
			spec.Log = append(spec.Log, "ERROR: migration aborted (duration 00:00:00): can't migrate VM - check log")
			spec.Err = fmt.Errorf("migration aborted: can't migrate VM - check log")
			return h.beginSpec(q, spec)
		}
		if reason, msg, ok := notLiveMigratable(g); !ok {
			return nil, newError(http.StatusInternalServerError, "can't live-migrate VM %d: KubeVirt says %s: %s", g.VMID, reason, msg)
		}
		m, err := c.CreateMigration(q.ctx(), g, target)
		if err != nil {
			return nil, kubeError(err)
		}
		spec.Goal, spec.Object, spec.Timeout = kube.GoalMigrated, m.Name, time.Hour
		spec.Log = append(spec.Log, fmt.Sprintf("live migration %s/%s of the running instance from node '%s' to '%s'",
			m.Namespace, m.Name, srcKube, target.KubeName))
		return h.beginSpec(q, spec)
	}
	// Stopped, or already running there: the VM's node is a record, and it
	// moves now.
	if live {
		spec.Log = append(spec.Log, fmt.Sprintf("the instance already runs on node '%s'", target.KubeName))
	}
	if err := c.SetHomeNode(q.ctx(), g, target.Name); err != nil {
		return nil, kubeError(err)
	}
	return h.beginSpec(q, spec)
}

// unsharedClaimRefusals words KubeVirt's refusal to live-migrate claims
// that are not ReadWriteMany as PVE's scan of local volumes does: one
// line per volume, named by its PVE volume id, a CD-ROM's as PVE's
// "local cdrom image".
func unsharedClaimRefusals(g kube.Guest, claims []kube.UnsharedClaim) []string {
	volids := map[string]translate.ConfigVolume{}
	for _, v := range translate.ConfigVolumes(translate.StoredConfig(g.VM())) {
		volids[v.DriveName] = v
	}
	var out []string
	for _, u := range claims {
		v, ok := volids[u.Volume]
		volid := v.VolID
		if !ok {
			volid = u.Claim
		}
		why := fmt.Sprintf("claim %s is not shared (%s): KubeVirt live-migrates only guests whose claims are all ReadWriteMany", u.Claim, accessModes(u.Modes))
		if u.Missing {
			why = fmt.Sprintf("claim %s does not exist: KubeVirt cannot tell whether it is shared (ReadWriteMany)", u.Claim)
		}
		if v.CDROM {
			why = "local cdrom image - " + why
		}
		out = append(out, fmt.Sprintf("can't migrate local disk '%s': %s", volid, why))
	}
	return out
}

// accessModes lists a claim's access modes as kubectl shows them.
func accessModes(modes []corev1.PersistentVolumeAccessMode) string {
	short := map[corev1.PersistentVolumeAccessMode]string{corev1.ReadWriteOnce: "RWO", corev1.ReadOnlyMany: "ROX",
		corev1.ReadWriteMany: "RWX", corev1.ReadWriteOncePod: "RWOP"}
	var out []string
	for _, m := range modes {
		out = append(out, cmp.Or(short[m], string(m)))
	}
	if len(out) == 0 {
		return "no access mode"
	}
	return strings.Join(out, ",")
}

// notLiveMigratable reads the instance's LiveMigratable condition, which
// KubeVirt's admission checks before it accepts a migration.
func notLiveMigratable(g kube.Guest) (reason, msg string, ok bool) {
	if g.InstanceMeta() == nil {
		return "", "", true
	}
	for _, cond := range g.InstanceMeta().Status.Conditions {
		if cond.Type == kubevirtv1.VirtualMachineInstanceIsMigratable && cond.Status == corev1.ConditionFalse {
			return cond.Reason, cond.Message, false
		}
	}
	return "", "", true
}

// checkTargetStorage accepts a targetstorage that leaves every volume where
// it is: KubeVirt migrates a VM with its volumes in place. Mapping to
// another storage is refused, as is a storage that does not exist.
func (h *APIHandler) checkTargetStorage(q *request, g kube.Guest, r migrateRequest) *apiError {
	m := r.storageMap
	if m == nil || m.Identity {
		return nil
	}
	targets := []string{}
	if m.Default != "" {
		targets = append(targets, m.Default)
	}
	for _, t := range m.Entries {
		targets = append(targets, t)
	}
	sort.Strings(targets)
	for _, t := range targets {
		if !q.c.StorageClassExists(t) {
			return newError(http.StatusInternalServerError, "storage '%s' does not exist", t)
		}
	}
	for _, v := range translate.ConfigVolumes(translate.StoredConfig(g.VM())) {
		if v.Storage == "" || v.CDROM {
			continue
		}
		if to := m.Target(v.Storage); to != v.Storage {
			return newError(http.StatusInternalServerError,
				"can't migrate '%s' to storage '%s': KubeVirt migrates a VM with its volumes in place (use targetstorage=1, or move_disk first)", v.VolID, to)
		}
	}
	return nil
}

// localDisk is a volume on a storage that is not shared (the /storage
// rows' shared flag), as migrate's precondition lists it.
type localDisk struct {
	translate.ConfigVolume
	attached bool
}

func (h *APIHandler) localDisks(g kube.Guest) []localDisk {
	shared := map[string]bool{}
	for _, sc := range h.cluster.StorageClasses() {
		_, s := storageType(sc)
		shared[sc.Name] = s == 1
	}
	var out []localDisk
	for _, v := range translate.ConfigVolumes(translate.StoredConfig(g.VM())) {
		if v.Storage != "" && shared[v.Storage] {
			continue
		}
		out = append(out, localDisk{ConfigVolume: v, attached: !v.Unused})
	}
	return out
}

// getQemuMigrate answers qemu-server's migrate_vm_precondition: whether the
// VM runs, the nodes it may go to (the others, unless its node selector or
// required affinity rules them out, reported as PVE reports a blocking
// node-affinity rule), its disks on local storage and the host devices
// that tie it to a node.
func (h *APIHandler) getQemuMigrate(q *request) (any, *apiError) {
	if e := q.p.allowOnly("node", "vmid", "target"); e != nil {
		return nil, e
	}
	if t, ok := q.p["target"]; ok && !translate.ValidNodeName(t) {
		return nil, paramErr("target", "invalid format - value does not look like a valid node name")
	}
	g, e := h.guest(q)
	if e != nil {
		return nil, e
	}
	if e := vmLocked(q.c, g); e != nil {
		return nil, e
	}
	live := g.State().Running()
	allowed := []string{}
	notAllowed := map[string]any{}
	for _, n := range h.nodes() {
		if n.Name == g.Node {
			continue
		}
		if n.Obj != nil && !q.c.NodeAllows(g, n, !live) {
			notAllowed[n.Name] = map[string]any{"blocking-ha-resources": []map[string]string{
				{"sid": "vm:" + strconv.Itoa(g.VMID), "cause": "node-affinity"}}}
			continue
		}
		allowed = append(allowed, n.Name)
	}
	disks := []map[string]any{}
	for _, d := range h.localDisks(g) {
		row := map[string]any{
			"volid": d.VolID, "cdrom": boolInt(d.CDROM), "is_unused": boolInt(d.Unused), "is_attached": boolInt(d.attached),
			"is_cloudinit": boolInt(d.CloudInit), "is_vmstate": 0, "is_tpmstate": boolInt(d.DriveName == "tpmstate0"),
			"replicate": 1, "shared": 0,
		}
		if d.Size > 0 {
			row["size"] = d.Size
		}
		if !d.Unused {
			row["drivename"] = d.DriveName
		}
		disks = append(disks, row)
	}
	resources := []string{}
	if t := g.VM().Spec.Template; t != nil {
		for _, d := range t.Spec.Domain.Devices.HostDevices {
			resources = append(resources, "hostdev:"+d.Name)
		}
		for _, d := range t.Spec.Domain.Devices.GPUs {
			resources = append(resources, "gpu:"+d.Name)
		}
	}
	return map[string]any{
		"running":              boolInt(live),
		"allowed_nodes":        allowed,
		"not_allowed_nodes":    notAllowed,
		"local_disks":          disks,
		"local_resources":      resources,
		"mapped-resources":     []string{},
		"mapped-resource-info": map[string]any{},
		"has-dbus-vmstate":     0,
	}, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
