package api_test

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"

	_ "github.com/caddy-proxmox/caddy-proxmox/caddymodule"
)

const (
	testToken  = "root@pam!ci"
	testSecret = "0d7c3c1e-8c1b-4c33-9d2a-3f1f5e6a7b8c"
	// permsSecret is the secret of every token of the permissions site.
	permsSecret = "6b1f2e3d-4c5b-4a69-8877-665544332211"
)

var (
	ssoPort   int
	permsPort int
	// fixedPort serves a fixed list of namespaces (pools cannot be made),
	// with the directory storage "files" on ceph-rbd taking uploads of 1 MiB.
	fixedPort  int
	sharedOnce sync.Once
	sharedAPI  *testcaddy.PVE
)

// shared starts one simulated server for the package: Caddy is a process
// singleton, and the simulated cluster is shared through the usage pool.
func shared(t *testing.T) *testcaddy.PVE {
	sharedOnce.Do(func() {
		port := testcaddy.FreePort(t)
		ssoPort = testcaddy.FreePort(t)
		permsPort = testcaddy.FreePort(t)
		fixedPort = testcaddy.FreePort(t)
		hash, err := bcrypt.GenerateFromPassword([]byte("sso-pass"), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		testcaddy.Load(t, testcaddy.Globals(os.TempDir()+"/caddy-proxmox-test")+fmt.Sprintf(`
https://localhost:%d {
	tls internal
	handle /metrics {
		metrics
	}
	basic_auth /api2/* {
		carol %s
	}
	proxmox_api {
		simulate
		trust_caddy_auth sso
	}
}
`, ssoPort, hash)+fmt.Sprintf(`
https://localhost:%d {
	tls internal
	proxmox_api {
		simulate
		token %s %s
		user alice@pve s3cret
		auth_failure_delay 0s
	}
	respond "not the API" 418
}
`, port, testToken, testSecret)+fmt.Sprintf(`
https://localhost:%d {
	tls internal
	proxmox_api {
		simulate
		token auditor@pve!t %[2]s
		token vmuser@pve!t %[2]s
		token pooladmin@pve!t %[2]s
		token admin@pve!t %[2]s
		token teamlead@pve!t %[2]s
		user nobody@pve nobody-pass
		auth_failure_delay 0s
		default_role NoAccess
		identity auditor@pve {
			role PVEAuditor
		}
		identity vmuser@pve {
			role PVEVMUser /vms/101
			kube_groups lab-users
		}
		identity pooladmin@pve {
			role PVEVMAdmin /pool/lab
			role PVEPoolUser /pool/lab
		}
		identity admin@pve {
			role Administrator
		}
		identity teamlead@pve {
			role PVEVMUser /pool/team-it
			role PVEDatastoreUser /pool/team-it
		}
		identity ghost@sso {
			role PVEVMUser /vms/100
		}
	}
}
`, permsPort, permsSecret)+fmt.Sprintf(`
https://localhost:%d {
	tls internal
	proxmox_api {
		simulate
		namespace default lab
		token %s %s
		auth_failure_delay 0s
		local_storage files {
			storage_class ceph-rbd
			max_upload 1M
		}
	}
}
`, fixedPort, testToken, testSecret))
		base := fmt.Sprintf("https://localhost:%d", port)
		testcaddy.WaitReady(t, base+"/")
		sharedAPI = &testcaddy.PVE{Base: base, C: testcaddy.Client()}
	})
	a := *sharedAPI
	a.T = t
	a.Auth = testcaddy.TokenAuth(testToken, testSecret)
	return &a
}
