package pvesim

import (
	"fmt"
	"strings"
	"time"
)

// clusterStatusLocked is GET /cluster/status.
func (s *Sim) clusterStatusLocked() []map[string]any {
	rows := []map[string]any{{
		"type": "cluster", "id": "cluster", "name": s.opts.ClusterName,
		"nodes": len(s.opts.Nodes), "quorate": 1, "version": 3,
	}}
	for i, n := range s.opts.Nodes {
		local := 0
		if i == 0 {
			local = 1
		}
		online := 1
		if s.offLocked(n) {
			online = 0
		}
		rows = append(rows, map[string]any{
			"type": "node", "id": "node/" + n, "name": n, "nodeid": i + 1,
			"online": online, "local": local, "ip": "127.0.0.1", "level": "",
		})
	}
	return rows
}

// resourcesLocked is GET /cluster/resources[?type=vm|node].
func (s *Sim) resourcesLocked(typ string) []map[string]any {
	rows := []map[string]any{}
	if typ == "" || typ == "node" {
		for _, n := range s.opts.Nodes {
			r := s.nodeRowLocked(n)
			delete(r, "ssl_fingerprint")
			rows = append(rows, r)
		}
	}
	if typ == "" || typ == "vm" {
		for _, id := range s.sortedIDsLocked() {
			g := s.guests[id]
			if !s.allowedLocked(fmt.Sprintf("/vms/%d", id), "VM.Audit") {
				continue
			}
			rows = append(rows, s.resourceRowLocked(g))
		}
	}
	return rows
}

// resourceRowLocked is a guest's /cluster/resources row. Name, status,
// template and usage come from the node's RRD data, so a node whose
// pvestatd stalled gives status "unknown" without them; lock and hastate
// come from the config and HA's status and are always there.
func (s *Sim) resourceRowLocked(g *guest) map[string]any {
	id := g.spec.VMID
	row := map[string]any{
		"id": fmt.Sprintf("%s/%d", g.spec.Kind, id), "type": g.spec.Kind, "vmid": id,
		"node": g.spec.Node, "status": "unknown",
	}
	if !s.stale[g.spec.Node] && !s.offLocked(g.spec.Node) {
		template := 0
		if g.spec.Template {
			template = 1
		}
		for k, v := range map[string]any{
			"name": g.spec.Name, "status": g.status,
			"uptime": g.uptime(), "template": template, "maxcpu": 1,
			"maxmem": 536870912, "mem": 0, "maxdisk": 8589934592, "disk": 0,
		} {
			row[k] = v
		}
		for k, v := range s.measuredLocked(g).fields() {
			row[k] = v
		}
	}
	// lock and tags come from the guest configs (get_guest_config_properties),
	// which every node has: a stalled node's rows carry them too.
	if g.lock != "" {
		row["lock"] = g.lock
	}
	if tags := tagsValue(g.spec.Tags); tags != "" {
		row["tags"] = tags
	}
	if h := g.ha.hastate(); h != "" {
		row["hastate"] = h
	}
	return row
}

func (s *Sim) nodeRowLocked(n string) map[string]any {
	switch {
	case s.offLocked(n):
		// extract_node_stats: a member that is not online, without stats.
		return map[string]any{"id": "node/" + n, "node": n, "type": "node", "status": "offline", "level": ""}
	case s.stale[n]:
		// An online member without RRD data: "unknown", without stats.
		return map[string]any{"id": "node/" + n, "node": n, "type": "node", "status": "unknown"}
	}
	return map[string]any{
		"id": "node/" + n, "node": n, "type": "node", "status": "online",
		"uptime": int(time.Since(s.started).Seconds()), "cpu": 0.01, "maxcpu": 4,
		"mem": 1 << 30, "maxmem": 8 << 30, "disk": 2 << 30, "maxdisk": 32 << 30,
		"level": "", "ssl_fingerprint": "00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF",
	}
}

// nodeStatusLocked is GET /nodes/{node}/status.
func (s *Sim) nodeStatusLocked() map[string]any {
	return map[string]any{
		"cpu": 0.01, "wait": 0.0, "idle": 0,
		"uptime":     int(time.Since(s.started).Seconds()),
		"loadavg":    []string{"0.10", "0.05", "0.01"},
		"memory":     map[string]any{"total": 8 << 30, "used": 1 << 30, "free": 7 << 30},
		"swap":       map[string]any{"total": 0, "used": 0, "free": 0},
		"rootfs":     map[string]any{"total": 32 << 30, "used": 2 << 30, "free": 30 << 30, "avail": 30 << 30},
		"cpuinfo":    map[string]any{"cpus": 4, "cores": 4, "sockets": 1, "model": "pvesim", "mhz": "2400.000", "hvm": "1", "user_hz": 100},
		"kversion":   "Linux 6.8.12-4-pve #1 SMP PREEMPT_DYNAMIC",
		"pveversion": "pve-manager/" + s.pveVersionLocked() + "/2a5fa54a8503f96d",
	}
}

