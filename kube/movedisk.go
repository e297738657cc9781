package kube

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// GoalMoved: the new volume of a move_disk (TaskSpec.Target, a claim) is
// imported, and then, when TaskSpec.Object names the source volume
// ("<storage>:<volume>", PVE's delete=1), its unusedN is dropped from the
// config and its claim deleted, once the copy no longer needs it.
const GoalMoved Goal = "moved"

// dropMovedSource removes the source claim of a finished move from the
// VM (its unusedN and DataVolume template) and deletes it; done is false
// when it is to be tried again (the VM changed under the write). As the
// plugin: any replica judging the task runs this, after the request that
// asked for the (permitted) move has ended. A claim a volume of the VM
// uses again is kept (kept is its reason).
func (c *Cluster) dropMovedSource(ctx context.Context, vm *kubevirtv1.VirtualMachine, claim string) (done bool, kept string, err error) {
	want, changed, inUse := translate.DropUnusedClaim(vm, claim)
	if inUse {
		return true, fmt.Sprintf("source volume '%s' kept: the VM uses it again", claim), nil
	}
	if changed {
		g := NewGuest(0, "", vm, nil)
		if _, err := c.ReplaceVM(ctx, g, want, translate.AnnotationConfig); err != nil {
			return false, "", err
		}
	}
	if users := c.ClaimUsers(vm.Namespace, claim, vm.UID); len(users) > 0 {
		return true, fmt.Sprintf("source volume '%s' kept: VirtualMachine %s uses it", claim, users[0].Name), nil
	}
	if err := c.DeleteVolume(ctx, vm.Namespace, claim); err != nil && !IsNotFound(err) {
		return false, "", err
	}
	return true, "", nil
}

// evaluateMoved judges a GoalMoved task: the new volume (TaskSpec.Target,
// a DataVolume cloned from the source) imported, then the source
// (TaskSpec.Object) dropped when asked.
func (ts *Tasks) evaluateMoved(t *Task, vm *kubevirtv1.VirtualMachine, now time.Time) (bool, string, []string) {
	if vm == nil {
		return true, fmt.Sprintf("VM %s/%s was deleted", t.namespace, t.name), nil
	}
	dv := ts.c.DataVolume(t.namespace, t.target)
	switch {
	case !ts.c.HasCDI():
		return true, ErrNoCDI.Error(), nil
	case dv == nil:
		if now.Sub(t.started) > lagGrace && !slices.ContainsFunc(vm.Spec.DataVolumeTemplates, func(d kubevirtv1.DataVolumeTemplateSpec) bool { return d.Name == t.target }) {
			return true, fmt.Sprintf("storage migration failed: volume '%s' is no longer the VM's", t.target), nil
		}
		return false, "", nil
	case dv.Status.Phase == cdiv1.Failed:
		return true, "storage migration failed: " + importFailure(dv), nil
	case dv.Status.Phase != cdiv1.Succeeded:
		if why := importFailure(dv); why != "" {
			return true, "storage migration failed: " + why, nil
		}
		return false, "", nil
	case vm.Status.PrintableStatus == kubevirtv1.VirtualMachineStatusProvisioning:
		// virt-controller has not seen the copy yet: the VM still shows
		// lock create, and PVE's qmmove ends with the VM unlocked.
		return false, "", nil
	}
	if t.object == "" {
		return true, translate.ExitOK, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, vol, _ := strings.Cut(t.object, ":")
	claim := translate.ClaimOfVolume(vol)
	done, kept, err := ts.c.dropMovedSource(ctx, vm, claim)
	if err != nil || !done {
		// Tried again on the next pass, until the deadline.
		ts.c.logger.Warn("move_disk: removing the source volume", zap.String("upid", t.UPID.String()), zap.Error(err))
		return false, "", nil
	}
	if kept != "" {
		return true, "WARNINGS: 1", []string{"WARN: " + kept}
	}
	if ts.c.CachedPVC(t.namespace, claim) != nil {
		// PVE's move frees the source before its task ends, so a content
		// list read after the end must not show it: wait until the claim's
		// deletion (by the garbage collector, after its DataVolume's) shows
		// here. The next passes find nothing left to drop.
		return false, "", nil
	}
	return true, translate.ExitOK, []string{fmt.Sprintf("removing source volume '%s' after successful copy", t.object)}
}
