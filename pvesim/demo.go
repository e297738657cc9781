package pvesim

import "time"

// NewDemo is the embedded demo cluster: node pve1 with two LXC containers
// (100 "web", 101 "wiki") and a QEMU VM (200 "app") with a guest agent,
// all stopped, serving HTTP on 127.0.0.2-4 port 8080 once started; wiki
// and app carry the tag caddy-wake (placeholder references serve them).
// Starts take about two seconds so that the loading page can be seen.
func NewDemo(name string) *Sim {
	s := New(Options{ClusterName: name, Nodes: []string{"pve1"}, TaskDelay: 300 * time.Millisecond})
	for _, g := range []GuestSpec{
		{VMID: 100, Kind: "lxc", Name: "web", StartDelay: 1200 * time.Millisecond, BootDelay: 800 * time.Millisecond},
		{VMID: 101, Kind: "lxc", Name: "wiki", StartDelay: 1500 * time.Millisecond, BootDelay: time.Second, Tags: []string{"caddy-wake"}},
		{VMID: 200, Kind: "qemu", Name: "app", StartDelay: 2 * time.Second, BootDelay: 1500 * time.Millisecond, Tags: []string{"caddy-wake"}},
	} {
		if err := s.AddGuest(g); err != nil {
			panic(err) // static specs
		}
	}
	return s
}
