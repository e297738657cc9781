package translate

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// The functions below turn client input into Kubernetes object names or
// accept/refuse client keys; these targets check that no input yields a
// name the apiserver would refuse (which would surface as a 500 instead of
// PVE's 400) and that the checks are total.

func FuzzKubeName(f *testing.F) {
	f.Add("web-01", 100)
	f.Add("Ünïcødé  VM", 101)
	f.Add("---", 102)
	f.Add(strings.Repeat("a-", 40), 999999999)
	f.Fuzz(func(t *testing.T, name string, vmid int) {
		if vmid < 100 || vmid > 999999999 {
			return // ParseVMID refuses these before a name is derived
		}
		n := KubeName(name, vmid)
		if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
			t.Fatalf("KubeName(%q) = %q: %v", name, n, errs)
		}
	})
}

func FuzzISOClaimName(f *testing.F) {
	f.Add("debian-12.7.0-amd64-netinst.iso")
	f.Add("../../etc/passwd")
	f.Add("ÄÖÜ.iso")
	f.Fuzz(func(t *testing.T, file string) {
		n := ISOClaimName(file)
		if n == "" {
			return // callers refuse an empty claim name
		}
		if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
			t.Fatalf("ISOClaimName(%q) = %q: %v", file, n, errs)
		}
	})
}

func FuzzValidSnapName(f *testing.F) {
	f.Add("before-upgrade")
	f.Add("current")
	f.Add("a")
	f.Add("x\u0430y") // Cyrillic a
	f.Fuzz(func(t *testing.T, s string) {
		if ValidSnapName(s) != nil {
			return
		}
		n := SnapshotObjectName(100, s)
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
			t.Fatalf("SnapshotObjectName(%q) = %q: %v", s, n, errs)
		}
		if SnapshotObjectName(100, s) != n {
			t.Fatal("not deterministic")
		}
	})
}

func FuzzValidConfigKey(f *testing.F) {
	for _, s := range []string{"cores", "scsi30", "scsi31", "net007", "virtio16", "ipconfig0", "scsi", "9", "SCSI0", "scsi0\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if !ValidConfigKey(key) {
			return
		}
		// PVE keys are lower-case ASCII words with an optional index.
		for _, c := range key {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				t.Fatalf("accepted key %q has %q", key, c)
			}
		}
	})
}

func FuzzSSHKeys(f *testing.F) {
	f.Add("ssh-ed25519%20AAAAC3NzaC1lZDI1NTE5AAAAIExample%20me")
	f.Add("ssh-rsa AAAA x\n# comment\n\necdsa-sha2-nistp256 AAAA y")
	f.Add("%zz")
	f.Add("ssh-ed25519%0Aruncmd:%20[rm]")
	f.Fuzz(func(t *testing.T, v string) {
		keys, err := SSHKeys(v)
		if err != nil {
			return
		}
		for _, k := range keys {
			// Each key lands on its own line of cloud-init user data: a
			// newline inside one would let a client inject YAML.
			if strings.ContainsAny(k, "\n\r") || k != strings.TrimSpace(k) {
				t.Fatalf("key %q of %q", k, v)
			}
		}
	})
}

func FuzzUpdateVM(f *testing.F) {
	f.Add("cores", "4", "")
	f.Add("net1", "e1000,bridge=lab", "net0")
	f.Add("scsi1", "local-lvm:4", "scsi0")
	f.Add("memory", "current=0", "memory")
	f.Add("", "", "cores,cores")
	f.Fuzz(func(t *testing.T, key, value, deletes string) {
		vm, errs := BuildVM(VMRequest{VMID: 100, Namespace: "default", StorageExists: storageOK,
			Config: map[string]string{"cores": "2", "memory": "2048", "net0": "virtio,bridge=vmbr0", "scsi0": "local-lvm:8"}})
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		cfg := map[string]string{}
		if key != "" {
			cfg[key] = value
		}
		var del []string
		if deletes != "" {
			del = strings.Split(deletes, ",")
		}
		up, errs := UpdateVM(vm, VMRequest{VMID: 100, Namespace: "default", StorageExists: storageOK, Config: cfg}, del)
		if (up == nil) == (len(errs) == 0) {
			t.Fatalf("exactly one of VM and errors must be set: vm=%v errs=%v", up != nil, errs)
		}
		if up != nil {
			_ = ConfigView(up, nil)
			_ = PendingView(up, nil, nil)
		}
	})
}
