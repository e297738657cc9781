package prom

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
)

// rateWindow is the window of the current rates: four scrapes at
// Prometheus' default 15 s interval, two at 30 s.
const rateWindow = "2m"

// byGuest sums a KubeVirt metric over a VMI's series (interfaces, drives).
func byGuest(expr string) string {
	return "sum by (namespace, name) (" + expr + ")"
}

// nodeJoin attaches node_exporter's nodename (the host name, which is the
// Kubernetes node name on kubelet-registered nodes) to series keyed by
// instance. node_uname_info is matched by instance only, whatever the
// scrape config calls its targets.
func nodeJoin(expr, nodeSel string) string {
	return "(" + expr + ") * on (instance) group_left (nodename) node_uname_info" + nodeSel
}

func byNode(expr string) string {
	return "max by (nodename) (" + nodeJoin(expr, "") + ")"
}

// currentQuery is one instant query of the poller and where its values go.
type currentQuery struct {
	field kube.UsageFields
	expr  string
	set   func(u *kube.Usage, v float64)
}

const memUsedGuest = "kubevirt_vmi_memory_used_bytes"

// guestQueries read every VMI at once: one query per field per interval,
// whatever the number of VMs.
var guestQueries = []currentQuery{
	{kube.HasCPU, byGuest("rate(kubevirt_vmi_cpu_usage_seconds_total[" + rateWindow + "])"), func(u *kube.Usage, v float64) { u.CPUCores = v }},
	// Older KubeVirt lacks the used_bytes gauge; available - unused is
	// what it is made of.
	{kube.HasMem, byGuest(memUsedGuest) + " or " + byGuest("kubevirt_vmi_memory_available_bytes - kubevirt_vmi_memory_unused_bytes"), func(u *kube.Usage, v float64) { u.MemBytes = int64(v) }},
	{kube.HasNetIn, byGuest("kubevirt_vmi_network_receive_bytes_total"), func(u *kube.Usage, v float64) { u.NetIn = int64(v) }},
	{kube.HasNetOut, byGuest("kubevirt_vmi_network_transmit_bytes_total"), func(u *kube.Usage, v float64) { u.NetOut = int64(v) }},
	{kube.HasDiskRead, byGuest("kubevirt_vmi_storage_read_traffic_bytes_total"), func(u *kube.Usage, v float64) { u.DiskRead = int64(v) }},
	{kube.HasDiskWrite, byGuest("kubevirt_vmi_storage_write_traffic_bytes_total"), func(u *kube.Usage, v float64) { u.DiskWrite = int64(v) }},
}

const rootFS = `{mountpoint="/",fstype!="rootfs"}`

// nodeQueries read node_exporter for what metrics.k8s.io lacks.
var nodeQueries = []currentQuery{
	{kube.HasLoad1, byNode("node_load1"), func(u *kube.Usage, v float64) { u.Load[0] = v }},
	{kube.HasLoad5, byNode("node_load5"), func(u *kube.Usage, v float64) { u.Load[1] = v }},
	{kube.HasLoad15, byNode("node_load15"), func(u *kube.Usage, v float64) { u.Load[2] = v }},
	{kube.HasBootTime, byNode("node_boot_time_seconds"), func(u *kube.Usage, v float64) { u.BootTime = int64(v) }},
	{kube.HasRootUsed, byNode("node_filesystem_size_bytes" + rootFS + " - node_filesystem_avail_bytes" + rootFS), func(u *kube.Usage, v float64) { u.RootUsed = int64(v) }},
	{kube.HasRootTotal, byNode("node_filesystem_size_bytes" + rootFS), func(u *kube.Usage, v float64) { u.RootTotal = int64(v) }},
	{kube.HasSwapTotal, byNode("node_memory_SwapTotal_bytes"), func(u *kube.Usage, v float64) { u.SwapTotal = int64(v) }},
	{kube.HasSwapUsed, byNode("node_memory_SwapTotal_bytes - node_memory_SwapFree_bytes"), func(u *kube.Usage, v float64) { u.SwapUsed = int64(v) }},
	{kube.HasIOWait, cpuMode("iowait"), func(u *kube.Usage, v float64) { u.IOWait = v }},
	{kube.HasIdle, cpuMode("idle"), func(u *kube.Usage, v float64) { u.Idle = v }},
}

// cpuMode is the fraction of a node's CPU time in one mode, averaged over
// its CPUs (node_exporter has one counter per CPU and mode).
func cpuMode(mode string) string {
	return "avg by (nodename) (" + nodeJoin(`rate(node_cpu_seconds_total{mode="`+mode+`"}[`+rateWindow+"])", "") + ")"
}