func (s *Sim) pveVersionLocked() string {
	v, _ := s.versionLocked()
	return v
}

func (g *guest) uptime() int {
	if g.status != "running" {
		return 0
	}
	return int(time.Since(g.since).Seconds())
}

// statusRowLocked is a /nodes/{n}/{kind} row, or status/current.
func (g *guest) statusRowLocked(current bool) map[string]any {
	row := map[string]any{
		"vmid": g.spec.VMID, "name": g.spec.Name, "status": g.status,
		"uptime": g.uptime(), "cpus": 1, "maxmem": 536870912, "mem": 0,
		"maxdisk": 8589934592, "disk": 0,
	}
	for k, v := range g.measureLocked(time.Now()).fields() {
		row[k] = v
	}
	if g.spec.Kind == "lxc" {
		row["type"] = "lxc"
		row["maxswap"] = 536870912
	}
	if g.spec.Kind == "qemu" {
		qmp := g.status
		if g.status == "running" && g.qmp != "" {
			qmp = g.qmp
		}
		row["qmpstatus"] = qmp
		if current && !g.spec.NoAgent {
			row["agent"] = 1
		}
	}
	if g.lock != "" {
		row["lock"] = g.lock
	}
	if g.spec.Template {
		row["template"] = 1
	}
	if current {
		ha := map[string]any{"managed": 0}
		if g.ha.managed() {
			ha = map[string]any{"managed": 1, "state": g.ha.state}
		}
		row["ha"] = ha
	}
	return row
}

// configLocked is GET .../config. The address is DHCP-assigned (the
// config carries only the MAC, as on a real DHCP guest), unless a QEMU
// guest has it from cloud-init (ipconfig0).
func (g *guest) configLocked() map[string]any {
	var cfg map[string]any
	if g.spec.Kind == "qemu" {
		cfg = map[string]any{
			"name": g.spec.Name, "memory": "512", "cores": 1, "sockets": 1,
			"ostype": "l26", "scsihw": "virtio-scsi-single", "boot": "order=scsi0",
			"scsi0":  fmt.Sprintf("local-lvm:vm-%d-disk-0,iothread=1,size=8G", g.spec.VMID),
			"net0":   fmt.Sprintf("virtio=%s,bridge=vmbr0,firewall=1", g.mac),
			"digest": fmt.Sprintf("%040x", g.spec.VMID),
		}
		if !g.spec.NoAgent {
			cfg["agent"] = "1"
		}
		if g.spec.CloudInit {
			cfg["ide2"] = fmt.Sprintf("local-lvm:vm-%d-cloudinit,media=cdrom", g.spec.VMID)
			switch {
			case g.spec.CloudInitIP != "":
				cfg["ipconfig0"] = fmt.Sprintf("ip=%s/24", g.spec.CloudInitIP)
			case g.ipv6():
				cfg["ipconfig0"] = fmt.Sprintf("ip6=%s/128,gw6=fe80::1", g.spec.IP)
			default:
				cfg["ipconfig0"] = fmt.Sprintf("ip=%s/8,gw=127.0.0.1", g.spec.IP)
			}
		}
	} else {
		ip := "ip=dhcp"
		if g.ipv6() {
			ip = "ip6=auto"
		}
		cfg = map[string]any{
			"hostname": g.spec.Name, "memory": 512, "swap": 512, "cores": 1,
			"ostype": "debian", "arch": "amd64", "unprivileged": 1,
			"rootfs": fmt.Sprintf("local-lvm:vm-%d-disk-0,size=8G", g.spec.VMID),
			"net0":   fmt.Sprintf("name=eth0,bridge=vmbr0,hwaddr=%s,%s,type=veth", g.mac, ip),
			"digest": fmt.Sprintf("%040x", g.spec.VMID),
		}
	}
	if g.lock != "" {
		cfg["lock"] = g.lock
	}
	if g.spec.Template {
		cfg["template"] = 1
	}
	if tags := tagsValue(g.spec.Tags); tags != "" {
		cfg["tags"] = tags
	}
	return cfg
}

func (g *guest) ipv6() bool { return strings.Contains(g.spec.IP, ":") }
