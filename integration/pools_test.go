package integration

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"kubevirt.io/client-go/containerizeddataimporter"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// expectErr asserts a PVE error answer: the code and a message containing
// want.
func expectErr(t *testing.T, a *testcaddy.PVE, method, path string, f map[string][]string, code int, want string) {
	t.Helper()
	ans := a.Do(method, path, f)
	if ans.Code != code || !strings.Contains(ans.Message, want) {
		t.Fatalf("%s %s %v: %s %s, want %d %q", method, path, f, ans.Status, ans.Raw, code, want)
	}
}

// forgetPools deletes pool records a failed test may have left behind.
func forgetPools(t *testing.T, ns string, ids ...string) {
	t.Cleanup(func() {
		for _, id := range ids {
			_ = env.DirectKube.CoreV1().ConfigMaps(ns).Delete(context.Background(), translate.PoolRecordName(id), metav1.DeleteOptions{})
		}
	})
}

// createInto creates a VM into pool (none: "") as a and waits for its task.
func createInto(t *testing.T, a *testcaddy.PVE, pool string) string {
	t.Helper()
	vmid := nextID(pve(t))
	f := form("vmid", vmid, "name", "pooled-"+vmid, "memory", "512")
	if pool != "" {
		f.Set("pool", pool)
	}
	var upid string
	a.OK("POST", "/nodes/"+firstNode(a)+"/qemu", f, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create into %q: %s", pool, exit)
	}
	return vmid
}

// destroy deletes a VM as a and waits for its task.
func destroy(t *testing.T, a *testcaddy.PVE, vmid string) {
	t.Helper()
	var upid string
	a.OK("DELETE", "/nodes/"+firstNode(a)+"/qemu/"+vmid, nil, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("destroy %s: %s", vmid, exit)
	}
}

