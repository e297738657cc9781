package kubevirtsim

import (
	"encoding/json"
	"hash/fnv"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubevirt"
)

// PromEpoch is when the stub's counters were zero: a counter's value at t
// is its rate × (t − PromEpoch).
const PromEpoch = 1_700_000_000

// PromGuestValues are the stub's series for one running VMI.
type PromGuestValues struct {
	CPUCores                                           float64 // rate of kubevirt_vmi_cpu_usage_seconds_total
	MemUsed                                            int64   // kubevirt_vmi_memory_used_bytes
	NetInRate, NetOutRate, DiskReadRate, DiskWriteRate float64 // bytes/s of the *_bytes_total counters
}

// Counter is the value at t of a counter growing at rate.
func Counter(rate float64, t int64) float64 { return rate * float64(t-PromEpoch) }

// PromNodeValues are the stub's node_exporter series for one node.
type PromNodeValues struct {
	Load1, Load5, Load15  float64
	BootTime              int64
	RootSize, RootAvail   int64
	MemTotal, MemAvail    int64
	SwapTotal, SwapFree   int64
	Cores                 int
	Idle, IOWait          float64 // per-CPU fractions of time
	NetInRate, NetOutRate float64
}

func hashOf(s string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return h.Sum32()
}

// PromGuest is what the stub serves for namespace/name: fixed values picked
// by a hash of the name, different from the metrics.k8s.io stand-in's so
// tests can tell the sources apart.
func PromGuest(namespace, name string) PromGuestValues {
	h := hashOf(namespace + "/" + name)
	return PromGuestValues{
		CPUCores:      float64(10+h%40) / 100,
		MemUsed:       int64(256+h%256) << 20,
		NetInRate:     float64(1000 + h%1000),
		NetOutRate:    float64(500 + h%500),
		DiskReadRate:  float64(4096 + h%4096),
		DiskWriteRate: float64(2048 + h%2048),
	}
}

// PromNode is what the stub serves for a node.
func PromNode(name string) PromNodeValues {
	h := hashOf(name)
	return PromNodeValues{
		Load1: float64(h%300) / 100, Load5: float64(h%200) / 100, Load15: float64(h%100) / 100,
		BootTime: PromEpoch + int64(h%86400),
		RootSize: 100 << 30, RootAvail: int64(40+h%40) << 30,
		MemTotal: 16 << 30, MemAvail: int64(4+h%8) << 30,
		SwapTotal: 2 << 30, SwapFree: 1 << 30,
		Cores: 4, Idle: 0.75, IOWait: 0.02,
		NetInRate: 20000, NetOutRate: 10000,
	}
}

// Prometheus is a Prometheus-compatible stub for tests: /api/v1/query and
// /api/v1/query_range answer, for every running VMI and every node of
// the cluster, the deterministic series of PromGuest and PromNode. It
// does not evaluate PromQL: it finds the metric a query reads, whether it
// takes a rate, and the forms the plugin uses (a difference of two
// metrics, "1 - ...", count(...)), and honours namespace, name and
// nodename matchers.
type Prometheus struct {
	kube     kubernetes.Interface
	kubevirt kubevirt.Interface
}

// NewPrometheus reads the cluster through its clients on every query.
func NewPrometheus(kc kubernetes.Interface, kv kubevirt.Interface) *Prometheus {
	return &Prometheus{kube: kc, kubevirt: kv}
}

var (
	promMetric   = regexp.MustCompile(`\b(kubevirt_vmi_[a-z_]+|node_[A-Za-z0-9_]+)`)
	promNS       = regexp.MustCompile(`\bnamespace="([^"]*)"`)
	promName     = regexp.MustCompile(`\bname="([^"]*)"`)
	promNodeName = regexp.MustCompile(`\bnodename="([^"]*)"`)
)

type promSeries struct {
	labels map[string]string
	value  func(t int64) (float64, bool)
}

// ServeHTTP answers the two query endpoints.
func (p *Prometheus) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		promError(w, http.StatusBadRequest, "bad_data", err.Error())
		return
	}
	q := r.Form.Get("query")
	series, err := p.series(r, q)
	if err != nil {
		promError(w, http.StatusServiceUnavailable, "internal", err.Error())
		return
	}
	switch r.URL.Path {
	case "/api/v1/query":
		t := time.Now().Unix()
		if s := r.Form.Get("time"); s != "" {
			f, _ := strconv.ParseFloat(s, 64)
			t = int64(f)
		}
		var out []any
		for _, s := range series {
			if v, ok := s.value(t); ok {
				out = append(out, map[string]any{"metric": s.labels, "value": []any{t, fmtValue(v)}})
			}
		}
		promData(w, "vector", out)
	case "/api/v1/query_range":
		start, _ := strconv.ParseFloat(r.Form.Get("start"), 64)
		end, _ := strconv.ParseFloat(r.Form.Get("end"), 64)
		step, _ := strconv.ParseFloat(r.Form.Get("step"), 64)
		if step <= 0 || end < start || (end-start)/step > 11000 {
			promError(w, http.StatusBadRequest, "bad_data", "bad start, end or step")
			return
		}
		var out []any
		for _, s := range series {
			var vals []any
			for t := int64(start); t <= int64(end); t += int64(step) {
				if v, ok := s.value(t); ok {
					vals = append(vals, []any{t, fmtValue(v)})
				}
			}
			if len(vals) > 0 {
				out = append(out, map[string]any{"metric": s.labels, "values": vals})
			}
		}
		promData(w, "matrix", out)
	default:
		http.NotFound(w, r)
	}
}

