package kubevirtsim

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// MetricsAPIGroupVersion is the group/version the stand-in serves.
const MetricsAPIGroupVersion = "metrics.k8s.io/v1beta1"

// APIHandler serves the read side of metrics.k8s.io/v1beta1 like
// metrics-server: the resource list, NodeMetricsList at /nodes and the
// virt-launcher pods' PodMetricsList at /pods and
// /namespaces/{ns}/pods, with the usage of Sample. Paths are absolute
// (/apis/metrics.k8s.io/v1beta1/...), so the handler can sit behind a
// front proxy on the apiserver's address.
func (m *Metrics) APIHandler() http.Handler {
	return http.HandlerFunc(m.serveAPI)
}

func (m *Metrics) serveAPI(w http.ResponseWriter, r *http.Request) {
	const prefix = "/apis/" + MetricsAPIGroupVersion
	rest, ok := strings.CutPrefix(r.URL.Path, prefix)
	if !ok || r.Method != http.MethodGet {
		http.NotFound(w, r)
		return
	}
	var ns string
	if after, ok := strings.CutPrefix(rest, "/namespaces/"); ok {
		ns, rest, _ = strings.Cut(after, "/")
		rest = "/" + rest
	}
	now := time.Now().UTC().Format(time.RFC3339)
	switch {
	case rest == "" || rest == "/":
		writeJSON(w, http.StatusOK, map[string]any{
			"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": MetricsAPIGroupVersion,
			"resources": []any{
				map[string]any{"name": "nodes", "singularName": "", "namespaced": false, "kind": "NodeMetrics", "verbs": []string{"get", "list"}},
				map[string]any{"name": "pods", "singularName": "", "namespaced": true, "kind": "PodMetrics", "verbs": []string{"get", "list"}},
			},
		})
	case rest == "/nodes" && ns == "":
		nodes, _, err := m.Sample(r.Context(), nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		items := []any{}
		for name, u := range nodes {
			items = append(items, map[string]any{
				"metadata":  map[string]any{"name": name, "creationTimestamp": now},
				"timestamp": now, "window": "20s",
				"usage": usageJSON(u),
			})
		}
		writeJSON(w, http.StatusOK, map[string]any{"kind": "NodeMetricsList", "apiVersion": MetricsAPIGroupVersion, "metadata": map[string]any{}, "items": items})
	case rest == "/pods":
		var nss []string
		if ns != "" {
			nss = []string{ns}
		}
		_, guests, err := m.Sample(r.Context(), nss)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		items := []any{}
		for key, u := range guests {
			gns, name, _ := strings.Cut(key, "/")
			items = append(items, map[string]any{
				"metadata": map[string]any{
					"name": "virt-launcher-" + name + "-" + strconv.FormatUint(uint64(hashOf(key)%100000), 36), "namespace": gns, "creationTimestamp": now,
					"labels": map[string]string{"kubevirt.io": "virt-launcher", "kubevirt.io/domain": name, "vm.kubevirt.io/name": name},
				},
				"timestamp": now, "window": "20s",
				"containers": []any{
					map[string]any{"name": "compute", "usage": usageJSON(u)},
					map[string]any{"name": "guest-console-log", "usage": map[string]string{"cpu": "1m", "memory": "2Mi"}},
				},
			})
		}
		writeJSON(w, http.StatusOK, map[string]any{"kind": "PodMetricsList", "apiVersion": MetricsAPIGroupVersion, "metadata": map[string]any{}, "items": items})
	default:
		http.NotFound(w, r)
	}
}

func usageJSON(u Usage) map[string]string {
	return map[string]string{
		"cpu":    resource.NewMilliQuantity(int64(u.CPUCores*1000), resource.DecimalSI).String(),
		"memory": resource.NewQuantity(u.MemBytes, resource.BinarySI).String(),
	}
}