// TestPoolsAreRecords drives bpg's pool calls against the real apiserver:
// a pool is a ConfigMap in the task namespace (ids namespaces could not
// be: upper case, '_', nested), read back at once; a VM created into it
// stays in the namespace VMs go to and carries the pool as an annotation;
// of two updates that race to take the same VM into two pools exactly one
// wins; storages are recorded members; a pool is deleted only when empty.
func TestPoolsAreRecords(t *testing.T) {
	ctx := context.Background()
	a := pve(t)
	suffix := time.Now().UnixNano() % 1e9
	id, other := fmt.Sprintf("It_Pool-%d", suffix), fmt.Sprintf("it-pool-b-%d", suffix)
	child := id + "/dev"
	forgetPools(t, "default", child, id, other)

	a.OK("POST", "/pools", form("poolid", id, "comment", "from terraform"), nil)
	if p := poolRead(t, a, id); p["comment"] != "from terraform" {
		t.Fatalf("right after create: %v", p)
	}
	cm, err := env.Kube.CoreV1().ConfigMaps("default").Get(ctx, translate.PoolRecordName(id), metav1.GetOptions{})
	if err != nil || cm.Labels[translate.LabelPoolRecord] != "true" || cm.Data["poolid"] != id || cm.Data["comment"] != "from terraform" {
		t.Fatalf("record %v: %v", cm, err)
	}
	expectErr(t, a, "POST", "/pools", form("poolid", id), http.StatusInternalServerError, "create pool failed: pool '"+id+"' already exists")
	a.OK("POST", "/pools", form("poolid", child), nil)
	a.OK("POST", "/pools", form("poolid", other), nil)
	a.OK("PUT", "/pools", form("poolid", id, "comment", "changed"), nil)
	if p := poolRead(t, a, id); p["comment"] != "changed" {
		t.Fatalf("comment after PUT: %v", p)
	}

	// A VM created into the nested pool lives in the default namespace.
	vmid := createInto(t, a, child)
	vm := vmByID(t, vmid)
	if vm.Namespace != "default" || vm.Annotations[translate.AnnotationPool] != child {
		t.Fatalf("VM %s/%s annotated %v", vm.Namespace, vm.Name, vm.Annotations)
	}
	expectErr(t, a, "DELETE", "/pools", form("poolid", child), http.StatusInternalServerError, "delete pool failed: pool '"+child+"' is not empty (contains VM "+vmid+")")
	expectErr(t, a, "DELETE", "/pools", form("poolid", id), http.StatusInternalServerError, "delete pool failed: pool '"+id+"' is not empty (contains pool '"+child+"')")
	a.OK("PUT", "/pools", form("poolid", child, "vms", vmid, "delete", "1"), nil)
	if vm := vmByID(t, vmid); vm.Annotations[translate.AnnotationPool] != "" {
		t.Fatalf("left its pool, still annotated %v", vm.Annotations)
	}

	// Two updates race to take the VM into two pools: one wins, the other
	// is refused (the VM is in a pool by then, or changed under it).
	var wg sync.WaitGroup
	answers := make([]testcaddy.Answer, 2)
	for i, p := range []string{id, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = a.Do("PUT", "/pools", form("poolid", p, "vms", vmid))
		}()
	}
	wg.Wait()
	winner := ""
	for i, p := range []string{id, other} {
		switch {
		case answers[i].Code == http.StatusOK && winner == "":
			winner = p
		case answers[i].Code == http.StatusInternalServerError &&
			(strings.Contains(answers[i].Message, "belongs already to pool") || strings.Contains(answers[i].Message, "changed while its pool was being set")):
		default:
			t.Fatalf("racing updates: %s %s / %s %s", answers[0].Status, answers[0].Raw, answers[1].Status, answers[1].Raw)
		}
	}
	if winner == "" {
		t.Fatalf("no update won: %s / %s", answers[0].Status, answers[1].Status)
	}
	if got := vmByID(t, vmid).Annotations[translate.AnnotationPool]; got != winner {
		t.Fatalf("VM annotated %q, winner %q", got, winner)
	}
	t.Logf("racing updates: %q won; %s / %s", winner, answers[0].Status, answers[1].Status)

	// Storages are members of the record.
	a.OK("PUT", "/pools", form("poolid", other, "storage", "local-path"), nil)
	if cm, _ := env.Kube.CoreV1().ConfigMaps("default").Get(ctx, translate.PoolRecordName(other), metav1.GetOptions{}); cm.Data["storage"] != "local-path" {
		t.Fatalf("record after the storage joined: %v", cm.Data)
	}
	destroy(t, a, vmid)
	expectErr(t, a, "DELETE", "/pools", form("poolid", other), http.StatusInternalServerError, "delete pool failed: pool '"+other+"' is not empty (contains storage 'local-path')")
	a.OK("PUT", "/pools", form("poolid", other, "storage", "local-path", "delete", "1"), nil)
	for _, p := range []string{child, id, other} {
		a.OK("DELETE", "/pools", form("poolid", p), nil)
	}
	if _, err := env.Kube.CoreV1().ConfigMaps("default").Get(ctx, translate.PoolRecordName(id), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("record after the delete: %v", err)
	}
	expectErr(t, a, "GET", "/pools", form("poolid", id), http.StatusInternalServerError, "pool '"+id+"' does not exist")
}

