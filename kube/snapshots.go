package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"go.uber.org/zap"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	snapshotv1 "kubevirt.io/api/snapshot/v1beta1"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// SnapshotGroupVersion is KubeVirt's snapshot API.
const SnapshotGroupVersion = "snapshot.kubevirt.io/v1beta1"

// ErrNoSnapshotAPI is returned when the cluster does not serve KubeVirt's
// snapshot API (the Snapshot feature gate is off or KubeVirt is older).
var ErrNoSnapshotAPI = errors.New("snapshots need KubeVirt's snapshot API (snapshot.kubevirt.io/v1beta1), which this cluster does not serve: enable the Snapshot feature gate")

// ErrSnapshotsOff is KubeVirt refusing to take or restore a snapshot
// because its Snapshot feature gate is off (Beta in v1.8, so off unless
// the KubeVirt CR turns it on): the snapshot API is served all the same.
// The words are PVE's for a guest whose storage cannot snapshot.
//
//lint:ignore ST1005 PVE's own words, which clients show and match.
var ErrSnapshotsOff = errors.New("snapshot feature is not available: KubeVirt's Snapshot feature gate is off (enable it in the KubeVirt CR: spec.configuration.developerConfiguration.featureGates)")

// snapshotWriteErr says a snapshot or restore create that KubeVirt's
// webhook refused for its feature gate as ErrSnapshotsOff. The webhook is
// the judge: it answers for the KubeVirt version that runs, whose default
// gates the KubeVirt CR does not list.
func snapshotWriteErr(err error) error {
	if d, ok := AsAdmission(err); ok && strings.Contains(d.Reason, "feature gate not enabled") {
		return fmt.Errorf("%w (%s)", ErrSnapshotsOff, d.Reason)
	}
	return err
}

// ErrSnapshotUnavailable is PVE's refusal of a snapshot when a disk's
// storage cannot take one (PVE::AbstractConfig::__snapshot_prepare). On
// KubeVirt that is a disk whose StorageClass has no VolumeSnapshotClass:
// KubeVirt's snapshot would succeed without that disk's data
// (status.snapshotVolumes.excludedVolumes), and a rollback to it would
// leave the disk as it is.
//
//lint:ignore ST1005 PVE's own words, which clients show and match.
var ErrSnapshotUnavailable = errors.New("snapshot feature is not available")

// ErrRollbackImpossible is PVE's refusal of a rollback to a snapshot that
// lacks a disk's data (PVE::Storage::volume_rollback_is_possible: "can't
// rollback, snapshot '<snap>' does not exist on '<volume>'").
//
//lint:ignore ST1005 PVE's own words, which clients show and match.
var ErrRollbackImpossible = errors.New("can't rollback")

// noSnapshotClassReason starts KubeVirt's reason in
// status.volumeSnapshotStatuses for a volume whose StorageClass has no
// VolumeSnapshotClass (pkg/storage/snapshot getVolumeSnapshotStatus).
// Other reasons there are passing states (a claim not yet created) or
// volumes that hold no disk data.
const noSnapshotClassReason = "No VolumeSnapshotClass"

// snapshotBlocker refuses a snapshot of vm that KubeVirt would take
// without the data of one of its disks, by KubeVirt's own verdict per
// volume (VM status.volumeSnapshotStatuses). CD-ROMs are not asked about,
// as qemu-server's has_feature skips them.
func snapshotBlocker(vm *kubevirtv1.VirtualMachine) error {
	statuses := map[string]kubevirtv1.VolumeSnapshotStatus{}
	for _, st := range vm.Status.VolumeSnapshotStatuses {
		statuses[st.Name] = st
	}
	var why []string
	for _, d := range translate.SnapshotDisks(vm) {
		if st, ok := statuses[d.Volume]; ok && !st.Enabled && strings.HasPrefix(st.Reason, noSnapshotClassReason) {
			why = append(why, fmt.Sprintf("disk %s (%s): %s", d.Volume, d.Claim, st.Reason))
		}
	}
	// A CD-ROM's claim on storage that can snapshot is snapshotted with
	// the VM, and KubeVirt's in-place restore deletes and recreates every
	// claim it holds: a rollback would take the image away from the VMs
	// sharing it (PVE never touches an ISO image).
	for vol, claim := range cdromClaims(vm) {
		if st, ok := statuses[vol]; ok && st.Enabled {
			why = append(why, fmt.Sprintf("CD-ROM %s holds the shared claim %s, which KubeVirt would snapshot and a rollback delete and recreate: eject it first (%s: none,media=cdrom)", vol, claim, vol))
		}
	}
	sort.Strings(why)
	if len(why) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrSnapshotUnavailable, strings.Join(why, "; "))
}

