package api_test

import (
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestRRDData(t *testing.T) {
	a := shared(t)
	var rows []map[string]any
	a.OK("GET", "/cluster/resources", url.Values{"type": {"vm"}}, &rows)
	if len(rows) == 0 {
		t.Fatal("no VMs")
	}
	vm := rows[0]
	vmPath := "/nodes/" + vm["node"].(string) + "/qemu/" + strconv.Itoa(int(vm["vmid"].(float64))) + "/rrddata"
	nodePath := "/nodes/" + vm["node"].(string) + "/rrddata"

	steps := map[string]int64{"hour": 60, "day": 1800, "week": 10800, "month": 43200, "year": 604800}
	for _, path := range []string{nodePath, vmPath} {
		for tf, step := range steps {
			before := time.Now().Unix()
			var pts []map[string]any
			a.OK("GET", path, url.Values{"timeframe": {tf}, "cf": {"AVERAGE"}}, &pts)
			if len(pts) != 70 {
				t.Fatalf("%s %s: %d points", path, tf, len(pts))
			}
			last := int64(pts[69]["time"].(float64))
			if last > time.Now().Unix() || last <= before-step-1 || last%step != 0 {
				t.Fatalf("%s %s: last point at %d (now %d)", path, tf, last, before)
			}
			for i, p := range pts {
				if len(p) != 1 || int64(p["time"].(float64)) != last-int64(69-i)*step {
					t.Fatalf("%s %s: point %d = %v", path, tf, i, p)
				}
			}
		}
	}

	for _, c := range []struct {
		form  url.Values
		param string
		says  string
	}{
		{url.Values{"timeframe": {"decade"}}, "timeframe", "'decade'"},
		{nil, "timeframe", "missing"},
		{url.Values{"timeframe": {"hour"}, "cf": {"MIN"}}, "cf", "'MIN'"},
	} {
		for _, path := range []string{nodePath, vmPath} {
			ans := a.Do("GET", path, c.form)
			if ans.Code != 400 || !strings.Contains(ans.Errors[c.param], c.says) {
				t.Fatalf("%s %v: %s %s", path, c.form, ans.Status, ans.Raw)
			}
		}
	}
	if ans := a.Do("GET", "/nodes/nope/rrddata", url.Values{"timeframe": {"hour"}}); ans.Code != 500 {
		t.Fatalf("unknown node: %s %s", ans.Status, ans.Raw)
	}
}

// The simulator feeds the usage poller, so running VMs and nodes show
// non-zero cpu and mem.
func TestSimulatedUsage(t *testing.T) {
	a := shared(t)
	deadline := time.Now().Add(20 * time.Second)
	for {
		var rows []map[string]any
		a.OK("GET", "/cluster/resources", nil, &rows)
		vmOK, nodeOK := false, false
		for _, r := range rows {
			cpu, _ := r["cpu"].(float64)
			mem, _ := r["mem"].(float64)
			ok := cpu > 0 && cpu <= 1 && mem > 0
			switch r["type"] {
			case "qemu":
				vmOK = vmOK || (r["status"] == "running" && ok)
			case "node":
				nodeOK = nodeOK || ok
			}
		}
		if vmOK && nodeOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no usage shown (vm %v, node %v): %v", vmOK, nodeOK, rows)
		}
		time.Sleep(200 * time.Millisecond)
	}
	var nodes []map[string]any
	a.OK("GET", "/nodes", nil, &nodes)
	var st map[string]any
	a.OK("GET", "/nodes/"+nodes[0]["node"].(string)+"/status", nil, &st)
	m := st["memory"].(map[string]any)
	if m["used"].(float64) <= 0 || m["used"].(float64)+m["free"].(float64) != m["total"].(float64) {
		t.Fatalf("memory %v", m)
	}
}