// TestNamespacePoolsOfEarlierVersions: a namespace that an earlier version
// made for a pool (labelled, its comment annotated) is still that pool,
// with its comment and its VMs as members; it is deleted with the pool,
// as the caller, only when nothing is in it as the apiserver lists it (a
// VM, a DataVolume made with Kubernetes tools); a namespace made otherwise
// is never deleted.
func TestNamespacePoolsOfEarlierVersions(t *testing.T) {
	ctx := context.Background()
	a := pve(t)
	id := env.Namespace(t, "old-pool")
	ns, err := env.Kube.CoreV1().Namespaces().Get(ctx, id, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	ns.Labels[translate.LabelPool] = "true"
	ns.Annotations = map[string]string{translate.AnnotationPoolComment: "from an earlier version"}
	if _, err := env.Kube.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	forgetPools(t, "default", id)
	waitPool(t, a, id)
	for deadline := time.Now().Add(10 * time.Second); poolRead(t, a, id)["comment"] != "from an earlier version"; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("comment never read: %v", poolRead(t, a, id))
		}
	}

	// pool= of a namespace's pool creates the VM in that namespace, with
	// no annotation: the namespace says it all, as before.
	vmid := createInto(t, a, id)
	if vm := vmByID(t, vmid); vm.Namespace != id || vm.Annotations[translate.AnnotationPool] != "" {
		t.Fatalf("VM %s/%s annotated %v", vm.Namespace, vm.Name, vm.Annotations)
	}
	if m := poolRead(t, a, id)["members"].([]any); len(m) != 1 || m[0].(map[string]any)["id"] != "qemu/"+vmid {
		t.Fatalf("members %v", m)
	}
	expectErr(t, a, "DELETE", "/pools", form("poolid", id), http.StatusInternalServerError, "delete pool failed: pool '"+id+"' is not empty (contains VM "+vmid+")")
	// A VM that left the pool still keeps the namespace.
	a.OK("PUT", "/pools", form("poolid", id, "vms", vmid, "delete", "1"), nil)
	expectErr(t, a, "DELETE", "/pools", form("poolid", id), http.StatusInternalServerError, "delete pool failed: pool '"+id+"' is not empty (contains VM "+vmid+")")
	destroy(t, a, vmid)

	// A DataVolume made with Kubernetes tools keeps the pool too; once it
	// is deleted, its claim (garbage collected by the stand-in controller)
	// is waited for.
	cdi, err := containerizeddataimporter.NewForConfig(env.DirectConfig)
	if err != nil {
		t.Fatal(err)
	}
	dv := &cdiv1.DataVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "scratch", Namespace: id},
		Spec: cdiv1.DataVolumeSpec{
			Source: &cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}},
			Storage: &cdiv1.StorageSpec{Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			}},
		},
	}
	if _, err := cdi.CdiV1beta1().DataVolumes(id).Create(ctx, dv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expectErr(t, a, "DELETE", "/pools/"+id, nil, http.StatusInternalServerError, "delete pool failed: pool '"+id+"' is not empty (contains DataVolume 'scratch')")
	if err := cdi.CdiV1beta1().DataVolumes(id).Delete(ctx, "scratch", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	a.OK("DELETE", "/pools", form("poolid", id), nil)
	ns, err = env.Kube.CoreV1().Namespaces().Get(ctx, id, metav1.GetOptions{})
	if err == nil && ns.DeletionTimestamp == nil {
		t.Fatalf("namespace not being deleted: %v", ns.Status)
	}
	expectErr(t, a, "GET", "/pools", form("poolid", id), http.StatusInternalServerError, "pool '"+id+"' does not exist")

	// Namespaces made otherwise stay, even empty.
	plain := env.Namespace(t, "not-a-pool")
	waitPool(t, a, plain)
	expectErr(t, a, "DELETE", "/pools", form("poolid", plain), http.StatusInternalServerError, "cannot delete pool '"+plain+"': it is the namespace of that name, which was not created through this API")
	if _, err := env.Kube.CoreV1().Namespaces().Get(ctx, plain, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
}

// poolRead reads GET /pools?poolid= (bpg's read): one pool.
func poolRead(t *testing.T, a *testcaddy.PVE, id string) map[string]any {
	t.Helper()
	var rows []map[string]any
	a.OK("GET", "/pools", form("poolid", id), &rows)
	if len(rows) != 1 {
		t.Fatalf("GET /pools?poolid=%s: %v", id, rows)
	}
	return rows[0]
}

// waitPool waits until the API serves a namespace made a moment ago.
func waitPool(t *testing.T, a *testcaddy.PVE, id string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if ans := a.Do("GET", "/pools", form("poolid", id)); ans.Code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool %s never served", id)
		}
	}
}

