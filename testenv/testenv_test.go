package testenv

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubevirt"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testutil"
)

func TestEnv(t *testing.T) {
	var ctrlRan, ctrlStopped atomic.Bool
	e := StartT(t, Options{
		Users: []User{{Name: "alice", Groups: []string{"pve-admins"}}, {Name: "bob"}},
		Seed:  true,
		Controller: func(ctx context.Context, kube kubernetes.Interface, kv kubevirt.Interface) error {
			if _, err := kube.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
				return err
			}
			ctrlRan.Store(true)
			<-ctx.Done()
			ctrlStopped.Store(true)
			return nil
		},
	})
	ctx := context.Background()
	etcdPid, apiPid := e.PIDs()
	t.Logf("started in %v; RSS etcd %d MiB, kube-apiserver %d MiB", e.StartDuration.Round(time.Millisecond),
		rssMiB(etcdPid), rssMiB(apiPid))

	ns := e.Namespace(t, "vms")

	t.Run("readyz", func(t *testing.T) {
		for name, cfg := range map[string]*rest.Config{"proxy": e.Config, "direct": e.DirectConfig} {
			kube := kubernetes.NewForConfigOrDie(cfg)
			b, err := kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			if err != nil || string(b) != "ok" {
				t.Errorf("%s /readyz = %q, %v", name, b, err)
			}
		}
	})

	t.Run("VirtualMachine status subresource", func(t *testing.T) {
		vms := e.KubeVirt.KubevirtV1().VirtualMachines(ns)
		vm := &v1.VirtualMachine{
			ObjectMeta: metav1.ObjectMeta{Name: "vm1", Labels: map[string]string{"vmid": "100"}},
			Spec: v1.VirtualMachineSpec{
				RunStrategy: ptr(v1.RunStrategyHalted),
				Template: &v1.VirtualMachineInstanceTemplateSpec{Spec: v1.VirtualMachineInstanceSpec{
					Domain: v1.DomainSpec{CPU: &v1.CPU{Cores: 2}},
				}},
			},
		}
		if _, err := vms.Create(ctx, vm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got, err := vms.Get(ctx, "vm1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.RunStrategy == nil || *got.Spec.RunStrategy != v1.RunStrategyHalted || got.Spec.Template.Spec.Domain.CPU.Cores != 2 {
			t.Fatalf("spec did not round-trip: %+v", got.Spec)
		}
		got.Status.PrintableStatus = v1.VirtualMachineStatusStopped
		got.Status.Ready = false
		got.Spec.RunStrategy = ptr(v1.RunStrategyAlways) // ignored by /status
		if _, err := vms.UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		got, _ = vms.Get(ctx, "vm1", metav1.GetOptions{})
		if got.Status.PrintableStatus != v1.VirtualMachineStatusStopped {
			t.Errorf("UpdateStatus lost status: %+v", got.Status)
		}
		if *got.Spec.RunStrategy != v1.RunStrategyHalted {
			t.Errorf("UpdateStatus changed spec: %v", *got.Spec.RunStrategy)
		}
		// And Update ignores status (the status subresource is enabled).
		got.Status.PrintableStatus = v1.VirtualMachineStatusRunning
		got, err = vms.Update(ctx, got, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.PrintableStatus != v1.VirtualMachineStatusStopped {
			t.Errorf("Update changed status to %q", got.Status.PrintableStatus)
		}
	})

	t.Run("VirtualMachineInstance has no status subresource", func(t *testing.T) {
		vmis := e.KubeVirt.KubevirtV1().VirtualMachineInstances(ns)
		vmi, err := vmis.Create(ctx, &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm1"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		vmi.Status.Phase = v1.Running
		vmi.Status.NodeName = "node-1"
		vmi.Status.Interfaces = []v1.VirtualMachineInstanceNetworkInterface{{Name: "default", IP: "10.244.0.10"}}
		if _, err := vmis.Update(ctx, vmi, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		got, err := vmis.Get(ctx, "vm1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Phase != v1.Running || got.Status.NodeName != "node-1" || len(got.Status.Interfaces) != 1 {
			t.Errorf("status not written by Update: %+v", got.Status)
		}
		err = e.KubeVirt.KubevirtV1().RESTClient().Put().Namespace(ns).Resource("virtualmachineinstances").
			Name("vm1").SubResource("status").Body(got).Do(ctx).Error()
		if !apierrors.IsNotFound(err) {
			t.Errorf("PUT virtualmachineinstances/status = %v, want 404", err)
		}
	})

	t.Run("other CRDs", func(t *testing.T) {
		if _, err := e.KubeVirt.SnapshotV1beta1().VirtualMachineSnapshots(ns).List(ctx, metav1.ListOptions{}); err != nil {
			t.Error(err)
		}
		if _, err := e.KubeVirt.CloneV1beta1().VirtualMachineClones(ns).List(ctx, metav1.ListOptions{}); err != nil {
			t.Error(err)
		}
		if _, err := e.KubeVirt.InstancetypeV1beta1().VirtualMachineClusterInstancetypes().List(ctx, metav1.ListOptions{}); err != nil {
			t.Error(err)
		}
		if _, err := e.KubeVirt.KubevirtV1().VirtualMachineInstanceMigrations(ns).List(ctx, metav1.ListOptions{}); err != nil {
			t.Error(err)
		}
		b, err := e.Kube.Discovery().RESTClient().Get().AbsPath("/apis/cdi.kubevirt.io/v1beta1/namespaces/" + ns + "/datavolumes").DoRaw(ctx)
		if err != nil || !strings.Contains(string(b), "DataVolumeList") {
			t.Errorf("datavolumes: %s %v", b, err)
		}
	})

	t.Run("seed", func(t *testing.T) {
		nodes, err := e.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil || len(nodes.Items) != len(SeedNodes) {
			t.Fatalf("nodes: %v %v", nodes, err)
		}
		for _, n := range nodes.Items {
			if n.Status.Capacity.Cpu().IsZero() || len(n.Status.Conditions) == 0 || n.Status.Conditions[0].Status != corev1.ConditionTrue {
				t.Errorf("node %s not Ready with capacity: %+v", n.Name, n.Status)
			}
		}
		scs, err := e.Kube.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{})
		if err != nil || len(scs.Items) != len(SeedStorageClasses) {
			t.Fatalf("storageclasses: %v %v", scs, err)
		}
	})

	t.Run("RBAC", func(t *testing.T) {
		bob := kubevirt.NewForConfigOrDie(e.ConfigFor("bob"))
		if _, err := bob.KubevirtV1().VirtualMachines(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("bob list VMs = %v, want 403", err)
		}
		alice := kubevirt.NewForConfigOrDie(e.ConfigFor("alice"))
		if _, err := alice.KubevirtV1().VirtualMachines(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("alice list VMs before binding = %v, want 403", err)
		}
		bind(t, e, ns, "pve-admins-edit", "kubevirt.io:edit", rbacv1.Subject{Kind: "Group", APIGroup: rbacv1.GroupName, Name: "pve-admins"})
		// RBAC changes reach the authorizer through an informer.
		testutil.WaitNoError(t, 10*time.Second, "alice's binding to take effect", func() error {
			_, err := alice.KubevirtV1().VirtualMachines(ns).List(ctx, metav1.ListOptions{})
			return err
		})
		// The built-in view role has the KubeVirt rules aggregated into it.
		bind(t, e, ns, "bob-view", "view", rbacv1.Subject{Kind: "User", APIGroup: rbacv1.GroupName, Name: "bob"})
		testutil.WaitNoError(t, 10*time.Second, "bob's binding to take effect", func() error {
			_, err := bob.KubevirtV1().VirtualMachines(ns).Get(ctx, "vm1", metav1.GetOptions{})
			return err
		})
		if err := bob.KubevirtV1().VirtualMachines(ns).Delete(ctx, "vm1", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("bob (view) delete VM = %v, want 403", err)
		}
		// Impersonation, as the plugin does it: admin acting as a member of pve-admins.
		carol := kubevirt.NewForConfigOrDie(e.ImpersonatingConfig("carol", "pve-admins"))
		if _, err := carol.KubevirtV1().VirtualMachines(ns).List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("impersonated carol (pve-admins) list VMs: %v", err)
		}
		dave := kubevirt.NewForConfigOrDie(e.ImpersonatingConfig("dave"))
		if _, err := dave.KubevirtV1().VirtualMachines(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("impersonated dave list VMs = %v, want 403", err)
		}
	})

	t.Run("no virt-api", func(t *testing.T) {
		p, err := e.NewProxy()
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		kube := kubernetes.NewForConfigOrDie(p.Config(AdminUser))
		_, err = kube.Discovery().RESTClient().Get().AbsPath("/apis/subresources.kubevirt.io/v1").DoRaw(ctx)
		if !apierrors.IsNotFound(err) {
			t.Errorf("GET /apis/subresources.kubevirt.io/v1 without virt-api = %v, want 404", err)
		}
		kv := kubevirt.NewForConfigOrDie(p.Config(AdminUser))
		if err := kv.KubevirtV1().VirtualMachines(ns).Start(ctx, "vm1", &v1.StartOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("start without virt-api = %v, want 404", err)
		}
		groups, err := kube.Discovery().ServerGroups()
		if err != nil || hasGroup(groups, SubresourceGroup) || !hasGroup(groups, "kubevirt.io") {
			t.Errorf("fallback discovery: %v", err)
		}
		// A kubeconfig file, as the plugin would be configured.
		cfg, err := clientcmd.BuildConfigFromFlags("", p.Kubeconfig("alice"))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Host != p.URL {
			t.Errorf("kubeconfig host %s, want %s", cfg.Host, p.URL)
		}
		if _, err := kubevirt.NewForConfigOrDie(cfg).KubevirtV1().VirtualMachines(ns).Get(ctx, "vm1", metav1.GetOptions{}); err != nil {
			t.Errorf("alice via kubeconfig: %v", err)
		}
	})

	t.Run("watch through the proxy", func(t *testing.T) {
		w, err := e.KubeVirt.KubevirtV1().VirtualMachines(ns).Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		if _, err := e.KubeVirt.KubevirtV1().VirtualMachines(ns).Create(ctx, &v1.VirtualMachine{
			ObjectMeta: metav1.ObjectMeta{Name: "watched"},
			Spec:       v1.VirtualMachineSpec{Template: &v1.VirtualMachineInstanceTemplateSpec{}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		timeout := time.After(10 * time.Second)
		for {
			select {
			case ev := <-w.ResultChan():
				if vm, ok := ev.Object.(*v1.VirtualMachine); ok && ev.Type == watch.Added && vm.Name == "watched" {
					return
				}
			case <-timeout:
				t.Fatal("no ADDED event through the proxy")
			}
		}
	})

	t.Run("kubeconfig", func(t *testing.T) {
		cfg, err := clientcmd.BuildConfigFromFlags("", e.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Host != e.ProxyURL {
			t.Errorf("admin kubeconfig host %s, want proxy %s", cfg.Host, e.ProxyURL)
		}
		if _, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
			t.Error(err)
		}
		if e.KubeconfigFor("bob") == e.Kubeconfig {
			t.Error("bob shares admin's kubeconfig")
		}
	})

	if !ctrlRan.Load() {
		t.Error("controller hook did not run")
	}

	// Stop leaves nothing behind.
	dir := e.Dir
	t0 := time.Now()
	e.Stop()
	t.Logf("stopped in %v", time.Since(t0).Round(time.Millisecond))
	for _, pid := range []int{etcdPid, apiPid} {
		if pid == 0 {
			t.Error("no pid recorded")
		} else if alive(pid) {
			t.Errorf("process %d still exists after Stop", pid)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("temp dir %s still exists: %v", dir, err)
	}
	if !ctrlStopped.Load() {
		t.Error("controller context was not cancelled by Stop")
	}
	if err := e.ControllerErr(); err != nil {
		t.Error(err)
	}
}

// TestBinariesMissingInCI checks that CI never builds or skips: a missing
// binary folder is an error.
func TestBinariesMissingInCI(t *testing.T) {
	binMu.Lock()
	saved := binDir
	binDir = ""
	binMu.Unlock()
	defer func() {
		binMu.Lock()
		binDir = saved
		binMu.Unlock()
	}()
	t.Setenv(EnvBinDir, t.TempDir())
	t.Setenv("CI", "true")
	_, err := Binaries(context.Background(), nil)
	if err == nil || !strings.Contains(err.Error(), "CI is set") {
		t.Fatalf("Binaries with CI and no binaries = %v, want an error", err)
	}
}

// TestManifests checks the generated KubeVirt and CDI manifests
// (kubevirt.yaml, cdi.yaml) and the embedded CDI roles.
func TestManifests(t *testing.T) {
	if testing.Short() && !envSet("CI") {
		t.Skip("needs the test binaries")
	}
	bin, err := Binaries(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := loadKubeVirtManifests(bin)
	if err != nil {
		t.Fatal(err)
	}
	status := map[string]bool{}
	for _, c := range m.crds {
		vs := c.Object["spec"].(map[string]any)["versions"].([]any)
		_, has := vs[0].(map[string]any)["subresources"]
		status[c.GetName()] = has
	}
	for name, want := range map[string]bool{
		"virtualmachines.kubevirt.io": true, "virtualmachineinstances.kubevirt.io": false,
		"virtualmachineinstancemigrations.kubevirt.io": true, "virtualmachinesnapshots.snapshot.kubevirt.io": true,
		"virtualmachinesnapshotcontents.snapshot.kubevirt.io": true, "virtualmachinerestores.snapshot.kubevirt.io": true,
		"virtualmachineclones.clone.kubevirt.io": true, "datavolumes.cdi.kubevirt.io": true,
		"virtualmachineclusterinstancetypes.instancetype.kubevirt.io": false, "kubevirts.kubevirt.io": true,
	} {
		got, ok := status[name]
		if !ok || got != want {
			t.Errorf("CRD %s: present %v, status subresource %v, want %v", name, ok, got, want)
		}
	}
	for _, name := range []string{"datasources.cdi.kubevirt.io", "storageprofiles.cdi.kubevirt.io", "cdis.cdi.kubevirt.io"} {
		if _, ok := status[name]; !ok {
			t.Errorf("CRD %s missing", name)
		}
	}
	names := map[string]bool{}
	for _, o := range m.base {
		names[o.GetKind()+" "+o.GetName()] = true
	}
	for _, o := range append(append([]*unstructured.Unstructured(nil), m.virtAPI...), m.cdiAPI...) {
		names[o.GetKind()+" "+o.GetName()] = true
	}
	for _, n := range []string{"ClusterRole kubevirt.io:admin", "ClusterRole kubevirt.io:edit", "ClusterRole kubevirt.io:view",
		"ClusterRole kubevirt.io:migrate", "ClusterRole cdi.kubevirt.io:edit", "ClusterRole cdi.kubevirt.io:config-reader",
		"ServiceAccount " + VirtAPIServiceAccount, "ServiceAccount " + VirtControllerServiceAccount,
		"ServiceAccount " + VirtHandlerServiceAccount, "Service virt-api",
		"APIService v1.subresources.kubevirt.io", "APIService v1alpha3.subresources.kubevirt.io",
		"ValidatingWebhookConfiguration virt-api-validator", "MutatingWebhookConfiguration virt-api-mutator",
		"Namespace " + CDINamespace, "ServiceAccount " + CDIControllerServiceAccount, "ServiceAccount " + CDIAPIServerServiceAccount,
		"ClusterRole cdi", "ClusterRole cdi-apiserver", "Service cdi-api", "APIService v1beta1.upload.cdi.kubevirt.io",
		"ValidatingWebhookConfiguration cdi-api-datavolume-validate", "MutatingWebhookConfiguration cdi-api-datavolume-mutate"} {
		if !names[n] {
			t.Errorf("%s missing", n)
		}
	}
	routed, err := routeToLoopback(m.virtAPI, 12345, []byte("ca"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range routed {
		if o.GetKind() != "ValidatingWebhookConfiguration" && o.GetKind() != "MutatingWebhookConfiguration" {
			continue
		}
		hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
		for _, h := range hooks {
			url, _, _ := unstructured.NestedString(h.(map[string]any), "clientConfig", "url")
			if !strings.HasPrefix(url, "https://127.0.0.1:12345/") {
				t.Errorf("%s webhook %v: url %q", o.GetName(), h.(map[string]any)["name"], url)
			}
		}
	}
}

func bind(t *testing.T, e *Env, ns, name, role string, subject rbacv1.Subject) {
	t.Helper()
	_, err := e.Kube.RbacV1().RoleBindings(ns).Create(context.Background(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{subject},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

func hasGroup(groups *metav1.APIGroupList, name string) bool {
	if groups == nil {
		return false
	}
	for _, g := range groups.Groups {
		if g.Name == name {
			return true
		}
	}
	return false
}

func rssMiB(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.Atoi(f[1])
			return kb / 1024
		}
	}
	return -1
}
