package lxc

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testutil"
	"github.com/caddy-proxmox/caddy-proxmox/pvesim"
)

func TestParseNetConfig(t *testing.T) {
	nc := parseNetConfig(map[string]any{
		"net1": "name=eth1,bridge=vmbr1,hwaddr=BC:24:11:00:00:02,ip=10.0.0.5/24,ip6=fd00::5/64,type=veth",
		"net0": "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01,ip=dhcp,ip6=auto,type=veth",
		"nets": "x", "net01": "hwaddr=BC:24:11:00:00:09",
	})
	if fmt.Sprint(nc.macs()) != "[bc:24:11:00:00:01 bc:24:11:00:00:02]" || nc.ifaces[0].name != "eth0" ||
		fmt.Sprint(nc.ifaces[1].static) != "[10.0.0.5 fd00::5]" || nc.static() != "10.0.0.5" {
		t.Fatalf("lxc %+v", nc)
	}
	nc = parseNetConfig(map[string]any{
		"net0": "virtio=BC:24:11:AA:BB:CC,bridge=vmbr0,firewall=1", "ipconfig0": "ip=192.0.2.7/24,gw=192.0.2.1",
		"net1": "e1000=BC:24:11:AA:BB:CD,bridge=vmbr1", "ipconfig1": "ip6=2001:db8::7/64,gw6=2001:db8::1",
		"agent": "0",
	})
	if fmt.Sprint(nc.macs()) != "[bc:24:11:aa:bb:cc bc:24:11:aa:bb:cd]" || nc.static() != "192.0.2.7" || nc.agent {
		t.Fatalf("qemu %+v", nc)
	}
	nc = parseNetConfig(map[string]any{"net0": "virtio=BC:24:11:AA:BB:CC", "ipconfig0": "ip=dhcp,ip6=2001:db8::7/64", "agent": "enabled=1,fstrim_cloned_disks=1"})
	if nc.static() != "2001:db8::7" || !nc.agent {
		t.Fatalf("IPv6-only cloud-init %+v", nc)
	}
	if nc := parseNetConfig(map[string]any{"agent": "1,type=virtio"}); !nc.agent || len(nc.ifaces) != 0 {
		t.Fatalf("agent %+v", nc)
	}
}

