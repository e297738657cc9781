package lxc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"sort"
	"strings"

	proxmox "github.com/luthermonson/go-proxmox"
)

// errNoAgent is a QEMU guest without a configured guest agent: its
// address cannot be discovered and must be given.
var errNoAgent = errors.New("no QEMU guest agent configured: set address in proxmox_wake")

var macRE = regexp.MustCompile(`(?i)([0-9a-f]{2}(?::[0-9a-f]{2}){5})`)

// configMACs returns the MAC addresses of the guest's netN entries, in
// net0, net1... order, plus any static IPv4 (LXC ip=a.b.c.d/nn).
func configMACs(cfg map[string]any) (macs []string, static []string) {
	keys := make([]string, 0, len(cfg))
	for k := range cfg {
		if strings.HasPrefix(k, "net") && len(k) > 3 && k[3] >= '0' && k[3] <= '9' {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, _ := cfg[k].(string)
		for _, part := range strings.Split(v, ",") {
			name, val, _ := strings.Cut(part, "=")
			switch {
			case name == "hwaddr" || macRE.MatchString(val) && len(val) == 17:
				if m := macRE.FindString(val); m != "" {
					macs = append(macs, strings.ToLower(m))
				}
			case name == "ip" && val != "dhcp" && val != "manual":
				if ip, _, err := net.ParseCIDR(val); err == nil {
					static = append(static, ip.String())
				}
			}
		}
	}
	return macs, static
}

// netConfig is what a guest's config says about its network; it does not
// change while a wake discovers the address, so it is read once.
type netConfig struct {
	macs, static []string
	agent        bool // QEMU guest agent enabled
}

func readNetConfig(ctx context.Context, c *proxmox.Client, t target) (netConfig, error) {
	var cfg map[string]any
	if err := c.Get(ctx, t.path("config"), &cfg); err != nil {
		return netConfig{}, fmt.Errorf("reading config: %w", err)
	}
	var nc netConfig
	nc.macs, nc.static = configMACs(cfg)
	if a, ok := cfg["agent"]; ok {
		s := fmt.Sprint(a)
		nc.agent = s != "0" && !strings.HasPrefix(s, "0,") && !strings.Contains(s, "enabled=0")
	}
	return nc, nil
}

// candidate is an address a guest reports on an interface.
type candidate struct{ mac, ip string }

// discoverAddress finds the guest's IP: for LXC, the config's MAC matched
// against /interfaces (works with DHCP); for QEMU, the config's MAC
// matched against the guest agent's interfaces. An empty result without
// error means "not known yet" (the guest is still configuring its
// network), so the caller retries.
func discoverAddress(ctx context.Context, c *proxmox.Client, t target, nc netConfig) (string, error) {
	if t.kind == "qemu" {
		if !nc.agent {
			if len(nc.static) > 0 {
				return nc.static[0], nil
			}
			return "", errNoAgent
		}
		ifaces, err := c.NodeRef(t.node).VirtualMachineRef(t.vmid).AgentGetNetworkIFaces(ctx)
		if err != nil {
			if strings.Contains(err.Error(), "No QEMU guest agent configured") {
				return "", errNoAgent
			}
			// "QEMU guest agent is not running" while the VM boots.
			return "", nil
		}
		var cands []candidate
		for _, ifc := range ifaces {
			for _, a := range ifc.IPAddresses {
				if a == nil || a.IPAddressType != "ipv4" {
					continue
				}
				cands = append(cands, candidate{strings.ToLower(ifc.HardwareAddress), a.IPAddress})
			}
		}
		return pick(nc.macs, cands), nil
	}
	var ifaces proxmox.ContainerInterfaces
	if err := c.Get(ctx, t.path("interfaces"), &ifaces); err != nil {
		if len(nc.static) > 0 {
			return nc.static[0], nil
		}
		return "", nil
	}
	var cands []candidate
	for _, ifc := range ifaces {
		if ifc == nil || ifc.Name == "lo" || ifc.Inet == "" {
			continue
		}
		ip := ifc.Inet
		if i := strings.IndexByte(ip, '/'); i >= 0 {
			ip = ip[:i]
		}
		cands = append(cands, candidate{strings.ToLower(ifc.HWAddr), ip})
	}
	if a := pick(nc.macs, cands); a != "" {
		return a, nil
	}
	if len(nc.static) > 0 {
		return nc.static[0], nil
	}
	return "", nil
}

// pick returns the IP of the first candidate whose MAC is the first
// configured MAC that has any, else the first usable candidate.
func pick(macs []string, cands []candidate) string {
	usable := func(ip string) bool {
		p := net.ParseIP(ip)
		return p != nil && !p.IsUnspecified() && !p.IsLinkLocalUnicast() && !(p.IsLoopback() && p.Equal(net.IPv4(127, 0, 0, 1)))
	}
	for _, m := range macs {
		for _, c := range cands {
			if c.mac == m && usable(c.ip) {
				return c.ip
			}
		}
	}
	for _, c := range cands {
		if usable(c.ip) {
			return c.ip
		}
	}
	return ""
}
