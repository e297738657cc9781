package kube

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// ErrNeedsVirtAPI is returned for actions only virt-api can perform (hard
// reset, pause, resume) when the cluster does not serve
// subresources.kubevirt.io.
var ErrNeedsVirtAPI = errors.New("this action requires KubeVirt's virt-api (subresources.kubevirt.io), which this cluster does not serve")

// SubresourceGroupVersion is the aggregated API of virt-api.
const SubresourceGroupVersion = "subresources.kubevirt.io/v1"

// power drives VM power state through virt-api's lifecycle subresources,
// or by editing spec.runStrategy when virt-api is absent (kubevirt.md §6).
type power struct {
	c       *Cluster
	mu      sync.Mutex
	virtAPI bool
	checked time.Time
	forced  *bool
	recheck time.Duration
}

func newPower(c *Cluster) *power { return &power{c: c, recheck: time.Minute} }

// detect probes for virt-api; the answer is cached for a minute so that a
// virt-api that appears or goes away is noticed without a restart.
func (p *power) detect(ctx context.Context) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.forced != nil {
		return *p.forced
	}
	if !p.checked.IsZero() && time.Since(p.checked) < p.recheck {
		return p.virtAPI
	}
	_, err := p.c.own.kube.Discovery().ServerResourcesForGroupVersion(SubresourceGroupVersion)
	was := p.virtAPI
	p.virtAPI = err == nil
	if p.checked.IsZero() || was != p.virtAPI {
		p.c.logger.Info("kubevirt lifecycle path", zap.Bool("virt_api", p.virtAPI), zap.NamedError("probe", err))
	}
	p.checked = time.Now()
	return p.virtAPI
}

// SetVirtAPI forces the lifecycle path instead of probing for it.
func (c *Cluster) SetVirtAPI(on bool) {
	c.power.mu.Lock()
	c.power.forced = &on
	c.power.mu.Unlock()
}

// HasVirtAPI tells whether lifecycle calls go through virt-api.
func (c *Cluster) HasVirtAPI(ctx context.Context) bool { return c.power.detect(ctx) }

// StartVM powers a VM on.
func (c *Cluster) StartVM(ctx context.Context, g Guest) error {
	if c.power.detect(ctx) {
		// virt-api's start turns Halted into Always, after which a guest
		// shutdown restarts the VM. PVE VMs stay stopped, so go through
		// Manual (restores and the fallback stop leave VMs Halted).
		if rs, _ := g.VM.RunStrategy(); rs == kubevirtv1.RunStrategyHalted {
			if err := c.setRunStrategy(ctx, g, kubevirtv1.RunStrategyManual); err != nil {
				return err
			}
		}
		return lifecycle(g, func() error {
			return c.as(ctx).kv.KubevirtV1().VirtualMachines(g.Namespace()).Start(ctx, g.Name(), &kubevirtv1.StartOptions{})
		})
	}
	return c.setRunStrategy(ctx, g, kubevirtv1.RunStrategyRerunOnFailure)
}

// StopVM powers a VM off. gracePeriod nil means the VM's own grace period
// (a clean shutdown); 0 pulls the plug. Without virt-api only the graceful
// stop exists.
func (c *Cluster) StopVM(ctx context.Context, g Guest, gracePeriod *int64) error {
	if c.power.detect(ctx) {
		return lifecycle(g, func() error {
			return c.as(ctx).kv.KubevirtV1().VirtualMachines(g.Namespace()).Stop(ctx, g.Name(), &kubevirtv1.StopOptions{GracePeriod: gracePeriod})
		})
	}
	return c.setRunStrategy(ctx, g, kubevirtv1.RunStrategyHalted)
}

