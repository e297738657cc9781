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
		if rs, _ := g.Meta().RunStrategy(); rs == kubevirtv1.RunStrategyHalted {
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

// StartPending tells whether vm carries a start request KubeVirt has not
// acted on yet: virt-api's start subresource queues it in the VM's status,
// and virt-controller creates the instance, and drops the request, only once
// the VM's volumes are ready.
func StartPending(vm *kubevirtv1.VirtualMachine) bool {
	for _, r := range vm.Status.StateChangeRequests {
		if r.Action == kubevirtv1.StartRequest {
			return true
		}
	}
	return false
}

// stopAfterStartPoll is how often StopAfterStart looks for the instance.
const stopAfterStartPoll = 100 * time.Millisecond

// StopAfterStart stops g once KubeVirt has created the instance of its
// pending start request (StartPending), for the running task upid of goal
// GoalStoppedAfterStart. virt-api refuses to stop a VM without an instance
// (409 "VM is not running") and has no way to withdraw a start request, so
// a stop that came while the start waited would be overtaken by it; like a
// PVE stop waiting for the start's lock, this one acts once the start has
// happened. It gives up when the task ends (the start failed, a later
// request superseded it, its deadline passed) or the cluster stops; a
// refused stop ends the task with the refusal. The stop is made as ctx's
// caller, after ctx itself is done.
func (c *Cluster) StopAfterStart(ctx context.Context, g Guest, gracePeriod *int64, upid string) {
	ctx = context.WithoutCancel(ctx)
	life := c.life
	if life == nil { // not started: nothing ends it but the task
		life = context.Background()
	}
	go func() {
		tick := time.NewTicker(stopAfterStartPoll)
		defer tick.Stop()
		for {
			select {
			case <-life.Done():
				return
			case <-tick.C:
			}
			if t, err := c.Tasks.Get(ctx, upid); err != nil || !t.Running() {
				return
			}
			// The start has happened once the instance exists and
			// virt-controller has dropped the request: virt-api's stop
			// patches the requests guarded by a test of their current
			// value, which fails while the controller is still dropping it.
			vm := c.cachedVM(g.Namespace(), g.Name())
			if vm == nil || !vm.hasUID(g.Meta().UID) {
				return
			}
			vmi := c.cachedVMI(g.Namespace(), g.Name())
			if StartPending(vm.meta()) || vmi == nil || vmi.meta().IsFinal() || !metav1.IsControlledBy(vmi, g.Meta()) {
				continue
			}
			if err := c.StopVM(ctx, g, gracePeriod); err != nil {
				c.logger.Warn("stop after the pending start", zap.String("upid", upid), zap.Error(err))
				msg := err.Error()
				if m, ok := StatusMessage(err); ok {
					msg = m
				}
				c.Tasks.fail(ctx, upid, msg)
			}
			return
		}
	}()
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
	rs, _ := g.Meta().RunStrategy()
	if rs != kubevirtv1.RunStrategyAlways && rs != kubevirtv1.RunStrategyOnce {
		if err := c.setRunStrategy(ctx, g, kubevirtv1.RunStrategyAlways); err != nil {
			return err
		}
	}
	if g.InstanceMeta() == nil {
		return nil
	}
	uid := g.InstanceMeta().UID
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
// virt-controller within moments). It has no Cap because wait.Backoff
// ends its steps once Cap is reached: with a 1 s Cap it gave up after 2 s.
var lifecycleBackoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 9}

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
	ops := []patchOp{{Op: "test", Path: "/metadata/uid", Value: string(g.Meta().UID)}}
	if g.Meta().Spec.Running != nil {
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
