package integration

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"kubevirt.io/client-go/containerizeddataimporter"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// TestPoolsAreNamespaces drives bpg's pool calls against the real
// apiserver: POST /pools makes a labelled namespace with the comment
// annotated, read back at once; PUT changes the comment; a pool with a VM
// or a DataVolume is not deleted; an empty one is (the namespace then
// terminates: this apiserver has no namespace controller, and the pool is
// gone at once all the same); a namespace made otherwise is never deleted.
func TestPoolsAreNamespaces(t *testing.T) {
	ctx := context.Background()
	a := pve(t)
	id := fmt.Sprintf("it-pool-%d", time.Now().UnixNano()%1e9)
	expect := func(method, path string, f map[string][]string, code int, want string) {
		t.Helper()
		ans := a.Do(method, path, f)
		if ans.Code != code || !strings.Contains(ans.Message, want) {
			t.Fatalf("%s %s %v: %s %s, want %d %q", method, path, f, ans.Status, ans.Raw, code, want)
		}
	}
	poolComment := func() any {
		t.Helper()
		var rows []map[string]any
		a.OK("GET", "/pools", form("poolid", id), &rows)
		if len(rows) != 1 {
			t.Fatalf("GET /pools?poolid=%s: %v", id, rows)
		}
		return rows[0]["comment"]
	}

	a.OK("POST", "/pools", form("poolid", id, "comment", "from terraform"), nil)
	if c := poolComment(); c != "from terraform" {
		t.Fatalf("comment right after create: %v", c)
	}
	ns, err := env.Kube.CoreV1().Namespaces().Get(ctx, id, metav1.GetOptions{})
	if err != nil || ns.Labels[translate.LabelPool] != "true" || ns.Annotations[translate.AnnotationPoolComment] != "from terraform" {
		t.Fatalf("namespace %v: %v", ns, err)
	}
	expect("POST", "/pools", form("poolid", id), http.StatusInternalServerError, "create pool failed: pool '"+id+"' already exists")
	a.OK("PUT", "/pools", form("poolid", id, "comment", "changed"), nil)
	if c := poolComment(); c != "changed" {
		t.Fatalf("comment after PUT: %v", c)
	}
	if ns, _ := env.Kube.CoreV1().Namespaces().Get(ctx, id, metav1.GetOptions{}); ns.Annotations[translate.AnnotationPoolComment] != "changed" {
		t.Fatalf("annotation after PUT: %v", ns.Annotations)
	}

	// A VM in the pool: listing it again is fine, deleting the pool is not.
	node := firstNode(a)
	vmid := nextID(a)
	var upid string
	a.OK("POST", "/nodes/"+node+"/qemu", form("vmid", vmid, "name", "pooled-"+vmid, "pool", id, "memory", "512"), &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create into the pool: %s", exit)
	}
	a.OK("PUT", "/pools", form("poolid", id, "vms", vmid), nil)
	expect("DELETE", "/pools", form("poolid", id), http.StatusInternalServerError, "delete pool failed: pool '"+id+"' is not empty (contains VM "+vmid+")")
	a.OK("DELETE", "/nodes/"+node+"/qemu/"+vmid, nil, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("destroy: %s", exit)
	}

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
	expect("DELETE", "/pools/"+id, nil, http.StatusInternalServerError, "delete pool failed: pool '"+id+"' is not empty (contains DataVolume 'scratch')")
	if err := cdi.CdiV1beta1().DataVolumes(id).Delete(ctx, "scratch", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	a.OK("DELETE", "/pools", form("poolid", id), nil)
	ns, err = env.Kube.CoreV1().Namespaces().Get(ctx, id, metav1.GetOptions{})
	if err == nil && ns.DeletionTimestamp == nil {
		t.Fatalf("namespace not being deleted: %v", ns.Status)
	}
	expect("GET", "/pools", form("poolid", id), http.StatusInternalServerError, "pool '"+id+"' does not exist")
	var rows []map[string]any
	a.OK("GET", "/pools", nil, &rows)
	for _, r := range rows {
		if r["poolid"] == id {
			t.Fatalf("deleted pool listed: %v", rows)
		}
	}

	// Namespaces made otherwise stay, even empty.
	other := env.Namespace(t, "not-a-pool")
	waitPool(t, a, other)
	expect("DELETE", "/pools", form("poolid", other), http.StatusInternalServerError, "cannot delete pool '"+other+"': its namespace was not created through this API")
	if _, err := env.Kube.CoreV1().Namespaces().Get(ctx, other, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
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