// historyField is one rrddata field: inner is an instant expression for
// one VM or node whose rates use window w (seconds).
type historyField struct {
	name  string
	inner func(sel string, w int64) string
}

func win(w int64) string { return strconv.FormatInt(w, 10) + "s" }

func guestRate(metric string) func(string, int64) string {
	return func(sel string, w int64) string { return "sum(rate(" + metric + sel + "[" + win(w) + "]))" }
}

// guestHistory are PVE's VM rrd fields that Prometheus has. cpu is in
// cores (the caller divides by the VM's vCPUs, as PVE stores a fraction);
// maxcpu, maxmem and maxdisk come from the VM's spec.
var guestHistory = []historyField{
	{"cpu", guestRate("kubevirt_vmi_cpu_usage_seconds_total")},
	{"mem", func(sel string, _ int64) string {
		return "sum(" + memUsedGuest + sel + ") or (sum(kubevirt_vmi_memory_available_bytes" + sel + ") - sum(kubevirt_vmi_memory_unused_bytes" + sel + "))"
	}},
	{"netin", guestRate("kubevirt_vmi_network_receive_bytes_total")},
	{"netout", guestRate("kubevirt_vmi_network_transmit_bytes_total")},
	{"diskread", guestRate("kubevirt_vmi_storage_read_traffic_bytes_total")},
	{"diskwrite", guestRate("kubevirt_vmi_storage_write_traffic_bytes_total")},
}

// physNIC leaves out loopback and the virtual interfaces of pods and
// overlays, which would count the same bytes twice.
const physNIC = `{device!~"lo|veth.*|cali.*|cilium.*|lxc.*|flannel.*|cni.*|vxlan.*|tun.*|tap.*|docker.*|br-.*|genev.*|kube-ipvs.*"}`

func nodeSum(expr string) func(string, int64) string {
	return func(sel string, w int64) string {
		return "sum(" + nodeJoin(strings.ReplaceAll(expr, "$w", win(w)), sel) + ")"
	}
}

// nodeHistory are PVE's node rrd fields, from node_exporter.
var nodeHistory = []historyField{
	{"cpu", func(sel string, w int64) string {
		return "1 - avg(" + nodeJoin(`rate(node_cpu_seconds_total{mode="idle"}[`+win(w)+"])", sel) + ")"
	}},
	{"iowait", func(sel string, w int64) string {
		return "avg(" + nodeJoin(`rate(node_cpu_seconds_total{mode="iowait"}[`+win(w)+"])", sel) + ")"
	}},
	{"maxcpu", func(sel string, _ int64) string {
		return "count(" + nodeJoin(`node_cpu_seconds_total{mode="idle"}`, sel) + ")"
	}},
	{"loadavg", nodeSum("node_load1")},
	{"memtotal", nodeSum("node_memory_MemTotal_bytes")},
	{"memused", nodeSum("node_memory_MemTotal_bytes - node_memory_MemAvailable_bytes")},
	{"swaptotal", nodeSum("node_memory_SwapTotal_bytes")},
	{"swapused", nodeSum("node_memory_SwapTotal_bytes - node_memory_SwapFree_bytes")},
	{"roottotal", nodeSum("node_filesystem_size_bytes" + rootFS)},
	{"rootused", nodeSum("node_filesystem_size_bytes" + rootFS + " - node_filesystem_avail_bytes" + rootFS)},
	{"netin", nodeSum("rate(node_network_receive_bytes_total" + physNIC + "[$w])")},
	{"netout", nodeSum("rate(node_network_transmit_bytes_total" + physNIC + "[$w])")},
}

// quote makes a PromQL string literal.
func quote(s string) string { return strconv.Quote(s) }

func guestSelector(namespace, name string) string {
	return "{namespace=" + quote(namespace) + ",name=" + quote(name) + "}"
}

func nodeSelector(node string) string { return "{nodename=" + quote(node) + "}" }

// resolution is the spacing of the samples a point of step seconds
// aggregates: ten per point, at least a minute apart.
func resolution(step int64) int64 { return max(60, step/10) }

// historyQuery is the range query of one field: the inner expression
// sampled every resolution over each step and reduced by cf (AVERAGE or
// MAX), like rrdtool consolidating its primary points. Rates use a window
// of one resolution (at least two minutes, so that two scrapes fall in),
// so AVERAGE of a counter is its mean rate over the step.
func historyQuery(f historyField, sel, cf string, step int64) string {
	res := resolution(step)
	inner := f.inner(sel, max(res, 120))
	fn := "avg_over_time"
	if cf == "MAX" {
		fn = "max_over_time"
	}
	return fmt.Sprintf("%s((%s)[%s:%s])", fn, inner, win(step), win(res))
}
