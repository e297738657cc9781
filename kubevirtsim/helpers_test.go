package kubevirtsim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubevirt"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testutil"
)

const (
	testStartDelay = 50 * time.Millisecond
	testStopDelay  = 150 * time.Millisecond
	waitTimeout    = 15 * time.Second
	testNS         = "default"
)

// env is a fake cluster, optionally with a running controller.
type env struct {
	t   *testing.T
	ctx context.Context
	k8s kubernetes.Interface
	kv  kubevirt.Interface
	c   *Controller
	sub *Subresources
}

// newClients makes the clients a test environment runs against. The tests
// use the fakes; a build-tagged file may point this at a real API server
// with the KubeVirt CRDs (tests then need their own namespace each, and the
// tests in fake_test.go are about the fakes only).
var newClients = func(t *testing.T, objs ...runtime.Object) (kubernetes.Interface, kubevirt.Interface) {
	return NewFakeClients(objs...)
}

// newEnv returns clients holding objs plus three ready test nodes.
func newEnv(t *testing.T, objs ...runtime.Object) *env {
	t.Helper()
	objs = append([]runtime.Object{testNode("node-a"), testNode("node-b"), testNode("node-c")}, objs...)
	k8s, kv := newClients(t, objs...)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &env{t: t, ctx: ctx, k8s: k8s, kv: kv, sub: &Subresources{KV: kv}}
}

// run starts a controller with opts (test delays when zero) until the test ends.
func (e *env) run(opts Options) *env {
	e.t.Helper()
	if opts.StartDelay == 0 {
		opts.StartDelay = testStartDelay
	}
	if opts.StopDelay == 0 {
		opts.StopDelay = testStopDelay
	}
	e.c = NewController(e.kv, e.k8s, opts)
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- e.c.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				e.t.Errorf("controller Run: %v", err)
			}
		case <-time.After(waitTimeout):
			e.t.Errorf("controller did not stop")
		}
	})
	return e
}

// eventually is testutil.Wait with this package's timeout.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	testutil.Wait(t, waitTimeout, what, cond)
}

// synced waits until the controller has reconciled the VM after every
// write made so far (SyncBarrier) and returns the VM as it left it. Tests
// call it before asserting that the controller did not act.
func (e *env) synced(name string) *virtv1.VirtualMachine {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, waitTimeout)
	defer cancel()
	vm, err := SyncBarrier(ctx, e.kv, testNS, name)
	if err != nil {
		e.t.Fatal(err)
	}
	return vm
}

func (e *env) createVM(vm *virtv1.VirtualMachine) *virtv1.VirtualMachine {
	e.t.Helper()
	created, err := e.kv.KubevirtV1().VirtualMachines(vm.Namespace).Create(e.ctx, vm, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create VM: %v", err)
	}
	return created
}

func (e *env) getVM(name string) *virtv1.VirtualMachine {
	e.t.Helper()
	vm, err := e.kv.KubevirtV1().VirtualMachines(testNS).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("get VM %s: %v", name, err)
	}
	return vm
}

func (e *env) getVMI(name string) *virtv1.VirtualMachineInstance {
	e.t.Helper()
	vmi, err := e.kv.KubevirtV1().VirtualMachineInstances(testNS).Get(e.ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		e.t.Fatalf("get VMI %s: %v", name, err)
	}
	return vmi
}

// waitVM waits until the VM satisfies cond.
func (e *env) waitVM(name, what string, cond func(*virtv1.VirtualMachine) bool) *virtv1.VirtualMachine {
	e.t.Helper()
	var vm *virtv1.VirtualMachine
	eventually(e.t, name+": "+what, func() (bool, string) {
		vm = e.getVM(name)
		return cond(vm), describeVM(vm)
	})
	return vm
}

func (e *env) waitPrintable(name string, want virtv1.VirtualMachinePrintableStatus) *virtv1.VirtualMachine {
	e.t.Helper()
	return e.waitVM(name, "printableStatus "+string(want), func(vm *virtv1.VirtualMachine) bool {
		return vm.Status.PrintableStatus == want
	})
}

// waitVMI waits until a VMI exists and satisfies cond.
func (e *env) waitVMI(name, what string, cond func(*virtv1.VirtualMachineInstance) bool) *virtv1.VirtualMachineInstance {
	e.t.Helper()
	var vmi *virtv1.VirtualMachineInstance
	eventually(e.t, name+" VMI: "+what, func() (bool, string) {
		vmi = e.getVMI(name)
		if vmi == nil {
			return false, "no VMI"
		}
		return cond(vmi), describeVMI(vmi)
	})
	return vmi
}

func (e *env) waitRunning(name string) *virtv1.VirtualMachineInstance {
	e.t.Helper()
	vmi := e.waitVMI(name, "Running", func(vmi *virtv1.VirtualMachineInstance) bool { return vmi.IsRunning() })
	e.waitPrintable(name, virtv1.VirtualMachineStatusRunning)
	return vmi
}

func (e *env) waitNoVMI(name string) {
	e.t.Helper()
	eventually(e.t, name+" VMI gone", func() (bool, string) {
		vmi := e.getVMI(name)
		if vmi == nil {
			return true, ""
		}
		return false, describeVMI(vmi)
	})
}

// waitStopped waits until the controller has reported the VM stopped
// without a VMI: a reconcile pass saw no VMI and decided not to start one.
func (e *env) waitStopped(name string) *virtv1.VirtualMachine {
	e.t.Helper()
	vm := e.waitVM(name, "Stopped without VMI", func(vm *virtv1.VirtualMachine) bool {
		return vm.Status.PrintableStatus == virtv1.VirtualMachineStatusStopped && !vm.Status.Created
	})
	if vmi := e.getVMI(name); vmi != nil {
		e.t.Fatalf("VM %s reported Stopped/not created but a VMI exists: %s", name, describeVMI(vmi))
	}
	return vm
}

