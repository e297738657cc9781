package api

import (
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/prom"
)

// rrdSteps are PVE's RRD resolutions: 70 points per timeframe.
var rrdSteps = map[string]int64{
	"hour":  60,
	"day":   30 * 60,
	"week":  3 * 3600,
	"month": 12 * 3600,
	"year":  7 * 24 * 3600,
}

const rrdPoints = prom.RRDPoints

// rrdTimes validates timeframe and cf and returns the point times of the
// timeframe, oldest first, aligned to its step like rrdtool's.
func rrdTimes(q *request, now time.Time) ([]map[string]any, *apiError) {
	tf, ok, e := q.p.str("timeframe")
	if e != nil {
		return nil, e
	}
	if !ok || tf == "" {
		return nil, paramErr("timeframe", "property is missing and it is not optional")
	}
	step, known := rrdSteps[tf]
	if !known {
		return nil, paramErr("timeframe", "value '%s' does not have a value in the enumeration 'hour, day, week, month, year'", tf)
	}
	cf, _, e := q.p.str("cf")
	if e != nil {
		return nil, e
	}
	if cf != "" && cf != "AVERAGE" && cf != "MAX" {
		return nil, paramErr("cf", "value '%s' does not have a value in the enumeration 'AVERAGE, MAX'", cf)
	}
	last := now.Unix() / step * step
	out := make([]map[string]any, 0, rrdPoints)
	for i := rrdPoints - 1; i >= 0; i-- {
		out = append(out, map[string]any{"time": last - int64(i)*step})
	}
	return out, nil
}

// getNodeRRDData is the node's usage history. With Prometheus the points
// carry PVE's node rrd fields that node_exporter has (cpu, maxcpu,
// iowait, loadavg, memtotal, memused, swaptotal, swapused, roottotal,
// rootused, netin, netout in bytes/s), read from the history cache: no
// request waits on Prometheus, and a series nobody asked for yet answers
// without values (as PVE does for unknown samples) while the cache fetches
// it. Without Prometheus every point has its time only.
func (h *APIHandler) getNodeRRDData(q *request) (any, *apiError) {
	n, e := h.node(q)
	if e != nil {
		return nil, e
	}
	now := time.Now()
	pts, e := rrdTimes(q, now)
	if e != nil || h.history == nil || n.KubeName == "" {
		return pts, e
	}
	k := rrdKey(q)
	k.Node, k.Name = true, n.KubeName
	values := h.history.Get(k)
	if values == nil {
		return pts, nil
	}
	row := nodeFacts(q.c, n, now)
	for _, p := range pts {
		v, ok := values[p["time"].(int64)]
		if !ok {
			continue
		}
		for f, x := range v {
			p[f] = x
		}
		if _, ok := v["maxcpu"]; !ok && row.MaxCPU > 0 {
			p["maxcpu"] = row.MaxCPU
		}
	}
	return pts, nil
}

// getQemuRRDData is a VM's usage history, PVE's VM rrd fields: cpu (a
// fraction of the VM's vCPUs), mem, netin, netout, diskread, diskwrite
// (bytes/s) from KubeVirt's metrics in Prometheus, and maxcpu, maxmem,
// maxdisk, disk from the VM's spec on the points that have values. See
// getNodeRRDData for the cache.
func (h *APIHandler) getQemuRRDData(q *request) (any, *apiError) {
	g, e := h.guest(q)
	if e != nil {
		return nil, e
	}
	now := time.Now()
	pts, e := rrdTimes(q, now)
	if e != nil || h.history == nil {
		return pts, e
	}
	k := rrdKey(q)
	k.Namespace, k.Name = g.Meta().Namespace, g.Meta().Name
	values := h.history.Get(k)
	if values == nil {
		return pts, nil
	}
	f := factsOf(q.c, g, now)
	for _, p := range pts {
		v, ok := values[p["time"].(int64)]
		if !ok {
			continue
		}
		for name, x := range v {
			if name == "cpu" {
				x = fraction(x, float64(f.cpus))
			}
			p[name] = x
		}
		p["maxcpu"], p["maxmem"], p["maxdisk"], p["disk"] = f.cpus, f.maxmem, f.maxdisk, 0
	}
	return pts, nil
}

// rrdKey is the cache key of a validated rrddata request, less the object.
func rrdKey(q *request) prom.Key {
	tf, _, _ := q.p.str("timeframe")
	cf, _, _ := q.p.str("cf")
	if cf == "" {
		cf = "AVERAGE"
	}
	return prom.Key{Step: rrdSteps[tf], CF: cf}
}
