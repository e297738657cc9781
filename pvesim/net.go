package pvesim

import (
	"fmt"
	"net"
	"strings"
	"time"
)

// ifaceAddr is one address on an interface inside a guest.
type ifaceAddr struct {
	ip     string
	prefix int
}

func (a ifaceAddr) v6() bool { return strings.Contains(a.ip, ":") }

// guestIface is an interface as the guest's kernel reports it.
type guestIface struct {
	name, mac string
	addrs     []ifaceAddr
}

// ifacesLocked lists the guest's interfaces: lo, eth0 (the config's
// net0; its address only once the lease came, LeaseDelay after the
// start, a link-local one from the start) and the extra ones.
func (g *guest) ifacesLocked() []guestIface {
	mac := strings.ToLower(g.mac)
	hw, _ := net.ParseMAC(mac)
	eth0 := guestIface{name: "eth0", mac: mac}
	if time.Since(g.since) >= g.spec.LeaseDelay {
		prefix := 8
		if g.ipv6() {
			prefix = 128
		}
		eth0.addrs = append(eth0.addrs, ifaceAddr{g.spec.IP, prefix})
	}
	eth0.addrs = append(eth0.addrs, ifaceAddr{fmt.Sprintf("fe80::be24:11ff:fe%02x:%02x%02x", hw[3], hw[4], hw[5]), 64})
	out := []guestIface{
		{name: "lo", mac: "00:00:00:00:00:00", addrs: []ifaceAddr{{"127.0.0.1", 8}, {"::1", 128}}},
		eth0,
	}
	for _, x := range g.spec.ExtraIfaces {
		prefix := 16
		if strings.Contains(x.IP, ":") {
			prefix = 64
		}
		out = append(out, guestIface{name: x.Name, mac: strings.ToLower(x.MAC), addrs: []ifaceAddr{{x.IP, prefix}}})
	}
	return out
}

// lxcInterfacesLocked is GET /nodes/{n}/lxc/{id}/interfaces as
// pve-container's get_interfaces answers it: "ip-addresses" with the
// families of `ip --json a` (inet, inet6), plus the older hwaddr, inet and
// inet6 keys (the last address of each family).
func (g *guest) lxcInterfacesLocked() []map[string]any {
	rows := []map[string]any{}
	for _, ifc := range g.ifacesLocked() {
		row := map[string]any{"name": ifc.name, "hwaddr": ifc.mac, "hardware-address": ifc.mac}
		list := []map[string]any{}
		for _, a := range ifc.addrs {
			fam := "inet"
			if a.v6() {
				fam = "inet6"
			}
			row[fam] = fmt.Sprintf("%s/%d", a.ip, a.prefix)
			list = append(list, map[string]any{"ip-address-type": fam, "ip-address": a.ip, "prefix": a.prefix})
		}
		row["ip-addresses"] = list
		rows = append(rows, row)
	}
	return rows
}

// agentInterfacesLocked is the guest agent's network-get-interfaces.
func (g *guest) agentInterfacesLocked() map[string]any {
	rows := []map[string]any{}
	for _, ifc := range g.ifacesLocked() {
		list := []map[string]any{}
		for _, a := range ifc.addrs {
			typ := "ipv4"
			if a.v6() {
				typ = "ipv6"
			}
			list = append(list, map[string]any{"ip-address-type": typ, "ip-address": a.ip, "prefix": a.prefix})
		}
		rows = append(rows, map[string]any{"name": ifc.name, "hardware-address": ifc.mac, "ip-addresses": list})
	}
	return map[string]any{"result": rows}
}
