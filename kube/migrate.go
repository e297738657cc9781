package kube

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// MigrationPrefix starts the names of the migrations the plugin creates
// (generateName "pve-migrate-<vmid>-").
const MigrationPrefix = "pve-migrate-"

// startMigrationStore watches VirtualMachineInstanceMigrations, which the
// tasks of live migrations wait on. Without the rights to list them (an
// account set up before migrations were served) the plugin still starts:
// those tasks then judge by where the instance runs and cannot tell a
// failure before their deadline.
func (c *Cluster) startMigrationStore(ctx context.Context) *store {
	if !c.opts.AssumeKubeVirtAPIs {
		ns := ""
		if len(c.opts.Namespaces) > 0 {
			ns = c.opts.Namespaces[0]
		}
		probe, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := c.own.kv.KubevirtV1().VirtualMachineInstanceMigrations(ns).List(probe, metav1.ListOptions{Limit: 1})
		cancel()
		if apierrors.IsForbidden(err) || apierrors.IsNotFound(err) {
			c.logger.Warn("cannot list virtualmachineinstancemigrations; migration tasks will only see where the instance runs", zap.Error(err))
			return nil
		}
	}
	mig := c.own.kv.KubevirtV1()
	// A migration a user asked for puts PVE's migrate lock on its VM's
	// rows (NoUserMigration): a change is one to what Guests shows.
	touch := c.Tasks.touchBy(keys(migrationVMI))
	changed := func(old, new any) {
		c.guestGen.Add(1)
		touch(old, new)
	}
	return newStore(ctx, c.listScopes(), &kubevirtv1.VirtualMachineInstanceMigration{}, listWatchFuncs{
		list: func(ctx context.Context, ns string, o metav1.ListOptions) (runtime.Object, error) {
			return mig.VirtualMachineInstanceMigrations(ns).List(ctx, o)
		},
		watch: func(ctx context.Context, ns string, o metav1.ListOptions) (watch.Interface, error) {
			return mig.VirtualMachineInstanceMigrations(ns).Watch(ctx, o)
		},
	}, c.opts.Resync, cache.Indexers{migrationVMIIndex: migrationVMI}, stripMeta, changed)
}

// migrationVMI indexes migrations by the namespace/name of their instance
// (and VM).
func migrationVMI(obj any) ([]string, error) {
	if m, ok := obj.(*kubevirtv1.VirtualMachineInstanceMigration); ok {
		return []string{m.Namespace + "/" + m.Spec.VMIName}, nil
	}
	return nil, nil
}

const migrationVMIIndex = "vmi"

// Migrating tells whether a migration of g's instance has not ended yet
// (PVE's migrate lock, from the moment the migration is asked for).
func (c *Cluster) Migrating(g Guest) bool {
	if c.migrations == nil {
		return false
	}
	for _, o := range c.migrations.byIndex(migrationVMIIndex, g.Namespace()+"/"+g.Name()) {
		if m := o.(*kubevirtv1.VirtualMachineInstanceMigration); !m.IsFinal() && m.DeletionTimestamp == nil && !automatic(m) {
			return true
		}
	}
	return false
}

// NoUserMigration tells whether the plugin knows that no migration of
// g's instance a user asked for is under way (it watches migrations, and
// none that is not KubeVirt's own has ended): then a printable status
// Migrating is KubeVirt's own migration, or one that has just ended.
func (c *Cluster) NoUserMigration(g Guest) bool {
	return c.migrations != nil && !c.Migrating(g)
}

// MigratingItself tells whether KubeVirt is live-migrating g's instance
// on its own (see automatic), which KubeVirt lets no other migration
// overlap.
func (c *Cluster) MigratingItself(g Guest) bool {
	if g.InstanceMeta() != nil && translate.AutomaticMigration(g.InstanceMeta()) && g.printableStatus() == kubevirtv1.VirtualMachineStatusMigrating {
		return true
	}
	if c.migrations == nil {
		return false
	}
	for _, o := range c.migrations.byIndex(migrationVMIIndex, g.Namespace()+"/"+g.Name()) {
		if m := o.(*kubevirtv1.VirtualMachineInstanceMigration); !m.IsFinal() && m.DeletionTimestamp == nil && automatic(m) {
			return true
		}
	}
	return false
}

// automatic tells whether m is a migration KubeVirt's workload updater
// made (to hot-plug CPUs or memory, or onto a new virt-launcher): no
// user's, so no PVE migrate lock.
func automatic(m *kubevirtv1.VirtualMachineInstanceMigration) bool {
	_, ok := m.Annotations[kubevirtv1.WorkloadUpdateMigrationAnnotation]
	return ok
}

