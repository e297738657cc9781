package testenv

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"
	snapshotv1 "kubevirt.io/api/snapshot/v1beta1"
	"kubevirt.io/client-go/kubevirt"
	kvcorev1 "kubevirt.io/client-go/kubevirt/typed/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testutil"
)

// handlerCall is one request virt-api made to the stand-in virt-handler.
type handlerCall struct{ method, path, clientCN string }

// recordingHandler plays virt-handler: it records every call and echoes
// the console websocket.
type recordingHandler struct {
	mu    sync.Mutex
	calls []handlerCall
}

func (h *recordingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cn := ""
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		cn = r.TLS.PeerCertificates[0].Subject.CommonName
	}
	h.mu.Lock()
	h.calls = append(h.calls, handlerCall{r.Method, r.URL.Path, cn})
	h.mu.Unlock()
	if strings.HasSuffix(r.URL.Path, "/console") {
		up := websocket.Upgrader{Subprotocols: []string{"plain.kubevirt.io"}}
		conn, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer conn.Close()
		for {
			typ, b, err := conn.ReadMessage()
			if err != nil {
				return
			}
			if err := conn.WriteMessage(typ, b); err != nil {
				return
			}
		}
	}
	w.WriteHeader(http.StatusOK)
}

func (h *recordingHandler) find(method, suffix string) (handlerCall, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.calls {
		if c.method == method && strings.HasSuffix(c.path, suffix) {
			return c, true
		}
	}
	return handlerCall{}, false
}

