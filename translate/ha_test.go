package translate

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

func TestHARunStrategyAndStates(t *testing.T) {
	one := 1
	for _, tc := range []struct {
		state              string
		rs                 kubevirtv1.VirtualMachineRunStrategy
		managed            bool
		crm                string
		verboseUp, verbose string
	}{
		{"", kubevirtv1.RunStrategyAlways, true, "started", "started", "starting"},
		{"started", kubevirtv1.RunStrategyAlways, true, "started", "started", "starting"},
		{"enabled", kubevirtv1.RunStrategyAlways, true, "started", "started", "starting"},
		{"stopped", kubevirtv1.RunStrategyHalted, true, "stopped", "stopping", "stopped"},
		{"disabled", kubevirtv1.RunStrategyHalted, true, "stopped", "stopping", "disabled"},
		{"ignored", kubevirtv1.RunStrategyManual, false, "ignored", "ignored", "ignored"},
	} {
		c := HAConfig{State: tc.state, MaxRestart: &one}
		if got := HARunStrategy(tc.state); got != tc.rs {
			t.Errorf("%q: run strategy %s, want %s", tc.state, got, tc.rs)
		}
		if c.Managed() != tc.managed || HACRMState(c) != tc.crm || HAVerboseState(c, true) != tc.verboseUp || HAVerboseState(c, false) != tc.verbose {
			t.Errorf("%q: managed %v crm %q verbose %q/%q", tc.state, c.Managed(), HACRMState(c), HAVerboseState(c, true), HAVerboseState(c, false))
		}
	}
}

func TestHAConfigRoundTripAndDigest(t *testing.T) {
	two := 2
	c := HAConfig{State: "stopped", Group: "g1", MaxRelocate: &two, Comment: "db"}
	vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationHA: c.Encode()}}}
	got, ok := HAConfigOf(vm)
	if !ok || got.State != "stopped" || got.Group != "g1" || got.MaxRestart != nil || *got.MaxRelocate != 2 || got.Comment != "db" {
		t.Fatalf("round trip %+v %v", got, ok)
	}
	if c.Encode() != `{"state":"stopped","group":"g1","max_relocate":2,"comment":"db"}` {
		t.Fatalf("encoded %s", c.Encode())
	}
	if _, ok := HAConfigOf(&kubevirtv1.VirtualMachine{}); ok {
		t.Fatal("a VM without the annotation is an HA resource")
	}
	a := HADigest(map[string]HAConfig{"vm:100": c, "vm:101": {}})
	if a != HADigest(map[string]HAConfig{"vm:101": {}, "vm:100": c}) || a == HADigest(map[string]HAConfig{"vm:100": c}) || len(a) != 40 {
		t.Fatalf("digest %s", a)
	}
}

func TestParseSID(t *testing.T) {
	for _, tc := range []struct {
		sid  string
		typ  string
		vmid int
		err  string
	}{
		{"vm:100", "vm", 100, ""},
		{"100", "vm", 100, ""},
		{"ct:200", "ct", 200, ""},
		{"vm:abc", "", 0, "invalid VMID"},
		{"vm:0100", "", 0, "invalid VMID"},
		{"xx:100", "", 0, "no such resource type 'xx'"},
		{"vm 100", "", 0, "unable to parse service id 'vm 100'"},
	} {
		typ, id, err := ParseSID(tc.sid)
		if typ != tc.typ || id != tc.vmid || errText(err) != tc.err {
			t.Errorf("ParseSID(%q) = %q %d %v", tc.sid, typ, id, err)
		}
	}
}
