package kubevirtsim

import (
	"fmt"
	"maps"
	"testing"

	virtv1 "kubevirt.io/api/core/v1"
)

// TestMetricsReaders: a reading off the controller's caches
// (Controller.Metrics) is the reading through the clients (NewMetrics):
// the running instances and their nodes, the stopped VM left out.
func TestMetricsReaders(t *testing.T) {
	e := newEnv(t).run(Options{})
	e.createVM(testVM("up", virtv1.RunStrategyAlways))
	e.createVM(testVM("down", virtv1.RunStrategyHalted))
	vmi := e.waitRunning("up")
	e.synced("down")
	cached := e.c.Metrics()
	listed := NewMetrics(e.k8s, e.kv)
	eventually(t, "both readers to agree", func() (bool, string) {
		cn, cg, err := cached.Sample(e.ctx, []string{testNS})
		if err != nil {
			t.Fatal(err)
		}
		ln, lg, err := listed.Sample(e.ctx, []string{testNS})
		if err != nil {
			t.Fatal(err)
		}
		_, running := cg[testNS+"/up"]
		agree := maps.Equal(cn, ln) && maps.Equal(cg, lg) && len(cg) == 1 && running && cn[vmi.Status.NodeName].CPUCores > nodeBaseCores
		return agree, fmt.Sprintf("cached %v %v, listed %v %v", cn, cg, ln, lg)
	})
}
