package kube

import (
	"testing"
	"time"
)

// ReserveNextVMID hands each id out once per hold, per cluster: two
// clients asking at once get different ids, another cluster's holds do
// not count, and an id comes back once its hold has passed.
func TestReserveNextVMID(t *testing.T) {
	c := tableCluster(vmWithID("n", "a", "100", 0))
	other := tableCluster(vmWithID("n", "a", "100", 0))
	t0 := time.Now()
	next := func(c *Cluster, at time.Duration) int {
		t.Helper()
		id, ok := c.reserveNextVMID(100, t0.Add(at))
		if !ok {
			t.Fatal("no id")
		}
		return id
	}
	if a, b := next(c, 0), next(c, time.Second); a != 101 || b != 102 {
		t.Fatalf("two asks: %d, %d; want 101, 102", a, b)
	}
	if id := next(other, time.Second); id != 101 {
		t.Fatalf("another cluster: %d, want 101 (holds are per cluster)", id)
	}
	if id := next(c, nextIDHold-time.Millisecond); id != 103 {
		t.Fatalf("within the hold: %d, want 103", id)
	}
	if id := next(c, nextIDHold); id != 101 {
		t.Fatalf("after 101's hold: %d, want 101 again", id)
	}
	if id, ok := c.ReserveNextVMID(100); !ok || id < 101 {
		t.Fatalf("ReserveNextVMID = %d, %v", id, ok)
	}
}