// series finds the stub series a query reads.
func (p *Prometheus) series(r *http.Request, q string) ([]promSeries, error) {
	if before, _, ok := strings.Cut(q, " or "); ok {
		q = before // the fallback of a query the stub answers directly
	}
	var metrics []string
	for _, m := range promMetric.FindAllString(q, -1) {
		if m != "node_uname_info" && (len(metrics) == 0 || metrics[len(metrics)-1] != m) {
			metrics = append(metrics, m)
		}
	}
	if len(metrics) == 0 {
		return nil, nil
	}
	sub := len(metrics) > 1 && strings.Contains(q, " - ")
	isRate := strings.Contains(q, "rate("+metrics[0])
	oneMinus := strings.HasPrefix(q, "1 - ") || strings.Contains(q, "(1 - ")
	if strings.HasPrefix(metrics[0], "kubevirt_") {
		return p.guestSeries(r, q, metrics[0], isRate)
	}
	mode := ""
	if strings.Contains(q, `mode="idle"`) {
		mode = "idle"
	} else if strings.Contains(q, `mode="iowait"`) {
		mode = "iowait"
	}
	count := strings.Contains(q, "count(")
	nodes, err := p.kube.CoreV1().Nodes().List(r.Context(), metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	want := firstMatch(promNodeName, q)
	var out []promSeries
	for _, n := range nodes.Items {
		if want != "" && n.Name != want {
			continue
		}
		v := PromNode(n.Name)
		a, b := nodeValue(v, metrics[0], mode, isRate, count), 0.0
		if sub {
			b = nodeValue(v, metrics[1], mode, isRate, count)
		}
		val := a - b
		if oneMinus {
			val = 1 - val
		}
		if math.IsNaN(val) {
			continue
		}
		// The network counters are the only node counters read without
		// a rate (nothing the plugin sends does that, but a stub should
		// not answer a rate where a counter is asked for).
		counter := !isRate && strings.HasPrefix(metrics[0], "node_network_")
		out = append(out, promSeries{labels: map[string]string{"nodename": n.Name}, value: func(t int64) (float64, bool) {
			if counter {
				return Counter(val, t), true
			}
			return val, true
		}})
	}
	return out, nil
}

func (p *Prometheus) guestSeries(r *http.Request, q, metric string, isRate bool) ([]promSeries, error) {
	ns := firstMatch(promNS, q)
	vmis, err := p.kubevirt.KubevirtV1().VirtualMachineInstances(ns).List(r.Context(), metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	want := firstMatch(promName, q)
	var out []promSeries
	for _, vmi := range vmis.Items {
		if vmi.Status.Phase != virtv1.Running || (want != "" && vmi.Name != want) {
			continue
		}
		v := PromGuest(vmi.Namespace, vmi.Name)
		var rate, gauge float64
		counter := true
		switch metric {
		case "kubevirt_vmi_cpu_usage_seconds_total":
			rate = v.CPUCores
		case "kubevirt_vmi_network_receive_bytes_total":
			rate = v.NetInRate
		case "kubevirt_vmi_network_transmit_bytes_total":
			rate = v.NetOutRate
		case "kubevirt_vmi_storage_read_traffic_bytes_total":
			rate = v.DiskReadRate
		case "kubevirt_vmi_storage_write_traffic_bytes_total":
			rate = v.DiskWriteRate
		case "kubevirt_vmi_memory_used_bytes":
			gauge, counter = float64(v.MemUsed), false
		default:
			continue
		}
		out = append(out, promSeries{labels: map[string]string{"namespace": vmi.Namespace, "name": vmi.Name}, value: func(t int64) (float64, bool) {
			switch {
			case !counter:
				return gauge, true
			case isRate:
				return rate, true
			}
			return Counter(rate, t), true
		}})
	}
	return out, nil
}

func nodeValue(v PromNodeValues, metric, mode string, isRate, count bool) float64 {
	switch metric {
	case "node_load1":
		return v.Load1
	case "node_load5":
		return v.Load5
	case "node_load15":
		return v.Load15
	case "node_boot_time_seconds":
		return float64(v.BootTime)
	case "node_filesystem_size_bytes":
		return float64(v.RootSize)
	case "node_filesystem_avail_bytes":
		return float64(v.RootAvail)
	case "node_memory_MemTotal_bytes":
		return float64(v.MemTotal)
	case "node_memory_MemAvailable_bytes":
		return float64(v.MemAvail)
	case "node_memory_SwapTotal_bytes":
		return float64(v.SwapTotal)
	case "node_memory_SwapFree_bytes":
		return float64(v.SwapFree)
	case "node_cpu_seconds_total":
		switch {
		case count:
			return float64(v.Cores)
		case mode == "idle":
			return v.Idle
		case mode == "iowait":
			return v.IOWait
		}
	case "node_network_receive_bytes_total":
		return v.NetInRate
	case "node_network_transmit_bytes_total":
		return v.NetOutRate
	}
	return math.NaN()
}

func firstMatch(re *regexp.Regexp, s string) string {
	if m := re.FindStringSubmatch(s); m != nil {
		return m[1]
	}
	return ""
}

func fmtValue(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func promData(w http.ResponseWriter, typ string, result []any) {
	if result == nil {
		result = []any{}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": typ, "result": result}})
}

func promError(w http.ResponseWriter, code int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"status": "error", "errorType": typ, "error": msg})
}
