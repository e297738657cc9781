package integration

import (
	"encoding/json"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
)

// pve returns a token-authenticated client for the API with virt-api.
func pve(t *testing.T) *testcaddy.PVE {
	return &testcaddy.PVE{T: t, Base: base, C: testcaddy.Client(), Auth: testcaddy.TokenAuth(tokenID, tokenSecret)}
}

// fallbackPVE talks to the same cluster through a proxy without virt-api.
func fallbackPVE(t *testing.T) *testcaddy.PVE {
	return &testcaddy.PVE{T: t, Base: fallbackBase, C: testcaddy.Client(), Auth: testcaddy.TokenAuth(tokenID, tokenSecret)}
}

// firstNode is a node name as PVE clients see it.
func firstNode(a *testcaddy.PVE) string { return a.FirstNode() }

func nextID(a *testcaddy.PVE) string {
	var id string
	a.OK("GET", "/cluster/nextid", nil, &id)
	return id
}

var form = testcaddy.Form

// vmByID finds the VirtualMachine object carrying a vmid label.
func vmByID(t *testing.T, id string) *kubevirtv1.VirtualMachine { return env.VMByID(t, id) }

func metavOpts() metav1.PatchOptions { return metav1.PatchOptions{} }

func jsonString(raw []byte, into *string) error { return json.Unmarshal(raw, into) }

func waitABit() { time.Sleep(100 * time.Millisecond) }

// createVM creates VM id on node with the given parameters (key, value,
// ...), fails the test unless the create task ends OK, and deletes the VM
// when the test ends. A cleanup registered later runs before the delete.
func createVM(t *testing.T, a *testcaddy.PVE, node, id string, params ...string) {
	t.Helper()
	var upid string
	a.OK("POST", "/nodes/"+node+"/qemu", form(append([]string{"vmid", id}, params...)...), &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create: %s", exit)
	}
	path := "/nodes/" + node + "/qemu/" + id
	t.Cleanup(func() {
		var u string
		a.OK("DELETE", path, nil, &u)
		a.WaitTask(u)
	})
}
