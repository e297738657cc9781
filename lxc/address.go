package lxc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"sort"
	"strconv"
	"strings"

	proxmox "github.com/luthermonson/go-proxmox"
)

// errNoAgent is a QEMU guest without a configured guest agent and without
// a static (cloud-init) address: its address cannot be discovered and
// must be given.
var errNoAgent = errors.New("no QEMU guest agent configured and no static ipconfig address: set address in proxmox_wake")

var macRE = regexp.MustCompile(`(?i)([0-9a-f]{2}(?::[0-9a-f]{2}){5})`)

// netIface is one interface of the guest's config (netN).
type netIface struct {
	mac  string // lower case; "" if the config has none
	name string // LXC: the name inside the container (eth0)
	// static are the addresses PVE configures on it: LXC ip=/ip6= in
	// netN, QEMU ip=/ip6= in ipconfigN (cloud-init).
	static []string
}

// netConfig is what a guest's config says about its network; it does not
// change while a wake discovers the address, so it is read once.
type netConfig struct {
	ifaces []netIface // in net0, net1... order
	agent  bool       // QEMU guest agent enabled
}

// parseNetConfig reads the netN (and, for QEMU, ipconfigN) entries of a
// guest config.
func parseNetConfig(cfg map[string]any) netConfig {
	var nc netConfig
	idx := netIndexes(cfg)
	for _, i := range idx {
		v, _ := cfg["net"+strconv.Itoa(i)].(string)
		var ifc netIface
		for _, part := range strings.Split(v, ",") {
			name, val, _ := strings.Cut(part, "=")
			switch {
			case name == "hwaddr" || name == "macaddr" || macRE.MatchString(val) && len(val) == 17:
				if m := macRE.FindString(val); m != "" && ifc.mac == "" {
					ifc.mac = strings.ToLower(m)
				}
			case name == "name":
				ifc.name = val
			case name == "ip" || name == "ip6":
				ifc.static = appendStatic(ifc.static, val)
			}
		}
		if ipc, ok := cfg["ipconfig"+strconv.Itoa(i)].(string); ok {
			for _, part := range strings.Split(ipc, ",") {
				if name, val, _ := strings.Cut(part, "="); name == "ip" || name == "ip6" {
					ifc.static = appendStatic(ifc.static, val)
				}
			}
		}
		nc.ifaces = append(nc.ifaces, ifc)
	}
	if a, ok := cfg["agent"]; ok {
		s := fmt.Sprint(a)
		nc.agent = s != "0" && !strings.HasPrefix(s, "0,") && !strings.Contains(s, "enabled=0")
	}
	return nc
}

// netIndexes are the N of the config's netN keys, in order.
func netIndexes(cfg map[string]any) []int {
	var idx []int
	for k := range cfg {
		if n, ok := strings.CutPrefix(k, "net"); ok && n != "" {
			if i, err := strconv.Atoi(n); err == nil && i >= 0 && strconv.Itoa(i) == n {
				idx = append(idx, i)
			}
		}
	}
	sort.Ints(idx)
	return idx
}

// appendStatic adds a static address ("10.0.0.5/24"; not dhcp, auto or
// manual).
func appendStatic(list []string, val string) []string {
	if ip, _, err := net.ParseCIDR(val); err == nil && usable(ip.String()) {
		return append(list, ip.String())
	}
	return list
}

// macs are the configured MACs, in netN order.
func (nc netConfig) macs() []string {
	var out []string
	for _, i := range nc.ifaces {
		if i.mac != "" {
			out = append(out, i.mac)
		}
	}
	return out
}

// static is the configured static address: the first IPv4 of the
// interfaces in order, else the first IPv6.
func (nc netConfig) static() string {
	var cands []candidate
	for _, i := range nc.ifaces {
		for _, ip := range i.static {
			cands = append(cands, candidate{mac: i.mac, name: i.name, ip: ip})
		}
	}
	return pick(nc, cands)
}

func readNetConfig(ctx context.Context, c *proxmox.Client, t target) (netConfig, error) {
	var cfg map[string]any
	if err := c.Get(ctx, t.path("config"), &cfg); err != nil {
		return netConfig{}, fmt.Errorf("reading config: %w", err)
	}
	return parseNetConfig(cfg), nil
}

// candidate is an address a guest reports on an interface.
type candidate struct{ mac, name, ip string }

// lxcIface is a row of /nodes/{n}/lxc/{id}/interfaces: current PVE sends
// "ip-addresses" (families inet, inet6), older releases only hwaddr, inet
// and inet6 (one address each).
type lxcIface struct {
	Name            string    `json:"name"`
	HWAddr          string    `json:"hwaddr"`
	HardwareAddress string    `json:"hardware-address"`
	Inet            string    `json:"inet"`
	Inet6           string    `json:"inet6"`
	IPAddresses     []lxcAddr `json:"ip-addresses"`
}

type lxcAddr struct {
	Addr string `json:"ip-address"`
}

