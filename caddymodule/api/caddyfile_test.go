package api

import (
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

func TestUnmarshalCaddyfile(t *testing.T) {
	d := caddyfile.NewTestDispenser(`proxmox_api {
		kubeconfig /etc/kube.conf
		context lab
		namespace default lab
		namespace extra
		task_namespace caddy-proxmox
		default_pool lab
		token root@pam!ci 1234-abcd
		token ops@pve!tf 5678-ef
		user alice@pve s3cret
		ticket_key k3y
		trust_caddy_auth sso
		auth_failure_delay 1s
		sync_timeout 10s
		stale_reads 5s
		cluster_name homelab
		local_storage files {
			storage_class nfs-csi
			max_upload 8G
		}
		cdi_upload_proxy https://cdi-uploadproxy.example {
			ca_file /etc/cdi/ca.pem
		}
	}`)
	var h APIHandler
	if err := h.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	if h.Kubeconfig != "/etc/kube.conf" || h.Context != "lab" || strings.Join(h.Namespaces, ",") != "default,lab,extra" ||
		h.TaskNamespace != "caddy-proxmox" || h.DefaultPool != "lab" || len(h.Tokens) != 2 || h.Tokens[1].ID != "ops@pve!tf" ||
		h.Users[0].Password != "s3cret" || h.TicketKey != "k3y" || h.TrustCaddyAuth != "sso" ||
		*h.AuthFailureDelay != caddy.Duration(time.Second) || h.SyncTimeout != caddy.Duration(10*time.Second) || *h.StaleReads != caddy.Duration(5*time.Second) || h.ClusterName != "homelab" ||
		h.LocalStorage != (LocalStorageConfig{Name: "files", StorageClass: "nfs-csi", MaxUpload: 8 << 30}) ||
		*h.UploadProxy != (UploadProxyConfig{URL: "https://cdi-uploadproxy.example", CAFile: "/etc/cdi/ca.pem"}) {
		t.Fatalf("parsed %+v", h)
	}

	d = caddyfile.NewTestDispenser("proxmox_api {\n simulate {\n vms 250\n }\n insecure_no_auth\n }")
	h = APIHandler{}
	if err := h.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	if !h.Simulate || h.SimulateVMs != 250 || !h.InsecureNoAuth || h.LocalStorage.name() != "local" {
		t.Fatalf("parsed %+v", h)
	}
}

func TestUnmarshalCaddyfileErrors(t *testing.T) {
	for _, in := range []string{
		"proxmox_api extra-arg",
		"proxmox_api {\n token only-one\n}",
		"proxmox_api {\n user a@pve\n}",
		"proxmox_api {\n bogus\n}",
		"proxmox_api {\n kubeconfig\n}",
		"proxmox_api {\n auth_failure_delay soon\n}",
		"proxmox_api {\n stale_reads\n}",
		"proxmox_api {\n simulate {\n vms many\n }\n}",
		"proxmox_api {\n insecure_no_auth yes\n}",
		"proxmox_api {\n local_storage a b\n}",
		"proxmox_api {\n local_storage {\n storage_class\n }\n}",
		"proxmox_api {\n local_storage {\n path /var/lib/vz\n }\n}",
		"proxmox_api {\n local_storage {\n max_upload lots\n }\n}",
		"proxmox_api {\n cdi_upload_proxy\n}",
		"proxmox_api {\n cdi_upload_proxy https://x {\n insecure\n }\n}",
	} {
		var h APIHandler
		if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(in)); err == nil {
			t.Errorf("%q: want a parse error", in)
		}
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		h    APIHandler
		want string
	}{
		{APIHandler{}, "no authentication configured"},
		{APIHandler{InsecureNoAuth: true}, ""},
		{APIHandler{Tokens: []TokenConfig{{ID: "root@pam", Secret: "x"}}}, "user@realm!name"},
		{APIHandler{Tokens: []TokenConfig{{ID: "root@pam!t", Secret: ""}}}, "empty secret"},
		{APIHandler{Users: []UserConfig{{ID: "root", Password: "x"}}}, "user@realm"},
		{APIHandler{Users: []UserConfig{{ID: "root@pam", Password: "x"}}, Simulate: true, Kubeconfig: "/x"}, "exclusive"},
		{APIHandler{TrustCaddyAuth: "pve", SimulateVMs: 5}, "simulate_vms"},
		{APIHandler{TrustCaddyAuth: "pve"}, ""},
		{APIHandler{TrustCaddyAuth: "pve", LocalStorage: LocalStorageConfig{Name: "iso-files"}}, ""},
		{APIHandler{TrustCaddyAuth: "pve", LocalStorage: LocalStorageConfig{Name: "9local"}}, "not a PVE storage id"},
		{APIHandler{TrustCaddyAuth: "pve", LocalStorage: LocalStorageConfig{Name: "a:b"}}, "not a PVE storage id"},
		{APIHandler{TrustCaddyAuth: "pve", UploadProxy: &UploadProxyConfig{URL: "http://cdi-uploadproxy"}}, "must be an https URL"},
		{APIHandler{TrustCaddyAuth: "pve", UploadProxy: &UploadProxyConfig{URL: "https://cdi-uploadproxy.cdi.svc:443"}}, ""},
	}
	for i, c := range cases {
		err := c.h.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%d: unexpected %v", i, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%d: want %q, got %v", i, c.want, err)
		}
	}
}
