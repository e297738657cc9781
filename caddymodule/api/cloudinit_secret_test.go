package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// callAPI sends one request to h as its PVEAdmin token and returns the
// status and the envelope's data.
func callAPI(t *testing.T, h *APIHandler, method, path string, form url.Values) (int, json.RawMessage) {
	t.Helper()
	target := "https://x/api2/json" + path
	var body *strings.Reader
	if method == http.MethodGet && form != nil {
		target += "?" + form.Encode()
	}
	if method != http.MethodGet && form != nil {
		body = strings.NewReader(form.Encode())
	}
	var req *http.Request
	if body != nil {
		req = httptest.NewRequest(method, target, body)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		req = httptest.NewRequest(method, target, nil)
	}
	req.Header.Set("Authorization", "PVEAPIToken=root@pam!fuzz=fuzz-secret")
	rec := httptest.NewRecorder()
	if err := h.ServeHTTP(rec, req, &nextHandler{}); err != nil {
		t.Fatal(err)
	}
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	_ = json.Unmarshal(rec.Body.Bytes(), &env)
	return rec.Code, env.Data
}

func mustCall(t *testing.T, h *APIHandler, method, path string, form url.Values) json.RawMessage {
	t.Helper()
	code, data := callAPI(t, h, method, path, form)
	if code != http.StatusOK {
		t.Fatalf("%s %s: %d %s", method, path, code, data)
	}
	return data
}

func cloudInitSecret(t *testing.T, c *kube.Cluster, g kube.Guest) map[string]string {
	t.Helper()
	s, err := c.Secret(context.Background(), g.Namespace(), translate.CloudInitSecretName(g.VMID))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for k, v := range s.Data {
		out[k] = string(v)
	}
	return out
}

// TestCloudInitSecretFollowsConfig reads the Secret KubeVirt builds the
// drive from: bpg's "PUT config ipconfig0, then PUT cloudinit" leaves the
// new network config in it, PUT cloudinit repairs a Secret that missed a
// change (keeping the password) and is idempotent, and a clone gets its own
// Secret and a firmware UUID equal to its new smbios1 uuid.
func TestCloudInitSecretFollowsConfig(t *testing.T) {
	h := handlerForFuzz(t)
	c := h.cluster
	node := "kv-node-1-lab-internal"
	var id string
	_ = json.Unmarshal(mustCall(t, h, "GET", "/cluster/nextid", nil), &id)
	mustCall(t, h, "POST", "/nodes/"+node+"/qemu", url.Values{"vmid": {id}, "name": {"ci-secret"}, "net0": {"virtio,bridge=vmbr0"},
		"ide2": {"local-lvm:cloudinit"}, "ciuser": {"ops"}, "cipassword": {"hunter2"}, "ipconfig0": {"ip=dhcp"},
		"smbios1": {"uuid=11111111-2222-4333-8444-555555555555,manufacturer=ACME"}})
	vmid, _ := strconv.Atoi(id)
	g, err := c.Guest(vmid)
	if err != nil {
		t.Fatal(err)
	}
	vm := "/nodes/" + node + "/qemu/" + id
	if s := cloudInitSecret(t, c, g); !strings.Contains(s["networkdata"], "dhcp4: true") || s["cipassword"] != "hunter2" {
		t.Fatalf("Secret after create %v", s)
	}

	mustCall(t, h, "PUT", vm+"/config", url.Values{"ipconfig0": {"ip=10.9.8.7/24,gw=10.9.8.1"}})
	if data := mustCall(t, h, "PUT", vm+"/cloudinit", nil); string(data) != "null" {
		t.Fatalf("PUT cloudinit data %s", data)
	}
	want := cloudInitSecret(t, c, g)
	if !strings.Contains(want["networkdata"], `addresses: ["10.9.8.7/24"]`) || strings.Contains(want["networkdata"], "dhcp4") ||
		!strings.Contains(want["userdata"], `password: "hunter2"`) {
		t.Fatalf("Secret after the bpg flow %v", want)
	}

	// A Secret that missed a change (a write that failed halfway, a kubectl
	// edit) is rendered again from the config; the password stays.
	g, _ = c.Guest(vmid)
	if err := c.ApplySecret(context.Background(), g.VM(), translate.CloudInitSecretName(vmid),
		map[string][]byte{"userdata": []byte("stale"), "networkdata": []byte("stale"), "cipassword": []byte("hunter2")}); err != nil {
		t.Fatal(err)
	}
	mustCall(t, h, "PUT", vm+"/cloudinit", nil)
	if got := cloudInitSecret(t, c, g); got["userdata"] != want["userdata"] || got["networkdata"] != want["networkdata"] || got["cipassword"] != "hunter2" {
		t.Fatalf("regenerated Secret %v, want %v", got, want)
	}
	mustCall(t, h, "PUT", vm+"/cloudinit", nil)
	if got := cloudInitSecret(t, c, g); got["userdata"] != want["userdata"] || got["networkdata"] != want["networkdata"] {
		t.Fatalf("second PUT changed the Secret: %v", got)
	}

	// Clone: its own Secret for its own MAC; smbios1 and firmware UUID new
	// and the same.
	var dst string
	_ = json.Unmarshal(mustCall(t, h, "GET", "/cluster/nextid", nil), &dst)
	mustCall(t, h, "POST", vm+"/clone", url.Values{"newid": {dst}, "name": {"ci-secret-copy"}})
	dstID, _ := strconv.Atoi(dst)
	clone, err := c.Guest(dstID)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	_ = json.Unmarshal(mustCall(t, h, "GET", "/nodes/"+node+"/qemu/"+dst+"/config", nil), &cfg)
	smbios, _ := cfg["smbios1"].(string)
	fw := clone.VM().Spec.Template.Spec.Domain.Firmware
	if !strings.HasPrefix(smbios, "manufacturer=ACME,uuid=") || strings.Contains(smbios, "11111111-2222") || fw == nil ||
		"manufacturer=ACME,uuid="+string(fw.UUID) != smbios || len(fw.UUID) != 36 {
		t.Fatalf("clone smbios1 %q firmware %+v", smbios, fw)
	}
	mac := strings.ToLower(clone.VM().Spec.Template.Spec.Domain.Devices.Interfaces[0].MacAddress)
	if s := cloudInitSecret(t, c, clone); !strings.Contains(s["networkdata"], mac) || s["cipassword"] != "hunter2" {
		t.Fatalf("clone Secret %v (MAC %s)", s, mac)
	}
}
