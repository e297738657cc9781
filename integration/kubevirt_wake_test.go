package integration

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
	"github.com/caddy-proxmox/caddy-proxmox/kubevirtsim"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

const (
	wakeDeployFile  = "../deploy/caddy-wake.yaml"
	wakeTokenID     = "caddy-wake@pve!wake"
	wakeTokenSecret = "0d6c1f7e-4b8a-4e2f-9c3d-5a6b7c8d9e0f"
)

// wakeRBAC creates deploy/caddy-wake.yaml's Role and RoleBinding (the
// wake token's only Kubernetes rights) in namespace ns.
func wakeRBAC(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	var role, binding int
	for _, o := range deployObjectsOf(t, wakeDeployFile) {
		switch o.GetKind() {
		case "Role":
			var r rbacv1.Role
			fromUnstructured(t, o, &r)
			r.Namespace = ns
			if _, err := env.Kube.RbacV1().Roles(ns).Create(ctx, &r, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			role++
		case "RoleBinding":
			var b rbacv1.RoleBinding
			fromUnstructured(t, o, &b)
			b.Namespace = ns
			if _, err := env.Kube.RbacV1().RoleBindings(ns).Create(ctx, &b, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			binding++
		case "ConfigMap":
			cf, _, _ := unstructured.NestedString(o.Object, "data", "Caddyfile")
			if _, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cf), nil); err != nil {
				t.Fatalf("%s's Caddyfile does not adapt: %v", wakeDeployFile, err)
			}
		}
	}
	if role != 1 || binding != 1 {
		t.Fatalf("%s: %d Roles and %d RoleBindings, want one of each", wakeDeployFile, role, binding)
	}
}

func fromUnstructured(t *testing.T, o *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
		t.Fatal(err)
	}
}

// TestWakeKubeVirtVMThroughOwnAPI: ./caddy serves the Proxmox VE API on
// the real apiserver to itself, and its proxmox app wakes a KubeVirt VM
// made with kubectl (no vmid, no MAC, no address in the Caddyfile) when
// a request comes: its address is the VMI's pod-network address, read
// through the API's guest agent call; the request reaches the VM's
// service there; the VM is stopped after idle_timeout. Every call is made
// as the wake token's Kubernetes user, with deploy/caddy-wake.yaml's
// least-privilege Role.
func TestWakeKubeVirtVMThroughOwnAPI(t *testing.T) {
	wakeKubeVirtVM(t, nil)
}

// TestWakeKubeVirtVMStaticCloudInit: the same with a VM as
// proxmox_api stores one made through it (Terraform, Ansible): named
// web, its NIC PVE's net0 (matched by its MAC), agent: 1, and cloud-init's ipconfig0 is
// a static address on the pod network: KubeVirt's masquerade address
// 10.0.2.2, the guest's address inside its pod, not one Caddy can reach.
// The guest agent's address for that MAC (the pod IP) is the one
// proxied to.
func TestWakeKubeVirtVMStaticCloudInit(t *testing.T) {
	wakeKubeVirtVM(t, func(vm *kubevirtv1.VirtualMachine) {
		vm.Annotations = map[string]string{
			translate.AnnotationName:   "web",
			translate.AnnotationConfig: `{"agent":"1","ipconfig0":"ip=10.0.2.2/24,gw=10.0.2.1"}`,
		}
		spec := &vm.Spec.Template.Spec
		spec.Domain.Devices.Interfaces[0].Name = "net0"
		spec.Domain.Devices.Interfaces[0].MacAddress = "02:7a:c3:00:00:01"
		spec.Networks[0].Name = "net0"
	})
}