// cdromClaims are the claims of vm's CD-ROMs, by volume name.
func cdromClaims(vm *kubevirtv1.VirtualMachine) map[string]string {
	out := map[string]string{}
	if vm == nil || vm.Spec.Template == nil {
		return out
	}
	cdrom := map[string]bool{}
	for _, d := range vm.Spec.Template.Spec.Domain.Devices.Disks {
		cdrom[d.Name] = d.CDRom != nil
	}
	for _, v := range vm.Spec.Template.Spec.Volumes {
		switch {
		case !cdrom[v.Name]:
		case v.PersistentVolumeClaim != nil:
			out[v.Name] = v.PersistentVolumeClaim.ClaimName
		case v.DataVolume != nil:
			out[v.Name] = v.DataVolume.Name
		}
	}
	return out
}

// sharedClaimBlocker refuses a rollback of g to the snapshot content
// whose backups include a claim that is not g's alone: a CD-ROM's file
// (an ISO image of the storage) or a claim another VM uses. KubeVirt's
// in-place restore deletes and recreates every claim it has a backup of
// (restore.go reconcileVolumeRestores) and has no way to leave one out:
// the claim would stay Terminating under the VMs using it, or be replaced
// under them, and a copy owned by g would go with g.
func (c *Cluster) sharedClaimBlocker(g Guest, content *snapshotv1.VirtualMachineSnapshotContent, snapname string) error {
	var cdroms map[string]string
	if src := content.Spec.Source.VirtualMachine; src != nil {
		cdroms = cdromClaims(&kubevirtv1.VirtualMachine{Spec: src.Spec})
	}
	for _, vb := range content.Spec.VolumeBackups {
		claim := vb.PersistentVolumeClaim.Name
		var why string
		if users := c.ClaimUsers(g.Namespace(), claim, g.Meta().UID); len(users) > 0 {
			why = "VM " + users[0].Name + " uses it"
			if id, ok := c.table().idOf(users[0].Namespace, users[0].Name); ok {
				why = fmt.Sprintf("VM %d uses it", id)
			}
		} else if _, file, ok := translate.FileOf(vb.PersistentVolumeClaim.Annotations); ok {
			why = "it is the image '" + file + "' of the storage"
		} else if _, ok := cdroms[vb.VolumeName]; ok {
			why = "it is a CD-ROM's"
		}
		if why != "" {
			return fmt.Errorf("%w, snapshot '%s' holds the shared volume '%s' (%s: %s), which KubeVirt's restore would delete and recreate",
				ErrRollbackImpossible, snapname, claim, vb.VolumeName, why)
		}
	}
	return nil
}

// CanSnapshot tells why a snapshot of g would be refused up front (nil
// when it would not): no snapshot API, or a disk KubeVirt would snapshot
// without its data or a CD-ROM whose shared claim it would take along
// (snapshotBlocker). PVE's has_feature('snapshot') answers the same.
func (c *Cluster) CanSnapshot(g Guest) error {
	if c.snapshots == nil {
		return ErrNoSnapshotAPI
	}
	return snapshotBlocker(g.VM())
}

// excludedDisks are vm's disks whose data snapshot s does not hold
// (status.snapshotVolumes.excludedVolumes).
func excludedDisks(vm *kubevirtv1.VirtualMachine, s *snapshotv1.VirtualMachineSnapshot) []translate.SnapshotDisk {
	if s.Status == nil || s.Status.SnapshotVolumes == nil || len(s.Status.SnapshotVolumes.ExcludedVolumes) == 0 {
		return nil
	}
	var out []translate.SnapshotDisk
	for _, d := range translate.SnapshotDisks(vm) {
		if slices.Contains(s.Status.SnapshotVolumes.ExcludedVolumes, d.Volume) {
			out = append(out, d)
		}
	}
	return out
}