// TestPoolGrantsWithRoles: with PVE roles (on the real apiserver), a grant
// on a pool reaches a VM once it joins the pool or a pool nested in it,
// and no longer once it leaves.
func TestPoolGrantsWithRoles(t *testing.T) {
	suffix := time.Now().UnixNano() % 1e9
	id := fmt.Sprintf("role-pool-%d", suffix)
	forgetPools(t, "default", id+"/dev", id)
	const secret = "0b9e8d7c-6a5f-4e3d-8c2b-1a0f9e8d7c6b"
	_, base := apiProcess(t, testcaddy.TokenAuth("root@pam!t", secret),
		"token root@pam!t "+secret, "token lead@pve!t "+secret,
		"identity lead@pve {", "	role PVEVMUser /pool/"+id, "}")
	root := &testcaddy.PVE{T: t, Base: base, C: testcaddy.Client(), Auth: testcaddy.TokenAuth("root@pam!t", secret)}
	lead := &testcaddy.PVE{T: t, Base: base, C: testcaddy.Client(), Auth: testcaddy.TokenAuth("lead@pve!t", secret)}
	root.OK("POST", "/pools", form("poolid", id), nil)
	root.OK("POST", "/pools", form("poolid", id+"/dev"), nil)
	vmid := createInto(t, root, "")
	defer destroy(t, root, vmid)
	status := "/nodes/" + firstNode(root) + "/qemu/" + vmid + "/status/current"
	expectErr(t, lead, "GET", status, nil, http.StatusForbidden, "Permission check failed (/vms/"+vmid+", VM.Audit)")
	root.OK("PUT", "/pools", form("poolid", id+"/dev", "vms", vmid), nil)
	lead.OK("GET", status, nil, nil)
	var upid string
	lead.OK("POST", "/nodes/"+firstNode(root)+"/qemu/"+vmid+"/status/start", nil, &upid)
	if exit := lead.WaitTask(upid); exit != "OK" {
		t.Fatalf("start by the pool's VM user: %s", exit)
	}
	lead.OK("POST", "/nodes/"+firstNode(root)+"/qemu/"+vmid+"/status/stop", nil, &upid)
	if exit := lead.WaitTask(upid); exit != "OK" {
		t.Fatalf("stop by the pool's VM user: %s", exit)
	}
	expectErr(t, lead, "PUT", "/pools", form("poolid", id+"/dev", "vms", vmid, "delete", "1"), http.StatusForbidden, "Permission check failed (/pool/"+id+"/dev, Pool.Allocate)")
	root.OK("PUT", "/pools", form("poolid", id+"/dev", "vms", vmid, "delete", "1"), nil)
	expectErr(t, lead, "GET", status, nil, http.StatusForbidden, "Permission check failed (/vms/"+vmid+", VM.Audit)")
	root.OK("DELETE", "/pools", form("poolid", id+"/dev"), nil)
	root.OK("DELETE", "/pools", form("poolid", id), nil)
}