func (i lxcIface) candidates() []candidate {
	mac := strings.ToLower(i.HardwareAddress)
	if mac == "" {
		mac = strings.ToLower(i.HWAddr)
	}
	var out []candidate
	if len(i.IPAddresses) > 0 {
		for _, a := range i.IPAddresses {
			out = append(out, candidate{mac: mac, name: i.Name, ip: a.Addr})
		}
		return out
	}
	for _, cidr := range []string{i.Inet, i.Inet6} {
		if ip, _, ok := strings.Cut(cidr, "/"); ok || ip != "" {
			out = append(out, candidate{mac: mac, name: i.Name, ip: ip})
		}
	}
	return out
}

// discoverAddress finds the guest's IP: for LXC, the config's interfaces
// matched against /interfaces (works with DHCP), else its static ip=;
// for QEMU, see discoverQEMU. An empty result without error means "not
// known yet" (the guest is still configuring its network), so the
// caller retries. A 401/403 is returned as is: the caller ends the wake.
// confirm, when not nil, tells whether the guest's service answers at an
// address (the readiness probe).
func discoverAddress(ctx context.Context, c *proxmox.Client, t target, nc netConfig, confirm func(host string) bool) (string, error) {
	if t.kind == "qemu" {
		return discoverQEMU(ctx, c, t, nc, confirm)
	}
	static := nc.static()
	var ifaces []lxcIface
	if err := c.Get(ctx, t.path("interfaces"), &ifaces); err != nil {
		if isPermission(err) {
			return "", err
		}
		return static, nil
	}
	var cands []candidate
	for _, ifc := range ifaces {
		cands = append(cands, ifc.candidates()...)
	}
	if a := pick(nc, cands); a != "" {
		return a, nil
	}
	return static, nil
}

// discoverQEMU finds a VM's address. The guest agent's word comes first:
// an address it reports on the config's interfaces (matched by MAC) is
// where the guest is. cloud-init's static ipconfigN is the address
// configured inside the guest: on a bridged PVE network it is the
// reachable one too, but behind NAT (KubeVirt's masquerade pod network
// through proxmox_api, a PVE NAT bridge) it is not. So ipconfigN serves
// without asking when the agent cannot answer (none configured, or no
// privilege to ask it: a static VM needs none), and, while the agent is
// not running yet or reports no address there, once the service answers
// at it (confirm): an agent enabled in the config but never installed in
// the guest must not keep a static VM from waking.
func discoverQEMU(ctx context.Context, c *proxmox.Client, t target, nc netConfig, confirm func(host string) bool) (string, error) {
	static := nc.static()
	if !nc.agent {
		if static != "" {
			return static, nil
		}
		return "", errNoAgent
	}
	ifaces, err := c.NodeRef(t.node).VirtualMachineRef(t.vmid).AgentGetNetworkIFaces(ctx)
	switch {
	case isPermission(err) && static != "":
		return static, nil
	case isPermission(err):
		return "", err
	case err != nil && strings.Contains(err.Error(), "No QEMU guest agent configured"):
		if static != "" {
			return static, nil
		}
		return "", errNoAgent
	case err == nil:
		var cands []candidate
		for _, ifc := range ifaces {
			for _, a := range ifc.IPAddresses {
				if a != nil {
					cands = append(cands, candidate{mac: strings.ToLower(ifc.HardwareAddress), name: ifc.Name, ip: a.IPAddress})
				}
			}
		}
		if a := pick(nc, cands); a != "" {
			return a, nil
		}
	}
	// "QEMU guest agent is not running" (the VM boots, or has no agent
	// installed), or no address on the configured interfaces yet.
	if static != "" && (confirm == nil || confirm(static)) {
		return static, nil
	}
	return "", nil
}

// pick returns the address to proxy to. When the config lists
// interfaces, only theirs count (matched by MAC, or by LXC name=): another
// interface's address (a Docker bridge such as 172.17.0.1, which may be
// Caddy's own host) is never taken. IPv4 comes first, in netN order;
// IPv6 only when no configured interface has IPv4. A config without
// interfaces takes any usable address but lo's.
func pick(nc netConfig, cands []candidate) string {
	match := func(ifc netIface, c candidate) bool {
		return (ifc.mac != "" && c.mac == ifc.mac) || (ifc.name != "" && c.name == ifc.name)
	}
	ordered := make([]candidate, 0, len(cands))
	if len(nc.ifaces) == 0 {
		for _, c := range cands {
			if c.name != "lo" {
				ordered = append(ordered, c)
			}
		}
	}
	for _, ifc := range nc.ifaces {
		for _, c := range cands {
			if match(ifc, c) {
				ordered = append(ordered, c)
			}
		}
	}
	for _, v6 := range []bool{false, true} {
		for _, c := range ordered {
			if usable(c.ip) && strings.Contains(c.ip, ":") == v6 {
				return c.ip
			}
		}
	}
	return ""
}

// usable: an address one can proxy to from another host: not
// unspecified, link-local, multicast or 127.0.0.1.
func usable(ip string) bool {
	p := net.ParseIP(ip)
	return p != nil && !p.IsUnspecified() && !p.IsLinkLocalUnicast() && !p.IsMulticast() &&
		!(p.IsLoopback() && p.Equal(net.IPv4(127, 0, 0, 1)))
}