func describeVM(vm *virtv1.VirtualMachine) string {
	rs := "<nil>"
	if vm.Spec.RunStrategy != nil {
		rs = string(*vm.Spec.RunStrategy)
	}
	var conds []string
	for _, c := range vm.Status.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s(%s)", c.Type, c.Status, c.Reason))
	}
	return fmt.Sprintf("spec.runStrategy=%s printable=%s created=%v ready=%v status.runStrategy=%s requests=%v conds=%v",
		rs, vm.Status.PrintableStatus, vm.Status.Created, vm.Status.Ready, vm.Status.RunStrategy, vm.Status.StateChangeRequests, conds)
}

func describeVMI(vmi *virtv1.VirtualMachineInstance) string {
	var conds []string
	for _, c := range vmi.Status.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s(%s)", c.Type, c.Status, c.Reason))
	}
	return fmt.Sprintf("uid=%s phase=%s node=%s deleting=%v finalizers=%v conds=%v",
		vmi.UID, vmi.Status.Phase, vmi.Status.NodeName, vmi.DeletionTimestamp != nil, vmi.Finalizers, conds)
}

// requireStatus asserts err is an API status error with code and a message
// containing msg.
func requireStatus(t *testing.T, err error, code int32, msg string) {
	t.Helper()
	if err == nil {
		t.Fatalf("expected a %d error containing %q, got nil", code, msg)
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		t.Fatalf("expected an API status error, got %T: %v", err, err)
	}
	if st.Status().Code != code || !strings.Contains(st.Status().Message, msg) {
		t.Fatalf("expected %d %q, got %d %q", code, msg, st.Status().Code, st.Status().Message)
	}
}

func testNode(name string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
}

// testVM is a small VM with one masquerade interface and a container disk.
func testVM(name string, strategy virtv1.VirtualMachineRunStrategy) *virtv1.VirtualMachine {
	return &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS},
		Spec: virtv1.VirtualMachineSpec{
			RunStrategy: &strategy,
			Template: &virtv1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      map[string]string{"kubevirt.io/domain": name},
					Annotations: map[string]string{"example.com/note": "from-template"},
				},
				Spec: virtv1.VirtualMachineInstanceSpec{
					Domain: virtv1.DomainSpec{
						CPU:    &virtv1.CPU{Sockets: 1, Cores: 2, Threads: 1},
						Memory: &virtv1.Memory{Guest: ptr(resource.MustParse("1Gi"))},
						Devices: virtv1.Devices{
							Interfaces: []virtv1.Interface{{Name: "net0", MacAddress: "BC:24:11:00:00:01",
								InterfaceBindingMethod: virtv1.InterfaceBindingMethod{Masquerade: &virtv1.InterfaceMasquerade{}}}},
						},
					},
					Networks: []virtv1.Network{{Name: "net0", NetworkSource: virtv1.NetworkSource{Pod: &virtv1.PodNetwork{}}}},
					Volumes: []virtv1.Volume{{Name: "root", VolumeSource: virtv1.VolumeSource{
						ContainerDisk: &virtv1.ContainerDiskSource{Image: "quay.io/containerdisks/debian:12"}}}},
				},
			},
		},
	}
}

func withAgent(vm *virtv1.VirtualMachine) *virtv1.VirtualMachine {
	vm.Spec.Template.ObjectMeta.Annotations[AnnotationAgent] = "true"
	return vm
}

// statusRecorder records every printableStatus a VM goes through, as seen by
// an informer on the clientset.
type statusRecorder struct {
	mu   sync.Mutex
	seen map[string][]virtv1.VirtualMachinePrintableStatus
}

func recordStatuses(e *env) *statusRecorder {
	e.t.Helper()
	r := &statusRecorder{seen: map[string][]virtv1.VirtualMachinePrintableStatus{}}
	inf := NewVirtualMachineInformer(e.kv, metav1.NamespaceAll, 0)
	rec := func(obj any) {
		vm, ok := obj.(*virtv1.VirtualMachine)
		if !ok {
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		s := r.seen[vm.Name]
		if len(s) == 0 || s[len(s)-1] != vm.Status.PrintableStatus {
			r.seen[vm.Name] = append(s, vm.Status.PrintableStatus)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: rec, UpdateFunc: func(_, o any) { rec(o) }}); err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() { inf.RunWithContext(ctx); close(done) }()
	e.t.Cleanup(func() { cancel(); <-done })
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		e.t.Fatal("recorder cache did not sync")
	}
	return r
}

func (r *statusRecorder) statuses(name string) []virtv1.VirtualMachinePrintableStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]virtv1.VirtualMachinePrintableStatus(nil), r.seen[name]...)
}

// requireSequence asserts want appears in order (not necessarily adjacent)
// in the recorded statuses.
func (r *statusRecorder) requireSequence(t *testing.T, name string, want ...virtv1.VirtualMachinePrintableStatus) {
	t.Helper()
	var got []virtv1.VirtualMachinePrintableStatus
	eventually(t, fmt.Sprintf("%s printable sequence %v", name, want), func() (bool, string) {
		got = r.statuses(name)
		i := 0
		for _, s := range got {
			if i < len(want) && s == want[i] {
				i++
			}
		}
		return i == len(want), fmt.Sprint(got)
	})
}