// CreateMigration asks KubeVirt, as the caller, to live-migrate g's
// instance to target: a VirtualMachineInstanceMigration whose
// addedNodeSelector names the target's hostname label.
func (c *Cluster) CreateMigration(ctx context.Context, g Guest, target Node) (*kubevirtv1.VirtualMachineInstanceMigration, error) {
	m := &kubevirtv1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: MigrationPrefix + strconv.Itoa(g.VMID) + "-",
			Namespace:    g.Namespace(),
			Labels:       map[string]string{translate.LabelVMID: strconv.Itoa(g.VMID)},
		},
		Spec: kubevirtv1.VirtualMachineInstanceMigrationSpec{
			VMIName:           g.Name(),
			AddedNodeSelector: map[string]string{translate.LabelHostname: nodeRef(target).Hostname},
		},
	}
	out, err := c.as(ctx).kv.KubevirtV1().VirtualMachineInstanceMigrations(g.Namespace()).Create(ctx, m, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	c.migrations.put(out, true)
	return out, nil
}

// nodeRef is how pins and selectors name n.
func nodeRef(n Node) translate.NodeRef {
	ref := translate.NodeRef{Name: n.KubeName, Hostname: n.KubeName}
	if n.Obj != nil {
		if h := n.Obj.Labels[translate.LabelHostname]; h != "" {
			ref.Hostname = h
		}
	}
	return ref
}

// NodeAllows tells whether g's template lets it run on n: its nodeSelector
// and required node affinity, with pins of g's home node moved to n when
// repin is set (what SetHomeNode would write).
func (c *Cluster) NodeAllows(g Guest, n Node, repin bool) bool {
	if g.VM().Spec.Template == nil {
		return true
	}
	spec := g.VM().Spec.Template.Spec.DeepCopy()
	if repin {
		if from, ok := c.Node(g.Node); ok {
			translate.RepinNode(spec, nodeRef(from), nodeRef(n))
		}
	}
	var labels map[string]string
	if n.Obj != nil {
		labels = n.Obj.Labels
	}
	return translate.NodeAllowed(spec, n.KubeName, labels)
}

// SetHomeNode makes target the VM's PVE node: the home-node annotation,
// and the template's pins of the old home node (nodeSelector, node
// affinity on the hostname) moved to the target, so that a VM pinned to
// its node stays pinned where it went. The patch is guarded by UID and
// resourceVersion and recomputed on a fresh read when KubeVirt changed
// the VM meanwhile.
func (c *Cluster) SetHomeNode(ctx context.Context, g Guest, target string) error {
	to, ok := c.Node(target)
	if !ok && target != DefaultNodeName {
		return fmt.Errorf("no such cluster node '%s'", target)
	}
	for attempt := 0; ; attempt++ {
		ops := []patchOp{
			{Op: "test", Path: "/metadata/uid", Value: string(g.Meta().UID)},
			{Op: "test", Path: "/metadata/resourceVersion", Value: g.Meta().ResourceVersion},
		}
		if g.Meta().Annotations == nil {
			ops = append(ops, patchOp{Op: "add", Path: "/metadata/annotations", Value: map[string]string{}})
		}
		ops = append(ops, patchOp{Op: "add", Path: "/metadata/annotations/" + jsonPointerEscape(translate.AnnotationNode), Value: target})
		if from, found := c.Node(g.Node); found && ok && g.VM().Spec.Template != nil {
			spec := g.VM().Spec.Template.Spec.DeepCopy()
			if translate.RepinNode(spec, nodeRef(from), nodeRef(to)) {
				ops = append(ops, patchOp{Op: "replace", Path: "/spec/template/spec", Value: spec})
			}
		}
		out, err := c.jsonPatchVM(ctx, g, ops)
		if err == nil {
			c.cacheVM(out)
			return nil
		}
		if !(apierrors.IsInvalid(err) || apierrors.IsConflict(err)) || attempt >= 4 {
			return err
		}
		// KubeVirt wrote the VM since it was read: read it again.
		if g, err = c.Refresh(ctx, g); err != nil {
			return err
		}
		g.Node = guestNode(c.nodeTable(), g.Meta())
	}
}

// migrationOf returns the cached migration ns/name, or nil.
func (c *Cluster) migrationOf(ns, name string) *kubevirtv1.VirtualMachineInstanceMigration {
	return cached[kubevirtv1.VirtualMachineInstanceMigration](c.migrations, ns, name)
}

// migrationFailure is why KubeVirt says a migration failed: the failure
// reason of its migration state (or the VMI's, for the same migration),
// else the messages of its conditions.
func migrationFailure(m *kubevirtv1.VirtualMachineInstanceMigration, vmi *kubevirtv1.VirtualMachineInstance) string {
	if s := m.Status.MigrationState; s != nil && s.FailureReason != "" {
		return s.FailureReason
	}
	if vmi != nil {
		if s := vmi.Status.MigrationState; s != nil && s.MigrationUID == m.UID && s.FailureReason != "" {
			return s.FailureReason
		}
	}
	var msgs []string
	for _, cond := range m.Status.Conditions {
		if cond.Message != "" {
			msgs = append(msgs, cond.Message)
		} else if cond.Reason != "" {
			msgs = append(msgs, string(cond.Type)+": "+cond.Reason)
		}
	}
	if len(msgs) > 0 {
		return strings.Join(msgs, "; ")
	}
	return "KubeVirt reports the migration " + m.Name + " as Failed"
}

