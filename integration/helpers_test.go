package integration

import (
	"context"
	"encoding/json"
	"net/url"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/translate"

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
func firstNode(a *testcaddy.PVE) string {
	var nodes []map[string]any
	a.OK("GET", "/nodes", nil, &nodes)
	if len(nodes) == 0 {
		a.T.Fatal("no nodes")
	}
	return nodes[0]["node"].(string)
}

func nextID(a *testcaddy.PVE) string {
	var id string
	a.OK("GET", "/cluster/nextid", nil, &id)
	return id
}

func form(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v
}

// vmByID finds the VirtualMachine object carrying a vmid label.
func vmByID(t *testing.T, id string) *kubevirtv1.VirtualMachine {
	t.Helper()
	list, err := env.KubeVirt.KubevirtV1().VirtualMachines("").List(context.Background(), metav1.ListOptions{LabelSelector: translate.LabelVMID + "=" + id})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("VM with vmid %s: %v (%d found)", id, err, len(list.Items))
	}
	return &list.Items[0]
}

func metavOpts() metav1.PatchOptions { return metav1.PatchOptions{} }

func jsonString(raw []byte, into *string) error { return json.Unmarshal(raw, into) }

func waitABit() { time.Sleep(100 * time.Millisecond) }
