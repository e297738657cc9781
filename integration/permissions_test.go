package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
	"github.com/caddy-proxmox/caddy-proxmox/kubevirtsim"
)

const impersonatedSecret = "9e8d7c6b-5a49-4382-a1b0-c9d8e7f6a5b4"

// TestImpersonationLetsKubernetesDecide runs ./caddy with `impersonate`
// against the real apiserver and three PVE users whose Kubernetes
// identities (pve:<user>) have different RBAC rights in one namespace:
// alice edits VMs (kubevirt.io:edit), bob views them (kubevirt.io:view),
// carol has nothing. What each sees and may do must follow RBAC alone.
func TestImpersonationLetsKubernetesDecide(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, "perm")
	claims := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "claims-creator"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: []string{"create"}}},
	}
	if _, err := env.Kube.RbacV1().ClusterRoles().Create(ctx, claims, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	bind := func(user, role string) {
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: strings.NewReplacer(":", "-", "@", "-").Replace(user + "-" + role), Namespace: ns},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		}
		if _, err := env.Kube.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bind("pve:alice@pve", "kubevirt.io:edit")
	// and may create claims (Datastore.AllocateSpace), but not Secrets.
	bind("pve:alice@pve", "claims-creator")
	bind("pve:bob@pve", "kubevirt.io:view")
	// dave may list VMs and open their VNC display, but not their serial
	// console: only Kubernetes can tell the two apart.
	vncOnly := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "vnc-only", Namespace: ns},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"kubevirt.io"}, Resources: []string{"virtualmachines", "virtualmachineinstances"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"subresources.kubevirt.io"}, Resources: []string{"virtualmachineinstances/vnc"}, Verbs: []string{"get"}},
		},
	}
	if _, err := env.Kube.RbacV1().Roles(ns).Create(ctx, vncOnly, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	daveBinding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "dave-vnc-only", Namespace: ns},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "pve:dave@pve"}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "vnc-only"},
	}
	if _, err := env.Kube.RbacV1().RoleBindings(ns).Create(ctx, daveBinding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var tokens []string
	for _, u := range []string{"alice", "bob", "carol", "dave"} {
		tokens = append(tokens, "token "+u+"@pve!t "+impersonatedSecret)
	}
	_, base := apiProcess(t, testcaddy.TokenAuth("alice@pve!t", impersonatedSecret),
		append([]string{"namespace " + ns, "impersonate"}, tokens...)...)
	as := func(user string) *testcaddy.PVE {
		return &testcaddy.PVE{T: t, Base: base, C: testcaddy.Client(), Auth: testcaddy.TokenAuth(user+"@pve!t", impersonatedSecret)}
	}
	alice, bob, carol := as("alice"), as("bob"), as("carol")
	var nodes []map[string]any
	alice.OK("GET", "/nodes", nil, &nodes)
	node := nodes[0]["node"].(string)
	id := nextID(pve(t))

	// alice may create and start: every call is made as pve:alice@pve.
	var upid string
	alice.OK("POST", "/nodes/"+node+"/qemu", form("vmid", id, "name", "imp-"+id, "pool", ns, "memory", "512"), &upid)
	if exit := alice.WaitTask(upid); exit != "OK" {
		t.Fatalf("create as alice: %s", exit)
	}
	alice.OK("POST", "/nodes/"+node+"/qemu/"+id+"/status/start", nil, &upid)
	if exit := alice.WaitTask(upid); exit != "OK" {
		t.Fatalf("start as alice: %s", exit)
	}

	// A cloud-init drive needs a Secret, which kubevirt.io:edit does not
	// grant: Kubernetes refuses the impersonated write and nothing is
	// created, although the plugin's own account could have written it.
	ans := alice.Do("POST", "/nodes/"+node+"/qemu", form("vmid", fmt.Sprint(mustAtoi(id)+1), "name", "imp-ci", "pool", ns, "ciuser", "debian", "ide2", "local-path:cloudinit"))
	if ans.Code != http.StatusForbidden || !strings.HasPrefix(strings.TrimSpace(ans.Message), "Permission check failed (/vms/") {
		t.Fatalf("create with cloud-init as alice (no secrets right): %s %s", ans.Status, ans.Raw)
	}
	// (Its VM object exists for a moment: the Secret is owned by the VM,
	// so the VM comes first and is deleted again when the Secret is refused.)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		vm, err := env.KubeVirt.KubevirtV1().VirtualMachines(ns).Get(ctx, "imp-ci", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("refused create left a VM behind: %v %v", err, vm.DeletionTimestamp)
		}
	}

	// bob sees the VM but may not stop it; the VM keeps running.
	if st := bob.Status(node, id); st["status"] != "running" {
		t.Fatalf("bob reads status %v", st["status"])
	}
	denied := func(a *testcaddy.PVE, method, path string, f url.Values, want string) {
		t.Helper()
		ans := a.Do(method, path, f)
		if ans.Code != http.StatusForbidden || strings.TrimSpace(ans.Message) != want {
			t.Fatalf("%s %s: %s %q, want 403 %q", method, path, ans.Status, ans.Message, want)
		}
	}
	denied(bob, "POST", "/nodes/"+node+"/qemu/"+id+"/status/stop", nil, "Permission check failed (/vms/"+id+", VM.PowerMgmt)")
	denied(bob, "PUT", "/nodes/"+node+"/qemu/"+id+"/config", form("cores", "2"), "Permission check failed (/vms/"+id+", VM.Config.CPU)")
	// The controller has acted on whatever the refused calls wrote.
	barrierCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	vm, err := kubevirtsim.SyncBarrier(barrierCtx, env.KubeVirt, ns, "imp-"+id)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if len(vm.Status.StateChangeRequests) != 0 || vm.Spec.Template.Spec.Domain.CPU != nil && vm.Spec.Template.Spec.Domain.CPU.Cores == 2 {
		t.Fatalf("a refused call was written: requests %v, cpu %+v", vm.Status.StateChangeRequests, vm.Spec.Template.Spec.Domain.CPU)
	}
	if vmi, err := env.KubeVirt.KubevirtV1().VirtualMachineInstances(ns).Get(ctx, "imp-"+id, metav1.GetOptions{}); err != nil || vmi.DeletionTimestamp != nil {
		t.Fatalf("VM stopped by a refused call: %v (instance being deleted: %v)", err, err == nil)
	}

	// Consoles run as the caller too: alice's session reaches virt-api as
	// pve:alice@pve (the stand-in authorizes the impersonated user); bob,
	// a viewer, may not open one.
	var ct consoleTicket
	alice.OK("POST", "/nodes/"+node+"/qemu/"+id+"/vncproxy", form("websocket", "1"), &ct)
	conn, resp, err := wsDial(alice, node, id, ct.Port, ct.Ticket)
	if err != nil {
		t.Fatalf("alice's console: %v (%v)", err, resp)
	}
	if v := newByteConn(t, conn).read(12); string(v) != "RFB 003.008\n" {
		t.Fatalf("alice's console: ProtocolVersion %q", v)
	}
	conn.Close()
	denied(bob, "POST", "/nodes/"+node+"/qemu/"+id+"/vncproxy", form("websocket", "1"), "Permission check failed (/vms/"+id+", VM.Console)")
	// dave passes the VM.Console review (vnc), gets a termproxy ticket, and
	// is refused by virt-api itself when the serial console is opened as him.
	dave := as("dave")
	dave.OK("POST", "/nodes/"+node+"/qemu/"+id+"/vncproxy", form("websocket", "1"), &ct)
	dave.OK("POST", "/nodes/"+node+"/qemu/"+id+"/termproxy", nil, &ct)
	conn, resp, err = wsDial(dave, node, id, ct.Port, ct.Ticket)
	if err == nil {
		conn.Close()
		t.Fatal("dave opened the serial console that RBAC denies him")
	}
	if resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("dave's serial console: %v %v, want 403", err, resp)
	}
	t.Logf("dave's serial console refused: %s", resp.Status)

	// carol sees nothing and may read nothing.
	var rows []map[string]any
	carol.OK("GET", "/cluster/resources", nil, &rows)
	for _, r := range rows {
		if r["type"] == "qemu" || r["type"] == "node" {
			t.Fatalf("carol sees %v", r)
		}
	}
	denied(carol, "GET", "/nodes/"+node+"/qemu/"+id+"/status/current", nil, "Permission check failed (/vms/"+id+", VM.Audit)")

	// /access/permissions tells each the truth, from access reviews.
	perms := func(a *testcaddy.PVE) map[string]map[string]int {
		var p map[string]map[string]int
		a.OK("GET", "/access/permissions", nil, &p)
		return p
	}
	pa, pb, pc := perms(alice), perms(bob), perms(carol)
	pool := "/pool/" + ns
	if pa[pool]["VM.PowerMgmt"] != 1 || pa[pool]["VM.Allocate"] != 1 || pa[pool]["VM.Audit"] != 1 {
		t.Fatalf("alice's permissions: %v", pa)
	}
	if pb[pool]["VM.Audit"] != 1 || pb[pool]["VM.PowerMgmt"] != 0 || pb[pool]["VM.Allocate"] != 0 {
		t.Fatalf("bob's permissions: %v", pb)
	}
	if len(pc["/"]) != 0 || len(pc[pool]) != 0 {
		t.Fatalf("carol's permissions: %v", pc)
	}
	if pa["/"]["Sys.Audit"] != 0 {
		t.Fatalf("alice holds Sys.Audit on / without any node right: %v", pa["/"])
	}

	// A right granted now counts at once for writes: the check in front of
	// a write never reuses a remembered review (bob was refused a moment
	// ago, well within the 10 s a review is reused for reads).
	denied(bob, "POST", "/nodes/"+node+"/qemu/"+id+"/status/stop", nil, "Permission check failed (/vms/"+id+", VM.PowerMgmt)")
	bind("pve:bob@pve", "kubevirt.io:edit")
	bob.OK("POST", "/nodes/"+node+"/qemu/"+id+"/status/stop", nil, &upid)
	if exit := bob.WaitTask(upid); exit != "OK" {
		t.Fatalf("stop as bob after the grant: %s", exit)
	}
	alice.OK("DELETE", "/nodes/"+node+"/qemu/"+id, nil, &upid)
	if exit := alice.WaitTask(upid); exit != "OK" {
		t.Fatalf("delete as alice: %s", exit)
	}
}
