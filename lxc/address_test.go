package lxc

import (
	"fmt"
	"testing"
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
