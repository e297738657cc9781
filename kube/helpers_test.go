package kube

import (
	"context"
	"hash/fnv"
	"sort"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubevirt"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testutil"
	"github.com/caddy-proxmox/caddy-proxmox/kubevirtsim"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

const (
	waitTimeout = 10 * time.Second

	// Seeded objects (kubevirtsim.Seed).
	seedDebianUID = "2c5e8f1a-4b7d-4e0a-9c3f-6d8b1e4a7c10"
	seedWinUID    = "2c5e8f1a-4b7d-4e0a-9c3f-6d8b1e4a7c11"
	seedLegacyUID = "2c5e8f1a-4b7d-4e0a-9c3f-6d8b1e4a7c12"
	seedNode1     = "kv-node-1-lab-internal"
	seedNode2     = "kv-node-2-lab-internal"
	seedNode3     = "kv-node-3-lab-internal"
)

// eventually is testutil.Wait with this package's timeout.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	testutil.Wait(t, waitTimeout, what, cond)
}

// checkGoroutines fails the test when goroutines started during it are still
// running once every later cleanup (clusters, controllers) has run. Register
// it first so that its cleanup runs last.
func checkGoroutines(t *testing.T) {
	t.Helper()
	testutil.CheckAtCleanup(t, 5*time.Second)
}

// env is a fake cluster (kubevirtsim.Seed plus extra objects), optionally
// with a running simulated virt-controller.
type env struct {
	t    *testing.T
	ctx  context.Context
	kube kubernetes.Interface
	kv   kubevirt.Interface
	// ctrl is the stand-in controller, when envOptions.controller.
	ctrl *kubevirtsim.Controller
}

type envOptions struct {
	controller bool
	startDelay time.Duration
	extra      []k8sruntime.Object
	// beforeController may install reactors on the fakes.
	beforeController func(kube kubernetes.Interface, kv kubevirt.Interface)
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	checkGoroutines(t)
	objs := append(kubevirtsim.Seed(), o.extra...)
	kube, kv := kubevirtsim.NewFakeClients(objs...)
	if o.beforeController != nil {
		o.beforeController(kube, kv)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &env{t: t, ctx: ctx, kube: kube, kv: kv}
	if o.controller {
		if o.startDelay == 0 {
			o.startDelay = 50 * time.Millisecond
		}
		ctrl := kubevirtsim.NewController(kv, kube, kubevirtsim.Options{StartDelay: o.startDelay, StopDelay: 50 * time.Millisecond})
		e.ctrl = ctrl
		done := make(chan error, 1)
		go func() { done <- ctrl.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("controller: %v", err)
				}
			case <-time.After(waitTimeout):
				t.Errorf("controller did not stop")
			}
		})
	} else {
		t.Cleanup(cancel)
	}
	return e
}

// cluster starts a Cluster on the env's clients; virtAPI forces the
// lifecycle path. It is stopped when the test ends.
func (e *env) cluster(opts Options, virtAPI bool, tune ...func(*Cluster)) *Cluster {
	e.t.Helper()
	c := New(e.kube, e.kv, nil, opts)
	c.SetVirtAPI(virtAPI)
	c.Tasks.Interval = 20 * time.Millisecond
	for _, f := range tune {
		f(c)
	}
	ctx, cancel := context.WithTimeout(e.ctx, waitTimeout)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		e.t.Fatalf("Start: %v", err)
	}
	e.t.Cleanup(c.Stop)
	return c
}

func (e *env) getVM(ns, name string) (*kubevirtv1.VirtualMachine, error) {
	return e.kv.KubevirtV1().VirtualMachines(ns).Get(e.ctx, name, metav1.GetOptions{})
}

func (e *env) mustGetVM(ns, name string) *kubevirtv1.VirtualMachine {
	e.t.Helper()
	vm, err := e.getVM(ns, name)
	if err != nil {
		e.t.Fatalf("get VM %s/%s: %v", ns, name, err)
	}
	return vm
}

// recreate deletes the VM ns/name, waits until the API no longer has it and
// creates a namesake from the same spec; it returns the namesake.
func (e *env) recreate(ns, name string) *kubevirtv1.VirtualMachine {
	e.t.Helper()
	old := e.mustGetVM(ns, name)
	if err := e.kv.KubevirtV1().VirtualMachines(ns).Delete(e.ctx, name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatalf("delete %s/%s: %v", ns, name, err)
	}
	eventually(e.t, "the VM to be gone from the API", func() (bool, string) {
		_, err := e.getVM(ns, name)
		return apierrors.IsNotFound(err), errString(err)
	})
	fresh := &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: old.Labels, Annotations: old.Annotations},
		Spec:       *old.Spec.DeepCopy(),
	}
	created, err := e.kv.KubevirtV1().VirtualMachines(ns).Create(e.ctx, fresh, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("recreate %s/%s: %v", ns, name, err)
	}
	if created.UID == old.UID || created.UID == "" {
		e.t.Fatalf("namesake has UID %q, old one %q", created.UID, old.UID)
	}
	return created
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func mustGuest(t *testing.T, c *Cluster, vmid int) Guest {
	t.Helper()
	g, err := c.Guest(vmid)
	if err != nil {
		t.Fatalf("Guest(%d): %v", vmid, err)
	}
	return g
}

// vmiState describes the cached instance of vmid.
func vmiState(c *Cluster, vmid int) string {
	g, err := c.Guest(vmid)
	if err != nil {
		return err.Error()
	}
	if g.InstanceMeta() == nil {
		return "no VMI"
	}
	s := string(g.VMI().UID) + " " + string(g.VMI().Status.Phase)
	if translate.VMIPaused(g.VMI()) {
		s += " paused"
	}
	if g.VMI().DeletionTimestamp != nil {
		s += " deleting"
	}
	return s
}

func vmiRunning(c *Cluster, vmid int) (bool, string) {
	g, err := c.Guest(vmid)
	ok := err == nil && g.VMI() != nil && g.VMI().Status.Phase == kubevirtv1.Running && g.VMI().DeletionTimestamp == nil
	return ok, vmiState(c, vmid)
}

func waitRunning(t *testing.T, c *Cluster, vmid int) Guest {
	t.Helper()
	eventually(t, "the VMI to run", func() (bool, string) { return vmiRunning(c, vmid) })
	return mustGuest(t, c, vmid)
}

// homeNodeFor computes the expected home node independently of homeNode:
// FNV-1a 32 of the UID over the sorted PVE node names.
func homeNodeFor(uid string, names []string) string {
	if len(names) == 0 {
		return "pve"
	}
	names = append([]string(nil), names...)
	sort.Strings(names)
	h := fnv.New32a()
	_, _ = h.Write([]byte(uid))
	return names[h.Sum32()%uint32(len(names))]
}

func lastLine(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	return lines[len(lines)-1]
}

func fallback(ns, name string) int { return translate.FallbackVMID(ns, name, 0) }

func joinKeys(gs []Guest) string {
	var s []string
	for _, g := range gs {
		s = append(s, g.Namespace()+"/"+g.Name())
	}
	return strings.Join(s, ",")
}