// RestartVM stops and starts the VM, applying pending changes. Without
// virt-api the instance is deleted and the run strategy brings it back:
// only Always (and Once) start a new instance when one is deleted;
// RerunOnFailure restarts failed instances only, so the VM is switched to
// Always first.
func (c *Cluster) RestartVM(ctx context.Context, g Guest) error {
	if c.power.detect(ctx) {
		return lifecycle(g, func() error {
			return c.as(ctx).kv.KubevirtV1().VirtualMachines(g.Namespace()).Restart(ctx, g.Name(), &kubevirtv1.RestartOptions{})
		})
	}
	rs, _ := g.VM.RunStrategy()
	if rs != kubevirtv1.RunStrategyAlways && rs != kubevirtv1.RunStrategyOnce {
		if err := c.setRunStrategy(ctx, g, kubevirtv1.RunStrategyAlways); err != nil {
			return err
		}
	}
	if g.VMI == nil {
		return nil
	}
	uid := g.VMI.UID
	return c.as(ctx).kv.KubevirtV1().VirtualMachineInstances(g.Namespace()).Delete(ctx, g.Name(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
}

// ResetVM hard-resets the running instance (same instance, no config change).
func (c *Cluster) ResetVM(ctx context.Context, g Guest) error {
	if !c.power.detect(ctx) {
		return ErrNeedsVirtAPI
	}
	return c.as(ctx).kv.KubevirtV1().VirtualMachineInstances(g.Namespace()).Reset(ctx, g.Name())
}

// PauseVM freezes the running instance (PVE suspend without todisk).
func (c *Cluster) PauseVM(ctx context.Context, g Guest) error {
	if !c.power.detect(ctx) {
		return ErrNeedsVirtAPI
	}
	return c.as(ctx).kv.KubevirtV1().VirtualMachineInstances(g.Namespace()).Pause(ctx, g.Name(), &kubevirtv1.PauseOptions{})
}

// UnpauseVM resumes a paused instance.
func (c *Cluster) UnpauseVM(ctx context.Context, g Guest) error {
	if !c.power.detect(ctx) {
		return ErrNeedsVirtAPI
	}
	return c.as(ctx).kv.KubevirtV1().VirtualMachineInstances(g.Namespace()).Unpause(ctx, g.Name(), &kubevirtv1.UnpauseOptions{})
}

// lifecycleBackoff spaces the retries of a lifecycle call that lost a race
// (about 5 s in all: another call's start or stop request is consumed by
// virt-controller within moments).
var lifecycleBackoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 10, Cap: time.Second}

// lifecycle makes a virt-api lifecycle call (start, stop, restart) for g,
// asking again while it loses a race with another change of the VM
// (lostPatchRace): virt-api reads the VM afresh on every call, so the
// next answer is the real one (e.g. "VM is already running"). A race still
// lost after the retries is said in PVE's terms, not virt-api's.
func lifecycle(g Guest, call func() error) error {
	err := retry.OnError(lifecycleBackoff, lostPatchRace, call)
	msg, _ := StatusMessage(err)
	switch {
	case lostPatchRace(err):
		return fmt.Errorf("VM %d is busy: another start, stop or reboot of it is under way; try again", g.VMID)
	case apierrors.IsConflict(err) && strings.HasSuffix(msg, "VM is already running"):
		return fmt.Errorf("VM %d already running", g.VMID) // qemu-server's words
	case apierrors.IsConflict(err) && strings.HasSuffix(msg, "VM is not running"):
		return fmt.Errorf("VM %d not running", g.VMID)
	}
	return err
}

// setRunStrategy replaces spec.runStrategy (and drops the deprecated
// spec.running) with a JSON patch guarded by the VM's UID, so a VM
// recreated under the same name is never touched by mistake.
func (c *Cluster) setRunStrategy(ctx context.Context, g Guest, rs kubevirtv1.VirtualMachineRunStrategy) error {
	ops := []patchOp{{Op: "test", Path: "/metadata/uid", Value: string(g.VM.UID)}}
	if g.VM.Spec.Running != nil {
		ops = append(ops, patchOp{Op: "remove", Path: "/spec/running"})
	}
	ops = append(ops, patchOp{Op: "add", Path: "/spec/runStrategy", Value: string(rs)})
	return c.patchVM(ctx, g, ops)
}

type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

func (c *Cluster) patchVM(ctx context.Context, g Guest, ops []patchOp) error {
	_, err := c.jsonPatchVM(ctx, g, ops)
	if apierrors.IsConflict(err) || patchTestFailed(err) {
		return fmt.Errorf("VM %s/%s changed while being updated (retry): %w", g.Namespace(), g.Name(), err)
	}
	return err
}