// rollbackBlocker refuses a rollback of vm to a snapshot that lacks one of
// its disks' data (one KubeVirt took, e.g. through kubectl, on storage
// without a VolumeSnapshotClass): KubeVirt would restore the rest and
// leave that disk as it is.
func rollbackBlocker(vm *kubevirtv1.VirtualMachine, s *snapshotv1.VirtualMachineSnapshot, snapname string) error {
	ex := excludedDisks(vm, s)
	if len(ex) == 0 {
		return nil
	}
	return fmt.Errorf("%w, snapshot '%s' does not exist on '%s' (KubeVirt took it without the data of disk %s: its storage has no VolumeSnapshotClass)",
		ErrRollbackImpossible, snapname, ex[0].Claim, ex[0].Volume)
}

const snapshotSourceIndex = "source"

// startSnapshotStores watches snapshots and restores when the API exists.
func (c *Cluster) startSnapshotStores(ctx context.Context) []*store {
	if !c.opts.AssumeKubeVirtAPIs {
		if _, err := c.own.kube.Discovery().ServerResourcesForGroupVersion(SnapshotGroupVersion); err != nil {
			c.logger.Info("snapshot API not served; snapshot endpoints will say so", zap.Error(err))
			return nil
		}
	}
	byVM := func(obj any) ([]string, error) {
		switch o := obj.(type) {
		case *snapshotv1.VirtualMachineSnapshot:
			return []string{o.Namespace + "/" + o.Spec.Source.Name}, nil
		case *snapshotv1.VirtualMachineRestore:
			return []string{o.Namespace + "/" + o.Spec.Target.Name}, nil
		}
		return nil, nil
	}
	// A snapshot or restore locks its VM (SnapshotLock), which the VM's
	// rows show: a change is one to what Guests shows.
	touch := c.Tasks.touchBy(keys(byVM))
	changed := func(old, new any) {
		c.guestGen.Add(1)
		touch(old, new)
	}
	snaps := c.own.kv.SnapshotV1beta1()
	c.snapshots = newStore(ctx, c.listScopes(), &snapshotv1.VirtualMachineSnapshot{}, listWatchFuncs{
		list: func(ctx context.Context, ns string, o metav1.ListOptions) (runtime.Object, error) {
			return snaps.VirtualMachineSnapshots(ns).List(ctx, o)
		},
		watch: func(ctx context.Context, ns string, o metav1.ListOptions) (watch.Interface, error) {
			return snaps.VirtualMachineSnapshots(ns).Watch(ctx, o)
		},
	}, c.opts.Resync, cache.Indexers{snapshotSourceIndex: byVM}, stripMeta, changed)
	c.restores = newStore(ctx, c.listScopes(), &snapshotv1.VirtualMachineRestore{}, listWatchFuncs{
		list: func(ctx context.Context, ns string, o metav1.ListOptions) (runtime.Object, error) {
			return snaps.VirtualMachineRestores(ns).List(ctx, o)
		},
		watch: func(ctx context.Context, ns string, o metav1.ListOptions) (watch.Interface, error) {
			return snaps.VirtualMachineRestores(ns).Watch(ctx, o)
		},
	}, c.opts.Resync, cache.Indexers{snapshotSourceIndex: byVM}, stripMeta, changed)
	return []*store{c.snapshots, c.restores}
}

// Snapshot is a VirtualMachineSnapshot under its PVE name.
type Snapshot struct {
	Name        string // PVE snapname
	Description string
	Obj         *snapshotv1.VirtualMachineSnapshot
}