// TestPoolsUnderImpersonation: with `impersonate`, Kubernetes decides
// and a pool grants nothing by itself. Pool.* is RBAC on the plugin's
// resource pools.pve.caddy-proxmox.io by pool id (a parent's reaching the
// pools nested in it); a VM joins or leaves a pool only as a caller who may
// change it (the annotation is patched as the caller), whatever their
// rights on the pool; what a caller may see or do with a VM never depends
// on its pool.
func TestPoolsUnderImpersonation(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, "imp-pool")
	suffix := time.Now().UnixNano() % 1e9
	team := fmt.Sprintf("team-%d", suffix)
	forgetPools(t, ns, team+"/dev", team)
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "pve-pools-" + team},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{translate.GroupPVE}, Resources: []string{translate.ResourcePools},
			Verbs: []string{"get", "update"}, ResourceNames: []string{team}}},
	}
	if _, err := env.Kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Kube.RbacV1().ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
	})
	subject := func(user string) []rbacv1.Subject {
		return []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "pve:" + user + "@pve"}}
	}
	for _, user := range []string{"ann", "erin", "cora"} {
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role.Name + "-" + user},
			Subjects:   subject(user),
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		}
		if _, err := env.Kube.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = env.Kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{})
		})
	}
	for user, r := range map[string]string{"ann": "kubevirt.io:edit", "ben": "kubevirt.io:view"} {
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: user + "-vms", Namespace: ns},
			Subjects:   subject(user),
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: r},
		}
		if _, err := env.Kube.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// cora may create VMs and read them, not change them.
	creator := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "vm-creator", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"kubevirt.io"}, Resources: []string{"virtualmachines", "virtualmachineinstances"},
			Verbs: []string{"get", "list", "watch", "create"}}},
	}
	if _, err := env.Kube.RbacV1().Roles(ns).Create(ctx, creator, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "cora-vms", Namespace: ns},
		Subjects:   subject("cora"),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: creator.Name},
	}
	if _, err := env.Kube.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var tokens []string
	for _, u := range []string{"ann", "ben", "erin", "cora"} {
		tokens = append(tokens, "token "+u+"@pve!t "+impersonatedSecret)
	}
	_, base := apiProcess(t, testcaddy.TokenAuth("ann@pve!t", impersonatedSecret), append([]string{"namespace " + ns, "impersonate"}, tokens...)...)
	as := func(user string) *testcaddy.PVE {
		return &testcaddy.PVE{T: t, Base: base, C: testcaddy.Client(), Auth: testcaddy.TokenAuth(user+"@pve!t", impersonatedSecret)}
	}
	ann, ben, erin := as("ann"), as("ben"), as("erin")

	// Pool.Allocate: the RBAC rule names the pool; it reaches nested pools.
	ann.OK("POST", "/pools", form("poolid", team, "comment", "ann's"), nil)
	ann.OK("POST", "/pools", form("poolid", team+"/dev"), nil)
	expectErr(t, ann, "POST", "/pools", form("poolid", "other-"+team), http.StatusForbidden, "Permission check failed (/pool/other-"+team+", Pool.Allocate)")
	expectErr(t, ben, "POST", "/pools", form("poolid", team+"/qa"), http.StatusForbidden, "Permission check failed (/pool/"+team+"/qa, Pool.Allocate)")

	// ann may create VMs in the namespace: into the pool too.
	vmid := createInto(t, ann, team+"/dev")
	defer destroy(t, ann, vmid)
	if vm := vmByID(t, vmid); vm.Namespace != ns || vm.Annotations[translate.AnnotationPool] != team+"/dev" {
		t.Fatalf("VM %s/%s annotated %v", vm.Namespace, vm.Name, vm.Annotations)
	}

	// erin holds the pool but no right on the VM: she does not see it in
	// the pool, and may not take it out or put it back.
	if m := poolRead(t, erin, team+"/dev")["members"].([]any); len(m) != 0 {
		t.Fatalf("erin sees members %v", m)
	}
	expectErr(t, erin, "PUT", "/pools", form("poolid", team+"/dev", "vms", vmid, "delete", "1"), http.StatusForbidden, "Permission check failed (/vms/"+vmid+", Permissions.Modify|VM.Allocate)")
	erin.OK("PUT", "/pools", form("poolid", team, "comment", "erin's"), nil)
	// cora holds the pool and PVE's VM.Allocate (create), but Kubernetes
	// does not let her change the VM: refused before anything is written.
	expectErr(t, as("cora"), "PUT", "/pools", form("poolid", team+"/dev", "vms", vmid, "delete", "1"), http.StatusForbidden, "Permission check failed (/vms/"+vmid+", VM.Config.Options)")
	if vm := vmByID(t, vmid); vm.Annotations[translate.AnnotationPool] != team+"/dev" {
		t.Fatalf("a refused move was written: %v", vm.Annotations)
	}

	// ben views the VM but not the pool: no pool on its row, none listed;
	// he may not move it either.
	var rows []map[string]any
	ben.OK("GET", "/cluster/resources", form("type", "vm"), &rows)
	if len(rows) != 1 || rows[0]["pool"] != nil {
		t.Fatalf("ben's rows %v", rows)
	}
	var pools []map[string]any
	ben.OK("GET", "/pools", nil, &pools)
	for _, p := range pools {
		if strings.HasPrefix(p["poolid"].(string), team) {
			t.Fatalf("ben lists %v", pools)
		}
	}
	expectErr(t, ben, "PUT", "/pools", form("poolid", team+"/dev", "vms", vmid, "delete", "1"), http.StatusForbidden, "Permission check failed (/pool/"+team+"/dev, Pool.Allocate)")
	ann.OK("GET", "/cluster/resources", form("type", "vm"), &rows)
	if len(rows) != 1 || rows[0]["pool"] != team+"/dev" {
		t.Fatalf("ann's rows %v", rows)
	}
	var perms map[string]map[string]int
	ann.OK("GET", "/access/permissions", nil, &perms)
	if perms["/pool/"+team]["Pool.Allocate"] != 1 || perms["/pool/"+team+"/dev"]["Pool.Audit"] != 1 || perms["/"]["Pool.Allocate"] != 0 {
		t.Fatalf("ann's permissions %v", perms)
	}

	// ann may change the VM: she moves it out, as herself.
	ann.OK("PUT", "/pools", form("poolid", team+"/dev", "vms", vmid, "delete", "1"), nil)
	if vm := vmByID(t, vmid); vm.Annotations[translate.AnnotationPool] != "" {
		t.Fatalf("left the pool, still annotated %v", vm.Annotations)
	}
	ann.OK("DELETE", "/pools", form("poolid", team+"/dev"), nil)
	ann.OK("DELETE", "/pools", form("poolid", team), nil)
}