// wakeKubeVirtVM runs the wake of a kubectl-made VM "web", changed by
// customize, through ./caddy's own proxmox_api.
func wakeKubeVirtVM(t *testing.T, customize func(vm *kubevirtv1.VirtualMachine)) {
	ctx := context.Background()
	ns := env.Namespace(t, "wake")
	wakeRBAC(t, ns)

	// The VM's service, on the pod IP the stand-in reports for its pod.
	const podIP = "127.79.0.2"
	ln, err := net.Listen("tcp", podIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	svcPort := ln.Addr().(*net.TCPAddr).Port
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from the VM at %s\n", r.Host)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	// A VM as kubectl makes it: stopped, with the memory every instance
	// needs (virt-api refuses to create one without), on the pod network
	// with the default masquerade binding, with a guest agent.
	rs := kubevirtv1.RunStrategyHalted
	guest := resource.MustParse("128Mi")
	vm := &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: kubevirtv1.VirtualMachineSpec{RunStrategy: &rs, Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
				kubevirtsim.AnnotationAgent: "true",
				kubevirtsim.AnnotationPodIP: podIP,
			}},
			Spec: kubevirtv1.VirtualMachineInstanceSpec{
				Domain: kubevirtv1.DomainSpec{
					Memory: &kubevirtv1.Memory{Guest: &guest},
					Devices: kubevirtv1.Devices{Interfaces: []kubevirtv1.Interface{{
						Name: "default", InterfaceBindingMethod: kubevirtv1.InterfaceBindingMethod{Masquerade: &kubevirtv1.InterfaceMasquerade{}},
					}}},
				},
				Networks: []kubevirtv1.Network{{Name: "default", NetworkSource: kubevirtv1.NetworkSource{Pod: &kubevirtv1.PodNetwork{}}}},
			},
		}},
	}
	if customize != nil {
		customize(vm)
	}
	if _, err := env.KubeVirt.KubevirtV1().VirtualMachines(ns).Create(ctx, vm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.KubeVirt.KubevirtV1().VirtualMachines(ns).Delete(ctx, "web", metav1.DeleteOptions{}) })

	dir := t.TempDir()
	apiPort, sitePort := testcaddy.FreePort(t), testcaddy.FreePort(t)
	cfg := fmt.Sprintf(`{
	admin off
	storage file_system %[1]s
	servers {
		protocols h1
	}
	proxmox {
		cluster kubevirt {
			url http://127.0.0.1:%[2]d
			token_id %[3]s
			token_secret %[4]s
			poll_interval 200ms
			request_timeout 5s
		}
	}
}
http://127.0.0.1:%[2]d {
	bind 127.0.0.1
	proxmox_api {
		kubeconfig %[5]s
		namespace %[6]s
		impersonate
		token %[3]s %[4]s
		auth_failure_delay 0s
	}
}
http://127.0.0.1:%[7]d {
	bind 127.0.0.1
	respond /ready "up"
	proxmox_wake kubevirt/web {
		port %[8]d
		idle_timeout 2s
		wake_timeout 60s
		hold_timeout 60s
		task_poll_interval 50ms
		probe_interval 50ms
	}
	reverse_proxy {
		dynamic proxmox
	}
}
`, dir, apiPort, wakeTokenID, wakeTokenSecret, env.Kubeconfig, ns, sitePort, svcPort)
	p := testcaddy.StartProcess(t, dir, cfg)
	base := fmt.Sprintf("http://127.0.0.1:%d", sitePort)
	p.WaitReady(base + "/ready")
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\n./caddy:\n%s", append(args, p.Output())...)
	}

	// A request to the stopped VM wakes it and is answered by its service.
	req, _ := http.NewRequest("GET", base+"/", nil)
	req.Header.Set("Accept", "application/json")
	began := time.Now()
	res, err := testcaddy.Client().Do(req)
	if err != nil {
		fail("cold request: %v", err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	served := time.Now()
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(string(body), "hello from the VM") || res.Header.Get("X-Proxmox-Wake") != "cold" {
		fail("cold request: %d %s %q", res.StatusCode, res.Header.Get("X-Proxmox-Wake"), body)
	}
	t.Logf("cold start through the API: %v", served.Sub(began))
	vmi, err := env.KubeVirt.KubevirtV1().VirtualMachineInstances(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil || vmi.Status.Phase != kubevirtv1.Running {
		fail("after the wake: VMI %v %v", vmi.Status.Phase, err)
	}

	// Idle for idle_timeout, the VM is stopped: its instance goes.
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := env.KubeVirt.KubevirtV1().VirtualMachineInstances(ns).Get(ctx, "web", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			fail("VM still running 60s after its last request")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if idle := time.Since(served); idle < 2*time.Second {
		fail("stopped %v after the last request, before idle_timeout (2s)", idle)
	}
	got, err := env.KubeVirt.KubevirtV1().VirtualMachines(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rs, _ := got.RunStrategy(); rs == kubevirtv1.RunStrategyAlways {
		fail("run strategy %s after the idle stop: a shutdown inside the guest would restart it", rs)
	}
}
