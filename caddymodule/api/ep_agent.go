package api

import (
	"net"
	"net/http"
	"strings"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

func (h *APIHandler) getAgentIndex(q *request) (any, *apiError) {
	if _, e := h.guest(q); e != nil {
		return nil, e
	}
	return []map[string]string{{"name": "get-osinfo"}, {"name": "network-get-interfaces"}, {"name": "ping"}, {"name": "get-host-name"}}, nil
}

// agentReady applies PVE's checks, in PVE's order and words: the agent
// must be configured, the VM running, and the agent answering (KubeVirt's
// AgentConnected condition).
func agentReady(g kube.Guest) *apiError {
	if !translate.AgentEnabled(translate.AgentConfig(g.VM())) {
		return newError(http.StatusInternalServerError, "No QEMU guest agent configured")
	}
	if g.InstanceMeta() == nil || g.InstanceMeta().Status.Phase != kubevirtv1.Running {
		return newError(http.StatusInternalServerError, "VM %d is not running", g.VMID)
	}
	for _, c := range g.InstanceMeta().Status.Conditions {
		if c.Type == kubevirtv1.VirtualMachineInstanceAgentConnected && c.Status == corev1.ConditionTrue {
			return nil
		}
	}
	return newError(http.StatusInternalServerError, "QEMU guest agent is not running")
}

// getAgent answers the agent commands KubeVirt reports in VMI status.
func (h *APIHandler) getAgent(q *request) (any, *apiError) {
	g, e := h.guest(q)
	if e != nil {
		return nil, e
	}
	cmd := q.pathValue("command")
	switch cmd {
	case "ping", "network-get-interfaces", "get-osinfo", "get-host-name":
	default:
		return nil, newError(http.StatusNotImplemented, "Method '%s %s' not implemented", q.r.Method, strings.TrimPrefix(q.r.URL.Path, "/api2/json"))
	}
	if e := agentReady(g); e != nil {
		return nil, e
	}
	st := g.VMI().Status
	switch cmd {
	case "ping":
		return map[string]any{"result": map[string]any{}}, nil
	case "get-host-name":
		name := g.VMI().Spec.Hostname
		if name == "" {
			name = g.Name()
		}
		return map[string]any{"result": map[string]string{"host-name": name}}, nil
	case "get-osinfo":
		os := st.GuestOSInfo
		return map[string]any{"result": map[string]string{
			"name": os.Name, "pretty-name": os.PrettyName, "version": os.Version, "version-id": os.VersionID,
			"id": os.ID, "kernel-release": os.KernelRelease, "kernel-version": os.KernelVersion, "machine": os.Machine,
		}}, nil
	}
	return map[string]any{"result": guestInterfaces(st.Interfaces)}, nil
}

// guestInterfaces is qemu-ga's guest-network-get-interfaces as PVE's agent
// passthrough answers it: the interfaces the guest reports, under the
// guest's names, lo first (KubeVirt's agent poller drops it). KubeVirt
// lists them in status.interfaces: the VM's NICs the agent matched by MAC
// (with interfaceName), then up to ten that exist only in the guest
// (bridges, docker0: no name). A NIC the agent did not report (no
// interfaceName) is none of the guest's, and an interface without a MAC
// (a tunnel) has no hardware-address, as qemu-ga leaves it out.
// KubeVirt reports no prefixes: /24 and /64 stand in.
func guestInterfaces(status []kubevirtv1.VirtualMachineInstanceNetworkInterface) []map[string]any {
	ifaces := []map[string]any{{
		"name": "lo", "hardware-address": "00:00:00:00:00:00",
		"ip-addresses": []map[string]any{
			{"ip-address": "127.0.0.1", "ip-address-type": "ipv4", "prefix": 8},
			{"ip-address": "::1", "ip-address-type": "ipv6", "prefix": 128},
		},
	}}
	for _, in := range status {
		if in.InterfaceName == "" || in.InterfaceName == "lo" {
			continue
		}
		addrs := []map[string]any{}
		seen := map[string]bool{}
		for _, a := range append([]string{in.IP}, in.IPs...) {
			ip := net.ParseIP(a)
			if ip == nil || seen[a] {
				continue
			}
			seen[a] = true
			typ, prefix := "ipv4", 24
			if ip.To4() == nil {
				typ, prefix = "ipv6", 64
			}
			addrs = append(addrs, map[string]any{"ip-address": a, "ip-address-type": typ, "prefix": prefix})
		}
		iface := map[string]any{"name": in.InterfaceName, "ip-addresses": addrs}
		if in.MAC != "" {
			iface["hardware-address"] = strings.ToLower(in.MAC)
		}
		ifaces = append(ifaces, iface)
	}
	return ifaces
}
