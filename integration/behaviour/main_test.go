// Package behaviour runs one behavioural suite through ./caddy on two
// backends and fails on any difference between them:
//
//   - sim: proxmox_api's embedded simulated cluster (simulate), which is
//     kubevirtsim over in-memory clients;
//   - real: a test cluster with the real control plane (internal/
//     realcluster: testenv with KubeVirtControllers, kubevirtsim.Nodes
//     standing in only for what needs a node), seeded with the simulated
//     cluster's nodes, storage classes and namespaces, so that both offer
//     the same nodes and storages.
//
// Each case (cases_test.go) is a sequence of Proxmox API calls on its own
// VMs; what a client sees of each (normalize.go) must be the same on both.
// A case whose difference is a known product or stand-in divergence is
// listed in known-divergences.txt with its cause: it must still differ
// (a listed case that agrees fails, so that the list shrinks with the
// fixes), and only in the steps recorded there.
package behaviour

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/internal/realcluster"
	"github.com/caddy-proxmox/caddy-proxmox/testenv"
)

var (
	env *testenv.Env
	// only runs the cases whose name matches (go test -run is for tests,
	// -case for the cases of TestBehaviour).
	only = flag.String("case", "", "run only the cases whose name contains this")
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() && os.Getenv("CI") == "" {
		fmt.Println("behaviour: skipped in -short mode")
		os.Exit(0)
	}
	testenv.Main(m, realcluster.Options(), func(e *testenv.Env) int {
		env = e
		fmt.Printf("behaviour: real control plane started in %v\n", e.StartDuration.Round(100*time.Millisecond))
		if err := realcluster.SeedLikeSimulation(context.Background(), e); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: seed:", err)
			return 1
		}
		return m.Run()
	})
}
