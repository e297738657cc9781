package pvesim

import (
	"context"
	"github.com/caddy-proxmox/caddy-proxmox/internal/testutil"
	"io"
	"net/http"
	"testing"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"
)

// A guest's load shows in /cluster/resources as pvestatd measures it: CPU
// and counters as of the last round, counters since the guest started
// (a restart resets them), bytes its service exchanged included; status/
// current is live.
func TestUsageCounters(t *testing.T) {
	s := New(Options{TaskDelay: 10 * time.Millisecond, StatInterval: 200 * time.Millisecond})
	port := testutil.FreePort(t)
	if err := s.AddGuest(GuestSpec{VMID: 100, IP: "127.0.0.63", Port: port, Running: true}); err != nil {
		t.Fatal(err)
	}
	url, err := s.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := proxmox.NewClient(url+"/api2/json", proxmox.WithAPIToken(s.TokenID(), s.TokenSecret()))
	ctx := context.Background()
	row := func() *proxmox.ClusterResource {
		t.Helper()
		cl, err := c.Cluster(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := cl.Resources(ctx, "vm")
		if err != nil || len(rs) != 1 {
			t.Fatalf("resources %v %v", rs, err)
		}
		return rs[0]
	}
	if r := row(); r.CPU != 0 || r.NetIn != 0 || r.DiskWrite != 0 {
		t.Fatalf("idle guest: %+v", r)
	}
	s.SetLoad(100, Load{CPU: 0.4, NetIn: 1e6, NetOut: 2e6, DiskRead: 3e6, DiskWrite: 4e6})
	// Within one round the row does not change; across rounds it grows
	// by the load times the rounds' spacing.
	waitRound := func() { time.Sleep(s.statRoundLocked(time.Now()).Add(210 * time.Millisecond).Sub(time.Now())) }
	waitRound()
	a := row()
	b := row()
	if a.NetIn != b.NetIn || a.CPU != 0.4 {
		t.Fatalf("within a round: %+v then %+v", a, b)
	}
	waitRound()
	b = row()
	if d := b.DiskWrite - a.DiskWrite; d < 4e6*0.19 || d > 4e6*0.21 {
		t.Fatalf("diskwrite grew %d in a 200ms round, want 800k", d)
	}
	if d := b.NetOut - a.NetOut; d < 2e6*0.19 || d > 2e6*0.21 {
		t.Fatalf("netout grew %d in a 200ms round, want 400k", d)
	}
	// Served bytes count as network traffic.
	s.SetLoad(100, Load{})
	waitRound()
	before := row()
	res, err := http.Get("http://" + s.Addr(100) + "/hello")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	waitRound()
	after := row()
	if after.NetOut-before.NetOut < uint64(len(body)) || after.NetIn == before.NetIn || after.CPU != 0 {
		t.Fatalf("served bytes not counted: %+v then %+v", before, after)
	}
	// A restart resets the counters.
	if err := s.StopGuest(100); err != nil {
		t.Fatal(err)
	}
	if r := row(); r.NetIn != 0 || r.Status != "stopped" {
		t.Fatalf("stopped guest: %+v", r)
	}
	_ = s.StartGuest(100)
	waitRound()
	if r := row(); r.NetIn >= after.NetIn || r.Status != "running" {
		t.Fatalf("restarted guest kept its counters: %+v", r)
	}
}