// TestVirtAPI runs KubeVirt's own virt-api in the test cluster: its
// webhooks admit and deny, its subresources are served through
// kube-apiserver's aggregator with RBAC, and it reaches the stand-in
// virt-handler with mutual TLS.
func TestVirtAPI(t *testing.T) {
	h := &recordingHandler{}
	e := StartT(t, Options{
		Users:          []User{{Name: "alice", Groups: []string{"pve-admins"}}, {Name: "bob"}},
		Seed:           true,
		VirtAPI:        true,
		NewVirtHandler: func(*Env) http.Handler { return h },
	})
	ctx := context.Background()
	_, apiPid := e.PIDs()
	virtAPIPid := e.virtAPI.proc.pid()
	t.Logf("started in %v; RSS kube-apiserver %d MiB, virt-api %d MiB", e.StartDuration.Round(time.Millisecond),
		rssMiB(apiPid), rssMiB(virtAPIPid))
	ns := e.Namespace(t, "vms")
	bind(t, e, ns, "pve-admins-edit", "kubevirt.io:edit", rbacv1.Subject{Kind: "Group", APIGroup: rbacv1.GroupName, Name: "pve-admins"})
	vms := e.KubeVirt.KubevirtV1().VirtualMachines(ns)

	t.Run("webhooks", func(t *testing.T) {
		vm, err := vms.Create(ctx, webhookProbeVM(false), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if fw := vm.Spec.Template.Spec.Domain.Firmware; fw == nil || fw.UUID == "" || fw.Serial == "" {
			t.Errorf("the mutator gave no firmware UUID and serial: %+v", fw)
		}
		bad := webhookProbeVM(true)
		bad.Name = "bad"
		_, err = vms.Create(ctx, bad, metav1.CreateOptions{})
		const want = `admission webhook "virtualmachine-validator.kubevirt.io" denied the request`
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "no-such-volume") {
			t.Errorf("create with a disk without volume = %v, want 422 %s", err, want)
		}
	})

	t.Run("start through the aggregator", func(t *testing.T) {
		alice := kubevirt.NewForConfigOrDie(e.ConfigFor("alice"))
		if err := alice.KubevirtV1().VirtualMachines(ns).Start(ctx, "testenv-webhook-probe", &v1.StartOptions{}); err != nil {
			t.Fatalf("alice start: %v", err)
		}
		vm, err := vms.Get(ctx, "testenv-webhook-probe", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rs := vm.Spec.RunStrategy; rs == nil || *rs != v1.RunStrategyAlways {
			t.Errorf("after start runStrategy = %v, want Always (virt-api's patch)", rs)
		}
		err = alice.KubevirtV1().VirtualMachines(ns).Start(ctx, "testenv-webhook-probe", &v1.StartOptions{})
		if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "Always does not support manual start requests") {
			t.Errorf("second start = %v, want virt-api's 409", err)
		}
		bob := kubevirt.NewForConfigOrDie(e.ConfigFor("bob"))
		if err := bob.KubevirtV1().VirtualMachines(ns).Stop(ctx, "testenv-webhook-probe", &v1.StopOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("bob stop = %v, want 403", err)
		}
	})

	// A running VMI on node-1, as virt-controller and virt-handler would
	// leave it (written as virt-controller, which may).
	ctrl := kubevirt.NewForConfigOrDie(e.ControllerConfig)
	vmi, err := ctrl.KubevirtV1().VirtualMachineInstances(ns).Create(ctx, &v1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "running"},
		Spec: v1.VirtualMachineInstanceSpec{Domain: v1.DomainSpec{
			Memory: &v1.Memory{Guest: ptr(resource.MustParse("1Gi"))},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vmi.Status.Phase = v1.Running
	vmi.Status.NodeName = "node-1"
	if _, err := ctrl.KubevirtV1().VirtualMachineInstances(ns).Update(ctx, vmi, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("pause reaches virt-handler", func(t *testing.T) {
		if err := e.KubeVirt.KubevirtV1().VirtualMachineInstances(ns).Pause(ctx, "running", &v1.PauseOptions{}); err != nil {
			t.Fatal(err)
		}
		call, ok := h.find(http.MethodPut, "/v1/namespaces/"+ns+"/virtualmachineinstances/running/pause")
		if !ok {
			t.Fatalf("virt-handler got no pause; calls %v", h.calls)
		}
		if call.clientCN != "kubevirt.io:system:client:virt-handler" {
			t.Errorf("virt-api's client certificate CN = %q", call.clientCN)
		}
		err := e.KubeVirt.KubevirtV1().VirtualMachineInstances(ns).Pause(ctx, "testenv-webhook-probe", &v1.PauseOptions{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("pause without a VMI = %v, want 404", err)
		}
	})

	t.Run("console stream", func(t *testing.T) {
		stream, err := kvcorev1.AsyncSubresourceHelper(e.Config, "virtualmachineinstances", ns, "running", "console", url.Values{})
		if err != nil {
			t.Fatal(err)
		}
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		done := make(chan error, 1)
		go func() { done <- stream.Stream(kvcorev1.StreamOptions{In: inR, Out: outW}) }()
		if _, err := inW.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 5)
		if _, err := io.ReadFull(outR, got); err != nil || !bytes.Equal(got, []byte("hello")) {
			t.Errorf("echo = %q, %v", got, err)
		}
		inW.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("stream did not end")
		}
	})

	t.Run("Snapshot feature gate", func(t *testing.T) {
		snap := &snapshotv1.VirtualMachineSnapshot{
			ObjectMeta: metav1.ObjectMeta{Name: "snap"},
			Spec: snapshotv1.VirtualMachineSnapshotSpec{Source: corev1.TypedLocalObjectReference{
				APIGroup: ptr("kubevirt.io"), Kind: "VirtualMachine", Name: "testenv-webhook-probe"}},
		}
		dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
		snaps := e.KubeVirt.SnapshotV1beta1().VirtualMachineSnapshots(ns)
		_, err := snaps.Create(ctx, snap, dry)
		if err == nil || !strings.Contains(err.Error(), "snapshot feature gate not enabled") {
			t.Fatalf("snapshot without the gate = %v", err)
		}
		if err := e.SetFeatureGates(ctx, "Snapshot"); err != nil {
			t.Fatal(err)
		}
		testutil.WaitNoError(t, 10*time.Second, "the Snapshot gate to take effect", func() error { _, err := snaps.Create(ctx, snap, dry); return err })
	})

	t.Run("a view without virt-api", func(t *testing.T) {
		p, err := e.NewProxy()
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		p.HideGroup(SubresourceGroup)
		kv := kubevirt.NewForConfigOrDie(p.Config(AdminUser))
		if err := kv.KubevirtV1().VirtualMachines(ns).Stop(ctx, "testenv-webhook-probe", &v1.StopOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("stop without virt-api = %v, want 404", err)
		}
		groups, err := kv.Discovery().ServerGroups()
		if err != nil || hasGroup(groups, SubresourceGroup) || !hasGroup(groups, "kubevirt.io") {
			t.Errorf("discovery without virt-api: %v", err)
		}
		groups, err = e.KubeVirt.Discovery().ServerGroups()
		if err != nil || !hasGroup(groups, SubresourceGroup) {
			t.Errorf("discovery with virt-api lacks %s: %v", SubresourceGroup, err)
		}
	})

	e.Stop()
	if alive(virtAPIPid) {
		t.Errorf("virt-api (%d) still runs after Stop", virtAPIPid)
	}
}

func TestKubeVirtVersionMatchesScript(t *testing.T) {
	script, err := findScript()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("\nkubevirt=%s\n", KubeVirtVersion); !strings.Contains(string(b), want) {
		t.Errorf("build-binaries.sh does not build KubeVirt %s (no %q)", KubeVirtVersion, strings.TrimSpace(want))
	}
}
