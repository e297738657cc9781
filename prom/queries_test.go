package prom

import (
	"testing"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
)

func TestCurrentQueries(t *testing.T) {
	want := map[kube.UsageFields]string{
		kube.HasCPU:       `sum by (namespace, name) (rate(kubevirt_vmi_cpu_usage_seconds_total[2m]))`,
		kube.HasMem:       `sum by (namespace, name) (kubevirt_vmi_memory_used_bytes) or sum by (namespace, name) (kubevirt_vmi_memory_available_bytes - kubevirt_vmi_memory_unused_bytes)`,
		kube.HasNetIn:     `sum by (namespace, name) (kubevirt_vmi_network_receive_bytes_total)`,
		kube.HasDiskWrite: `sum by (namespace, name) (kubevirt_vmi_storage_write_traffic_bytes_total)`,
		kube.HasLoad5:     `max by (nodename) ((node_load5) * on (instance) group_left (nodename) node_uname_info)`,
		kube.HasRootUsed:  `max by (nodename) ((node_filesystem_size_bytes{mountpoint="/",fstype!="rootfs"} - node_filesystem_avail_bytes{mountpoint="/",fstype!="rootfs"}) * on (instance) group_left (nodename) node_uname_info)`,
		kube.HasSwapUsed:  `max by (nodename) ((node_memory_SwapTotal_bytes - node_memory_SwapFree_bytes) * on (instance) group_left (nodename) node_uname_info)`,
		kube.HasIOWait:    `avg by (nodename) ((rate(node_cpu_seconds_total{mode="iowait"}[2m])) * on (instance) group_left (nodename) node_uname_info)`,
	}
	seen := kube.UsageFields(0)
	for _, q := range append(append([]currentQuery(nil), guestQueries...), nodeQueries...) {
		if seen&q.field != 0 {
			t.Errorf("field %b queried twice", q.field)
		}
		seen |= q.field
		if w, ok := want[q.field]; ok && q.expr != w {
			t.Errorf("field %b:\n got %s\nwant %s", q.field, q.expr, w)
		}
	}
	all := kube.HasCPU | kube.HasMem | kube.HasNetIn | kube.HasNetOut | kube.HasDiskRead | kube.HasDiskWrite |
		kube.HasLoad1 | kube.HasLoad5 | kube.HasLoad15 | kube.HasBootTime | kube.HasRootUsed | kube.HasRootTotal |
		kube.HasSwapUsed | kube.HasSwapTotal | kube.HasIOWait | kube.HasIdle
	if seen != all {
		t.Errorf("fields queried %b, want %b", seen, all)
	}
}

func field(fs []historyField, name string) historyField {
	for _, f := range fs {
		if f.name == name {
			return f
		}
	}
	panic("no field " + name)
}

func TestHistoryQueries(t *testing.T) {
	vm := guestSelector("team-a", `we"ird`)
	node := nodeSelector("kv-node-1")
	for _, c := range []struct {
		name string
		got  string
		want string
	}{
		{"vm netin hour", historyQuery(field(guestHistory, "netin"), vm, "AVERAGE", 60),
			`avg_over_time((sum(rate(kubevirt_vmi_network_receive_bytes_total{namespace="team-a",name="we\"ird"}[120s])))[60s:60s])`},
		{"vm cpu day max", historyQuery(field(guestHistory, "cpu"), vm, "MAX", 1800),
			`max_over_time((sum(rate(kubevirt_vmi_cpu_usage_seconds_total{namespace="team-a",name="we\"ird"}[180s])))[1800s:180s])`},
		{"vm mem week", historyQuery(field(guestHistory, "mem"), vm, "AVERAGE", 10800),
			`avg_over_time((sum(kubevirt_vmi_memory_used_bytes{namespace="team-a",name="we\"ird"}) or (sum(kubevirt_vmi_memory_available_bytes{namespace="team-a",name="we\"ird"}) - sum(kubevirt_vmi_memory_unused_bytes{namespace="team-a",name="we\"ird"})))[10800s:1080s])`},
		{"node cpu year", historyQuery(field(nodeHistory, "cpu"), node, "AVERAGE", 604800),
			`avg_over_time((1 - avg((rate(node_cpu_seconds_total{mode="idle"}[60480s])) * on (instance) group_left (nodename) node_uname_info{nodename="kv-node-1"}))[604800s:60480s])`},
		{"node netin month", historyQuery(field(nodeHistory, "netin"), node, "MAX", 43200),
			`max_over_time((sum((rate(node_network_receive_bytes_total` + physNIC + `[4320s])) * on (instance) group_left (nodename) node_uname_info{nodename="kv-node-1"}))[43200s:4320s])`},
		{"node memused hour", historyQuery(field(nodeHistory, "memused"), node, "AVERAGE", 60),
			`avg_over_time((sum((node_memory_MemTotal_bytes - node_memory_MemAvailable_bytes) * on (instance) group_left (nodename) node_uname_info{nodename="kv-node-1"}))[60s:60s])`},
	} {
		if c.got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, c.got, c.want)
		}
	}
	// PVE's rrd field names, and nothing else.
	names := func(fs []historyField) map[string]bool {
		m := map[string]bool{}
		for _, f := range fs {
			m[f.name] = true
		}
		return m
	}
	for n := range names(guestHistory) {
		if !map[string]bool{"cpu": true, "mem": true, "netin": true, "netout": true, "diskread": true, "diskwrite": true}[n] {
			t.Errorf("VM field %s is not PVE's", n)
		}
	}
	pveNode := map[string]bool{"cpu": true, "maxcpu": true, "iowait": true, "loadavg": true, "memtotal": true, "memused": true,
		"swaptotal": true, "swapused": true, "roottotal": true, "rootused": true, "netin": true, "netout": true}
	if got := names(nodeHistory); len(got) != len(pveNode) {
		t.Errorf("node fields %v, want %v", got, pveNode)
	}
	for n := range names(nodeHistory) {
		if !pveNode[n] {
			t.Errorf("node field %s is not PVE's", n)
		}
	}
}