// Snapshots lists g's snapshots, oldest first: PVE shows a chain, and
// KubeVirt's flat list is ordered by creation to make one.
func (c *Cluster) Snapshots(g Guest) ([]Snapshot, error) {
	if c.snapshots == nil {
		return nil, ErrNoSnapshotAPI
	}
	var out []Snapshot
	for _, o := range c.snapshots.byIndex(snapshotSourceIndex, g.Namespace()+"/"+g.Name()) {
		s := o.(*snapshotv1.VirtualMachineSnapshot)
		if s.Status != nil && s.Status.SourceUID != nil && *s.Status.SourceUID != g.Meta().UID {
			continue // a snapshot of an earlier VM of the same name
		}
		name := s.Annotations[translate.AnnotationSnapName]
		if name == "" {
			name = s.Name
		}
		out = append(out, Snapshot{Name: name, Description: s.Annotations[translate.AnnotationDescription], Obj: s})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Obj.CreationTimestamp, out[j].Obj.CreationTimestamp
		if !a.Equal(&b) {
			return a.Before(&b)
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// CreateSnapshot asks KubeVirt for a snapshot of g named snapname (PVE's
// name is kept in an annotation; the object name is derived from it).
func (c *Cluster) CreateSnapshot(ctx context.Context, g Guest, snapname, description string) (*snapshotv1.VirtualMachineSnapshot, error) {
	if err := c.CanSnapshot(g); err != nil {
		return nil, err
	}
	group := "kubevirt.io"
	s := &snapshotv1.VirtualMachineSnapshot{
		ObjectMeta: metav1.ObjectMeta{
			Name:        translate.SnapshotObjectName(g.VMID, snapname),
			Namespace:   g.Namespace(),
			Labels:      map[string]string{translate.LabelVMID: fmt.Sprint(g.VMID)},
			Annotations: map[string]string{translate.AnnotationSnapName: snapname, translate.AnnotationDescription: description},
		},
		Spec: snapshotv1.VirtualMachineSnapshotSpec{Source: corev1.TypedLocalObjectReference{APIGroup: &group, Kind: "VirtualMachine", Name: g.Name()}},
	}
	out, err := c.as(ctx).kv.SnapshotV1beta1().VirtualMachineSnapshots(g.Namespace()).Create(ctx, s, metav1.CreateOptions{})
	if err != nil {
		return nil, snapshotWriteErr(err)
	}
	c.snapshots.put(out, true)
	return out, nil
}

// DeleteSnapshot deletes a snapshot, guarded by its UID.
func (c *Cluster) DeleteSnapshot(ctx context.Context, s *snapshotv1.VirtualMachineSnapshot) error {
	uid := s.UID
	return c.as(ctx).kv.SnapshotV1beta1().VirtualMachineSnapshots(s.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
}

// SetSnapshotDescription updates the description annotation.
func (c *Cluster) SetSnapshotDescription(ctx context.Context, s *snapshotv1.VirtualMachineSnapshot, description string) error {
	cp := s.DeepCopy()
	if cp.Annotations == nil {
		cp.Annotations = map[string]string{}
	}
	cp.Annotations[translate.AnnotationDescription] = description
	_, err := c.as(ctx).kv.SnapshotV1beta1().VirtualMachineSnapshots(s.Namespace).Update(ctx, cp, metav1.UpdateOptions{})
	return err
}

// RestoreSnapshot rolls g back to s (PVE's snapname) with a
// VirtualMachineRestore, unless s lacks the data of one of g's disks.
func (c *Cluster) RestoreSnapshot(ctx context.Context, g Guest, s *snapshotv1.VirtualMachineSnapshot, snapname string) (*snapshotv1.VirtualMachineRestore, error) {
	if err := rollbackBlocker(g.VM(), s, snapname); err != nil {
		return nil, err
	}
	content, err := c.snapshotContent(ctx, s)
	if err != nil {
		return nil, err
	}
	if content != nil {
		if err := c.sharedClaimBlocker(g, content, snapname); err != nil {
			return nil, err
		}
	}
	if rollbackHalts(g) {
		if err := c.setRunStrategy(ctx, g, kubevirtv1.RunStrategyHalted); err != nil {
			return nil, fmt.Errorf("stopping VM %d for the rollback: %w", g.VMID, err)
		}
	}
	group := "kubevirt.io"
	r := &snapshotv1.VirtualMachineRestore{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: s.Name + "-restore-",
			Namespace:    g.Namespace(),
			Labels:       map[string]string{translate.LabelVMID: fmt.Sprint(g.VMID)},
		},
		Spec: snapshotv1.VirtualMachineRestoreSpec{
			Target:                     corev1.TypedLocalObjectReference{APIGroup: &group, Kind: "VirtualMachine", Name: g.Name()},
			VirtualMachineSnapshotName: s.Name,
			// PVE's rollback stops a running VM first; KubeVirt does the same
			// with StopTarget instead of waiting for someone to stop it.
			TargetReadinessPolicy: ptr.To(snapshotv1.VirtualMachineRestoreStopTarget),
			// Volumes keep their claim names, which PVE volume ids name.
			VolumeRestorePolicy: ptr.To(snapshotv1.VolumeRestorePolicyInPlace),
		},
	}
	out, err := c.as(ctx).kv.SnapshotV1beta1().VirtualMachineRestores(g.Namespace()).Create(ctx, r, metav1.CreateOptions{})
	return out, snapshotWriteErr(err)
}

// rollbackHalts tells whether g's run strategy must become Halted before
// a restore. KubeVirt's restore keeps the run strategy (restore.go
// generateRestoredVMSpec), while PVE leaves a VM rolled back to a snapshot
// without RAM stopped: Always, RerunOnFailure and Once would start it
// again. And its StopTarget stops the VM through virt-api, which answers
// 409 "VM is not running" for a Manual or RerunOnFailure VM whose guest
// powered itself off (the instance final, not deleted), so the restore
// would wait for ever; Halted has virt-controller delete that instance.
// A Manual VM with a live instance is stopped by the restore and stays
// stopped.
func rollbackHalts(g Guest) bool {
	rs, err := g.Meta().RunStrategy()
	switch {
	case err != nil, rs == kubevirtv1.RunStrategyHalted:
		return false
	case rs == kubevirtv1.RunStrategyManual:
		return g.InstanceMeta() != nil && g.InstanceMeta().IsFinal()
	}
	return true
}

// SnapshotLock is the PVE lock a snapshot or rollback of g holds:
// "rollback" or "snapshot" while KubeVirt's restore or snapshot controller
// keeps the VM locked (its status), and from the moment one is asked for
// (the object exists, not yet finished), as qemu-server sets its lock
// when the call starts; "" when neither.
func (c *Cluster) SnapshotLock(g Guest) string {
	if l := g.State().Lock; l == translate.LockRollback || l == translate.LockSnapshot {
		return l
	}
	if c.restores == nil || c.snapshots == nil {
		return ""
	}
	key := g.Namespace() + "/" + g.Name()
	for _, o := range c.restores.byIndex(snapshotSourceIndex, key) {
		r := o.(*snapshotv1.VirtualMachineRestore)
		if ref := metav1.GetControllerOf(r); ref != nil && ref.UID != g.UID() {
			continue // a restore of an earlier VM of the same name
		}
		if r.DeletionTimestamp == nil && (r.Status == nil || r.Status.Complete == nil || !*r.Status.Complete) && !restoreFailed(r) {
			return translate.LockRollback
		}
	}
	for _, o := range c.snapshots.byIndex(snapshotSourceIndex, key) {
		s := o.(*snapshotv1.VirtualMachineSnapshot)
		if s.Status != nil && s.Status.SourceUID != nil && *s.Status.SourceUID != g.UID() {
			continue
		}
		if s.DeletionTimestamp == nil && (s.Status == nil || (s.Status.Phase != snapshotv1.Succeeded && s.Status.Phase != snapshotv1.Failed)) {
			return translate.LockSnapshot
		}
	}
	return ""
}

// lockedBy tells whether vm is still locked by the snapshot (or, with
// restore, the restore) named name.
func lockedBy(vm *kubevirtv1.VirtualMachine, name string, restore bool) bool {
	if vm == nil {
		return false
	}
	l := vm.Status.SnapshotInProgress
	if restore {
		l = vm.Status.RestoreInProgress
	}
	return l != nil && *l == name
}

// restoreFailed tells whether KubeVirt gave up on a restore.
func restoreFailed(r *snapshotv1.VirtualMachineRestore) bool {
	if r.Status == nil {
		return false
	}
	for _, cnd := range r.Status.Conditions {
		if cnd.Type == snapshotv1.ConditionFailure && cnd.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// snapshotState tells whether a snapshot is ready, failed (with why) or
// gone.
func (c *Cluster) snapshotState(ns, name string) (exists, ready bool, failure string) {
	if c.snapshots == nil {
		return false, false, ""
	}
	o := c.snapshots.get(ns, name)
	if o == nil {
		return false, false, ""
	}
	s := o.(*snapshotv1.VirtualMachineSnapshot)
	if s.Status == nil {
		return true, false, ""
	}
	if s.Status.Phase == snapshotv1.Failed {
		msg := "snapshot failed"
		if s.Status.Error != nil && s.Status.Error.Message != nil {
			msg += ": " + *s.Status.Error.Message
		}
		for _, cnd := range s.Status.Conditions {
			if cnd.Status == corev1.ConditionFalse && cnd.Reason != "" {
				msg += " (" + cnd.Reason + ")"
				break
			}
		}
		return true, false, msg
	}
	ready = s.Status.ReadyToUse != nil && *s.Status.ReadyToUse
	if vo := c.cachedVM(ns, s.Spec.Source.Name); ready && vo != nil {
		// KubeVirt took it without a disk's data: the VM's status did
		// not say so yet when the snapshot was asked for.
		vm := vo.full()
		if s.Status.SourceUID == nil || *s.Status.SourceUID == vm.UID {
			if ex := excludedDisks(vm, s); len(ex) > 0 {
				return true, false, fmt.Sprintf("%s: KubeVirt took the snapshot without the data of disk %s (%s): its storage has no VolumeSnapshotClass",
					ErrSnapshotUnavailable, ex[0].Volume, ex[0].Claim)
			}
		}
	}
	return true, ready, ""
}

// restoreState tells whether a restore completed.
func (c *Cluster) restoreState(ns, name string) (exists, complete bool) {
	if c.restores == nil {
		return false, false
	}
	o := c.restores.get(ns, name)
	if o == nil {
		return false, false
	}
	r := o.(*snapshotv1.VirtualMachineRestore)
	return true, r.Status != nil && r.Status.Complete != nil && *r.Status.Complete
}

// reapplySnapshotConfig puts the PVE config and name the snapshot recorded
// back on the restored VM. KubeVirt's restore replaces the spec but keeps
// the VM's metadata, where the PVE config lives: without this a rollback
// would show, and later rebuild from, the config of after the snapshot.
// Idempotent, so that every replica judging the task may run it.
func (c *Cluster) reapplySnapshotConfig(ctx context.Context, ns, restoreName string) error {
	if c.restores == nil || c.snapshots == nil {
		return nil
	}
	ro := c.restores.get(ns, restoreName)
	if ro == nil {
		return nil
	}
	r := ro.(*snapshotv1.VirtualMachineRestore)
	so := c.snapshots.get(ns, r.Spec.VirtualMachineSnapshotName)
	vo := c.cachedVM(ns, r.Spec.Target.Name)
	if so == nil || vo == nil {
		return nil
	}
	recorded, err := c.SnapshotVM(ctx, so.(*snapshotv1.VirtualMachineSnapshot))
	if err != nil || recorded == nil {
		return err
	}
	cur := vo.full() // the cached metadata lacks the config's value
	set := map[string]any{}
	for _, k := range []string{translate.AnnotationConfig, translate.AnnotationName} {
		want, had := recorded.Annotations[k]
		if got, has := cur.Annotations[k]; has == had && got == want {
			continue
		}
		if had {
			set[k] = want
		} else {
			set[k] = nil // the snapshot's VM had none: remove it
		}
	}
	if len(set) == 0 {
		return nil
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": set, "uid": cur.UID}})
	if err != nil {
		return err
	}
	// As the plugin: any replica judging the task runs this, after the
	// request that asked for the (permitted) rollback has ended.
	out, err := c.own.kv.KubevirtV1().VirtualMachines(ns).Patch(ctx, cur.Name, types.MergePatchType, body, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("restoring the PVE config of %s/%s: %w", ns, cur.Name, err)
	}
	c.cacheVM(out)
	return nil
}

// SnapshotVM returns the VM as the snapshot recorded it (from its
// VirtualMachineSnapshotContent), or nil when there is none yet.
func (c *Cluster) SnapshotVM(ctx context.Context, s *snapshotv1.VirtualMachineSnapshot) (*kubevirtv1.VirtualMachine, error) {
	content, err := c.snapshotContent(ctx, s)
	if err != nil || content == nil {
		return nil, err
	}
	if content.Spec.Source.VirtualMachine == nil {
		return nil, nil
	}
	src := content.Spec.Source.VirtualMachine
	return &kubevirtv1.VirtualMachine{ObjectMeta: src.ObjectMeta, Spec: src.Spec}, nil
}

// snapshotContent is s's VirtualMachineSnapshotContent, or nil when
// KubeVirt has not made one yet.
func (c *Cluster) snapshotContent(ctx context.Context, s *snapshotv1.VirtualMachineSnapshot) (*snapshotv1.VirtualMachineSnapshotContent, error) {
	if s.Status == nil || s.Status.VirtualMachineSnapshotContentName == nil {
		return nil, nil
	}
	return c.as(ctx).kv.SnapshotV1beta1().VirtualMachineSnapshotContents(s.Namespace).Get(ctx, *s.Status.VirtualMachineSnapshotContentName, metav1.GetOptions{})
}
