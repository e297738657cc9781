package caddymodule

import "time"

// rrdSteps are PVE's RRD resolutions: 70 points per timeframe.
var rrdSteps = map[string]int64{
	"hour":  60,
	"day":   30 * 60,
	"week":  3 * 3600,
	"month": 12 * 3600,
	"year":  7 * 24 * 3600,
}

const rrdPoints = 70

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

// getNodeRRDData is the node's usage history. Without a history source
// (Prometheus is not wired yet) every point has its time and no values,
// which is what PVE answers for unknown samples.
func (h *APIHandler) getNodeRRDData(q *request) (any, *apiError) {
	if _, e := h.node(q); e != nil {
		return nil, e
	}
	return rrdTimes(q, time.Now())
}

// getQemuRRDData is a VM's usage history; see getNodeRRDData.
func (h *APIHandler) getQemuRRDData(q *request) (any, *apiError) {
	if _, e := h.guest(q); e != nil {
		return nil, e
	}
	return rrdTimes(q, time.Now())
}