func TestPick(t *testing.T) {
	eth0 := netIface{mac: "bc:24:11:00:00:01", name: "eth0"}
	eth1 := netIface{mac: "bc:24:11:00:00:02"}
	docker := candidate{mac: "02:42:ac:11:00:01", name: "docker0", ip: "172.17.0.1"}
	lo := candidate{mac: "00:00:00:00:00:00", name: "lo", ip: "127.0.0.1"}
	for _, c := range []struct {
		name   string
		ifaces []netIface
		cands  []candidate
		want   string
	}{
		{"the configured MAC", []netIface{eth0}, []candidate{lo, docker, {"bc:24:11:00:00:01", "eth0", "10.2.2.2"}}, "10.2.2.2"},
		{"no lease yet: never the Docker bridge", []netIface{eth0}, []candidate{lo, docker, {"bc:24:11:00:00:01", "eth0", "fe80::1"}}, ""},
		{"by name when the MAC differs", []netIface{eth0}, []candidate{docker, {"", "eth0", "10.2.2.3"}}, "10.2.2.3"},
		{"IPv4 first across interfaces", []netIface{eth0, eth1}, []candidate{{"bc:24:11:00:00:01", "eth0", "2001:db8::1"}, {"bc:24:11:00:00:02", "ens19", "10.3.3.3"}}, "10.3.3.3"},
		{"IPv6 when only that", []netIface{eth0}, []candidate{{"bc:24:11:00:00:01", "eth0", "fe80::be24:11ff:fe00:1"}, {"bc:24:11:00:00:01", "eth0", "2001:db8::1"}}, "2001:db8::1"},
		{"net0 before net1", []netIface{eth0, eth1}, []candidate{{"bc:24:11:00:00:02", "eth1", "10.9.9.9"}, {"bc:24:11:00:00:01", "eth0", "10.1.1.1"}}, "10.1.1.1"},
		{"no configured interfaces: any but lo", nil, []candidate{lo, {"aa", "ens18", "10.4.4.4"}}, "10.4.4.4"},
		{"link-local and unspecified never", []netIface{eth0}, []candidate{{"bc:24:11:00:00:01", "eth0", "169.254.1.1"}, {"bc:24:11:00:00:01", "eth0", "0.0.0.0"}}, ""},
	} {
		if got := pick(netConfig{ifaces: c.ifaces}, c.cands); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestLXCInterfaceFormats(t *testing.T) {
	cur := lxcIface{Name: "eth0", HardwareAddress: "BC:24:11:00:00:01", Inet: "10.0.0.9/24", IPAddresses: []lxcAddr{{"10.0.0.8"}, {"fd00::8"}}}
	if got := fmt.Sprint(cur.candidates()); got != "[{bc:24:11:00:00:01 eth0 10.0.0.8} {bc:24:11:00:00:01 eth0 fd00::8}]" {
		t.Fatalf("current format: %s", got)
	}
	old := lxcIface{Name: "eth0", HWAddr: "bc:24:11:00:00:01", Inet6: "fd00::9/64"}
	if got := fmt.Sprint(old.candidates()); got != "[{bc:24:11:00:00:01 eth0 fd00::9}]" {
		t.Fatalf("older format: %s", got)
	}
}

// A VM's address: what its guest agent reports on the config's interfaces
// comes before cloud-init's ipconfig0, which is the address inside the
// guest (behind KubeVirt's masquerade pod network, 10.0.2.2, not one to
// proxy to). ipconfig0 serves when the agent cannot answer, and while it
// does not (yet), once the service answers there.
func TestDiscoverQEMU(t *testing.T) {
	const ip = "127.0.0.170"
	type want struct {
		addr   string
		err    string
		agents int // agent calls made
	}
	for _, c := range []struct {
		name    string
		spec    pvesim.GuestSpec
		privs   []string // nil: all
		answers string   // where the service answers (confirm); "" nowhere
		noProbe bool     // confirm nil (pre_stop_check's lookup)
		want    want
	}{
		{name: "NAT: the agent's address, not ipconfig0's",
			spec: pvesim.GuestSpec{CloudInit: true, CloudInitIP: "10.0.2.2"}, answers: "10.0.2.2", want: want{ip, "", 1}},
		{name: "bridged: the agent reports ipconfig0's address",
			spec: pvesim.GuestSpec{CloudInit: true}, want: want{ip, "", 1}},
		{name: "agent booting, NAT address not answering: wait",
			spec: pvesim.GuestSpec{CloudInit: true, CloudInitIP: "10.0.2.2", BootDelay: time.Hour}, want: want{"", "", 1}},
		{name: "agent never installed: ipconfig0 once the service answers there",
			spec: pvesim.GuestSpec{CloudInit: true, AgentNotRunning: true}, answers: ip, want: want{ip, "", 1}},
		{name: "agent never installed, service not up yet: wait",
			spec: pvesim.GuestSpec{CloudInit: true, AgentNotRunning: true}, want: want{"", "", 1}},
		{name: "agent not running, no probe to confirm: ipconfig0",
			spec: pvesim.GuestSpec{CloudInit: true, AgentNotRunning: true}, noProbe: true, want: want{ip, "", 1}},
		{name: "no agent configured: ipconfig0 without asking",
			spec: pvesim.GuestSpec{CloudInit: true, CloudInitIP: "10.0.2.2", NoAgent: true}, want: want{"10.0.2.2", "", 0}},
		{name: "no agent privilege: ipconfig0, as PVE users were promised",
			spec: pvesim.GuestSpec{CloudInit: true}, privs: []string{"VM.Audit", "VM.PowerMgmt"}, want: want{ip, "", 1}},
		{name: "no agent privilege and no ipconfig0: the permission error",
			spec: pvesim.GuestSpec{}, privs: []string{"VM.Audit", "VM.PowerMgmt"}, want: want{"", "403", 1}},
		{name: "no agent configured and no ipconfig0: address needed",
			spec: pvesim.GuestSpec{NoAgent: true}, want: want{"", "set address", 0}},
		{name: "DHCP, agent booting: wait",
			spec: pvesim.GuestSpec{BootDelay: time.Hour}, answers: ip, want: want{"", "", 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sim := pvesim.New(pvesim.Options{})
			spec := c.spec
			spec.VMID, spec.Kind, spec.IP, spec.Running = 170, "qemu", ip, true
			spec.Port = testutil.FreePort(t)
			if err := sim.AddGuest(spec); err != nil {
				t.Fatal(err)
			}
			if c.privs != nil {
				sim.SetPrivileges("/vms", c.privs...)
			}
			url, err := sim.Listen("127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer sim.Close()
			client, err := newClient(ClusterConfig{RequestTimeout: 5 * time.Second}, []string{url}, sim.TokenID(), sim.TokenSecret())
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			tgt := target{node: sim.Node(170), kind: "qemu", vmid: 170}
			nc, err := readNetConfig(ctx, client, tgt)
			if err != nil {
				t.Fatal(err)
			}
			var probed []string
			confirm := func(h string) bool { probed = append(probed, h); return h == c.answers }
			if c.noProbe {
				confirm = nil
			}
			got, err := discoverAddress(ctx, client, tgt, nc, confirm)
			if got != c.want.addr || (err == nil) != (c.want.err == "") || (err != nil && !strings.Contains(err.Error(), c.want.err)) {
				t.Fatalf("%q, %v; want %q, %q (probed %v)", got, err, c.want.addr, c.want.err, probed)
			}
			if n := sim.CallsMatching("/agent/network-get-interfaces"); n != c.want.agents {
				t.Errorf("agent asked %d times, want %d", n, c.want.agents)
			}
			if slices.Contains(probed, "10.0.2.2") && got == ip {
				t.Errorf("probed the NAT address although the agent answered: %v", probed)
			}
		})
	}
}