// evaluateMigrated decides a GoalMigrated task: the migration named by
// the task Succeeded and the instance runs on the target node, after which
// the VM's home node follows it (written by the plugin's account, like a
// task's record: the caller was allowed to migrate). A failed or deleted
// migration ends the task with KubeVirt's reason.
func (ts *Tasks) evaluateMigrated(t *Task, cvm *packedVM, vmi *kubevirtv1.VirtualMachineInstance, now time.Time) (bool, string, []string) {
	vm := cvm.meta()
	c := ts.c
	if vm == nil {
		return true, fmt.Sprintf("VM %s/%s was deleted", t.namespace, t.name), nil
	}
	target, ok := c.Node(t.target)
	if !ok {
		return true, fmt.Sprintf("no such cluster node '%s'", t.target), nil
	}
	m := c.migrationOf(t.namespace, t.object)
	switch {
	case m != nil && m.Status.Phase == kubevirtv1.MigrationFailed:
		reason := migrationFailure(m, vmi)
		return true, "migration aborted: " + reason, []string{fmt.Sprintf("ERROR: migration aborted (duration %s): %s", taskDuration(now.Sub(t.started)), reason)}
	case m == nil && c.migrations != nil && now.Sub(t.started) > lagGrace:
		return true, "migration aborted: the migration " + t.object + " was deleted", nil
	}
	done := c.migrations == nil || (m != nil && m.Status.Phase == kubevirtv1.MigrationSucceeded)
	if !done || vmi == nil || vmi.Status.Phase != kubevirtv1.Running || vmi.Status.NodeName != target.KubeName {
		return false, "", nil
	}
	if vm.Status.PrintableStatus == kubevirtv1.VirtualMachineStatusMigrating {
		// The VM controller has not seen the end yet: the VM still shows
		// the migrate lock, which PVE drops when its task ends.
		return false, "", nil
	}
	g := c.guest(0, cvm, c.nodeTable())
	if g.Node != t.target {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := c.SetHomeNode(ctx, g, t.target)
		cancel()
		if err != nil {
			// Tried again on the next pass, until the deadline.
			c.logger.Warn("migration: moving the home node", zap.String("upid", t.UPID.String()), zap.Error(err))
			return false, "", nil
		}
	}
	return true, translate.ExitOK, migrationFinished(t, now)
}

// migrationFinished is the last log line of a migration task that ended
// well, as qemu-server words it.
func migrationFinished(t *Task, now time.Time) []string {
	return []string{fmt.Sprintf("migration finished successfully (duration %s)", taskDuration(now.Sub(t.started)))}
}

// taskDuration prints a duration as qemu-server's migrate log does.
func taskDuration(d time.Duration) string {
	s := int64(d / time.Second)
	return fmt.Sprintf("%02d:%02d:%02d", s/3600, s/60%60, s%60)
}

// UnsharedClaim is a claim of a guest's volume that KubeVirt cannot
// live-migrate: it is not ReadWriteMany (Modes, as the claim asks), or
// the cache does not have it (Missing).
type UnsharedClaim struct {
	Volume, Claim string
	Modes         []corev1.PersistentVolumeAccessMode
	Missing       bool
}

// UnsharedClaims lists the claims of g's volumes that keep KubeVirt from
// live-migrating it: virt-handler marks an instance LiveMigratable=False
// (DisksNotLiveMigratable) when any PersistentVolumeClaim or DataVolume
// volume, the read-only CD-ROM's included, is not ReadWriteMany
// (pkg/virt-handler/vm.go checkVolumesForMigration), and virt-api then
// refuses the migration. Volumes are the template's: the cache keeps no
// instance volumes, and the running instance has the template's claims
// (hot-plugged ones included).
func (c *Cluster) UnsharedClaims(g Guest) []UnsharedClaim {
	if g.VM().Spec.Template == nil {
		return nil
	}
	var out []UnsharedClaim
	for _, v := range g.VM().Spec.Template.Spec.Volumes {
		claim := ""
		switch {
		case v.PersistentVolumeClaim != nil:
			claim = v.PersistentVolumeClaim.ClaimName
		case v.DataVolume != nil:
			claim = v.DataVolume.Name
		default:
			continue
		}
		pvc := c.CachedPVC(g.Namespace(), claim)
		switch {
		case pvc == nil:
			out = append(out, UnsharedClaim{Volume: v.Name, Claim: claim, Missing: true})
		case !slices.Contains(pvc.Spec.AccessModes, corev1.ReadWriteMany):
			out = append(out, UnsharedClaim{Volume: v.Name, Claim: claim, Modes: pvc.Spec.AccessModes})
		}
	}
	return out
}
