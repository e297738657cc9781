package behaviour

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
)

const (
	tokenID     = "root@pam!behaviour"
	tokenSecret = "0b7f1c2e-behaviour-suite"
	// taskTimeout bounds every task; the plugin's own deadlines are longer
	// (a DataVolume that never binds waits 30 minutes there), so a task
	// still running after it is recorded as such, not waited out.
	taskTimeout = 3 * time.Minute
)

// backend is one ./caddy serving the Proxmox API on a cluster.
type backend struct {
	name string
	api  *testcaddy.PVE
}

// startBackend runs ./caddy with proxmox_api on cluster (the
// simulate directive, or kubeconfig <path>) until the test ends, and
// returns it once it answers.
func startBackend(t *testing.T, name, cluster string) *backend {
	t.Helper()
	dir := t.TempDir()
	port := testcaddy.FreePort(t)
	cfg := testcaddy.Globals(dir) + fmt.Sprintf(`
https://localhost:%d {
	tls internal
	proxmox_api {
		%s
		token %s %s
		auth_failure_delay 0s
	}
}
`, port, cluster, tokenID, tokenSecret)
	p := testcaddy.StartProcess(t, dir, cfg)
	b := &backend{name: name, api: &testcaddy.PVE{T: t, Base: fmt.Sprintf("https://localhost:%d", port),
		C: testcaddy.Client(), Auth: testcaddy.TokenAuth(tokenID, tokenSecret)}}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ans, err := b.api.Send("GET", "/nodes", nil)
		if err == nil && ans.Code == http.StatusOK {
			return b
		}
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("%s backend not serving (%v %s); output:\n%s", name, err, ans.Status, p.Output())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// step is one call of a case; do returns what a client observes of it.
// On the simulated cluster every step must succeed (a 200, a task that
// ends OK, the status waited for) unless fails is set: a suite whose
// calls fail alike on both backends would prove nothing.
type step struct {
	name  string
	do    func(r *runner) any
	fails bool
	// timeout bounds the step's task (default taskTimeout).
	timeout time.Duration
}

// succeeded tells whether an observation is a success.
func succeeded(o any) bool {
	m, ok := o.(map[string]any)
	if !ok {
		return o != "" && o != nil
	}
	if m["code"] != http.StatusOK {
		return false
	}
	if exit, ok := m["exit"]; ok && exit != "OK" {
		return false
	}
	if want, ok := m["want"]; ok {
		d, _ := m["data"].(map[string]any)
		return d != nil && d["status"] == want
	}
	return true
}

// runner runs a case's steps on one backend.
type runner struct {
	b       *backend
	timeout time.Duration // of the current step's task
	obs     []any
	took    []time.Duration
	errs    []string // transport failures, which fail the test outright
}

// run runs steps in order and returns what each observed.
func (b *backend) run(steps []step) *runner {
	seen := map[string]bool{}
	for _, s := range steps {
		if seen[s.name] || strings.Contains(s.name, "-") {
			// known-divergences.txt writes the spaces of names as dashes.
			panic("behaviour: step name " + s.name + " is used twice in a case or has a dash")
		}
		seen[s.name] = true
	}
	r := &runner{b: b}
	for _, s := range steps {
		t0 := time.Now()
		r.timeout = cmp.Or(s.timeout, taskTimeout)
		r.obs = append(r.obs, s.do(r))
		r.took = append(r.took, time.Since(t0).Round(10*time.Millisecond))
	}
	return r
}

// call sends a request and observes its answer: the status code and,
// for failures, the message (and parameter errors).
func (r *runner) call(method, path string, form url.Values) (testcaddy.Answer, map[string]any) {
	ans, err := r.b.api.Send(method, path, form)
	if err != nil {
		r.errs = append(r.errs, err.Error())
		return ans, map[string]any{"error": "transport"}
	}
	o := map[string]any{"code": ans.Code}
	if ans.Code != http.StatusOK {
		o["message"] = normalizeText(ans.Message)
		if len(ans.Errors) > 0 {
			errs := map[string]any{}
			for k, v := range ans.Errors {
				errs[k] = normalizeText(v)
			}
			o["errors"] = errs
		}
	}
	return ans, o
}

// begin sends a request that answers with a task and returns its UPID,
// or "" when the answer is no task, with the observation of the answer.
func (r *runner) begin(method, path string, form url.Values) (string, map[string]any) {
	ans, o := r.call(method, path, form)
	if ans.Code != http.StatusOK {
		return "", o
	}
	var upid string
	if err := json.Unmarshal(ans.Data, &upid); err != nil || !strings.HasPrefix(upid, "UPID:") {
		o["data"] = normalizeJSON(ans.Data)
		return "", o
	}
	return upid, o
}

// task sends a request that answers with a task, waits for the task and
// observes its exit status.
func (r *runner) task(method, path string, form url.Values) map[string]any {
	upid, o := r.begin(method, path, form)
	if upid != "" {
		o["exit"] = r.waitTask(upid)
	}
	return o
}

// taskLogged is task, observing also the lines of the task's log that
// contain one of match (what the task tells the user about it).
func (r *runner) taskLogged(method, path string, form url.Values, match ...string) map[string]any {
	upid, o := r.begin(method, path, form)
	if upid == "" {
		return o
	}
	o["exit"] = r.waitTask(upid)
	node := strings.Split(upid, ":")[1]
	log, err := r.b.api.Send("GET", "/nodes/"+node+"/tasks/"+url.PathEscape(upid)+"/log", url.Values{"limit": {"1000"}})
	if err != nil {
		r.errs = append(r.errs, err.Error())
		return o
	}
	var lines []map[string]any
	_ = json.Unmarshal(log.Data, &lines)
	var said []string
	for _, l := range lines {
		t := fmt.Sprint(l["t"])
		for _, m := range match {
			if strings.Contains(t, m) {
				said = append(said, normalizeText(t))
				break
			}
		}
	}
	o["log"] = said
	return o
}

// waitTask polls a task's status like proxmoxer and bpg and returns its
// exit status (normalized), or that it is still running after
// taskTimeout.
func (r *runner) waitTask(upid string) string {
	node := strings.Split(upid, ":")[1]
	deadline := time.Now().Add(r.timeout)
	for time.Now().Before(deadline) {
		ans, err := r.b.api.Send("GET", "/nodes/"+node+"/tasks/"+url.PathEscape(upid)+"/status", nil)
		if err != nil {
			r.errs = append(r.errs, err.Error())
			return "transport error"
		}
		var st map[string]any
		_ = json.Unmarshal(ans.Data, &st)
		if st["status"] == "stopped" {
			exit, _ := st["exitstatus"].(string)
			return normalizeText(exit)
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Sprintf("still running after %v", r.timeout)
}

// node is the node the VM vmid is on now ("" if none has it).
func (r *runner) node(vmid string) string {
	ans, err := r.b.api.Send("GET", "/cluster/resources", url.Values{"type": {"vm"}})
	if err != nil {
		r.errs = append(r.errs, err.Error())
		return ""
	}
	var list []map[string]any
	_ = json.Unmarshal(ans.Data, &list)
	for _, vm := range list {
		if fmt.Sprint(vm["vmid"]) == vmid {
			n, _ := vm["node"].(string)
			return n
		}
	}
	return ""
}

// vm is the API path of VM vmid on its current node, with rest appended.
func (r *runner) vm(vmid, rest string) string {
	node := r.node(vmid)
	if node == "" {
		node = firstNode
	}
	p := "/nodes/" + node + "/qemu/" + vmid
	if rest != "" {
		p += "/" + rest
	}
	return p
}

// get observes a GET of the VM's path rest, keeping keys of data (all if
// none are given).
func (r *runner) get(vmid, rest string, keys ...string) any {
	ans, o := r.call("GET", r.vm(vmid, rest), nil)
	if ans.Code != http.StatusOK {
		return o
	}
	var data any
	_ = json.Unmarshal(ans.Data, &data)
	o["data"] = pick(normalizeValue(data), keys)
	return o
}

// waitStatus polls status/current until the VM is status (PVE's
// "running"/"stopped") or a timeout, and observes the status then.
func (r *runner) waitStatus(vmid, status string, timeout time.Duration) any {
	deadline := time.Now().Add(timeout)
	var last any
	for {
		last = r.get(vmid, "status/current", statusKeys...)
		if o, ok := last.(map[string]any); ok {
			o["want"] = status
			if d, ok := o["data"].(map[string]any); ok && d["status"] == status {
				return last
			}
		}
		if time.Now().After(deadline) {
			return last
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// statusKeys are the keys of status/current that do not change from one
// look to the next (not uptime, cpu, memory or pid). running-machine is
// observed by the machine case only.
var statusKeys = []string{"status", "qmpstatus", "lock", "name", "agent", "tags", "template"}

// nodeNames are the PVE names of the simulated cluster's nodes, which the
// real one has too (sameCluster), sorted; cases create their VMs on the
// first, firstNode.
var nodeNames []string
var firstNode string

// sameCluster checks that both backends offer the same nodes and
// storages, and sets firstNode.
func sameCluster(t *testing.T, sim, real *backend) {
	t.Helper()
	list := func(b *backend, path, key string) []string {
		var items []map[string]any
		b.api.OK("GET", path, nil, &items)
		var out []string
		for _, it := range items {
			out = append(out, fmt.Sprint(it[key]))
		}
		sort.Strings(out)
		return out
	}
	for _, q := range [][2]string{{"/nodes", "node"}, {"/storage", "storage"}} {
		a, b := list(sim, q[0], q[1]), list(real, q[0], q[1])
		if strings.Join(a, " ") != strings.Join(b, " ") || len(a) == 0 {
			t.Fatalf("GET %s: sim has %v, real %v", q[0], a, b)
		}
		if q[0] == "/nodes" {
			nodeNames, firstNode = a, a[0]
		}
	}
}

// knownDivergence is a line of known-divergences.txt.
type knownDivergence struct {
	steps map[string]bool
	cause string
}

// loadKnown reads known-divergences.txt: "case step,step,... cause", with
// the spaces of step names written as dashes.
func loadKnown(t *testing.T) map[string]knownDivergence {
	t.Helper()
	f, err := os.Open("known-divergences.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]knownDivergence{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 3 {
			t.Fatalf("known-divergences.txt: %q: want case, steps and cause", line)
		}
		kd := knownDivergence{steps: map[string]bool{}, cause: strings.Join(f[2:], " ")}
		for _, s := range strings.Split(f[1], ",") {
			kd.steps[strings.ReplaceAll(s, "-", " ")] = true
		}
		out[f[0]] = kd
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// difference is a step whose observations differ.
type difference struct {
	step      string
	sim, real string
}

// compare lists the steps whose observations differ.
func compare(steps []step, sim, real *runner) []difference {
	var out []difference
	for i, s := range steps {
		a, _ := json.Marshal(sim.obs[i])
		b, _ := json.Marshal(real.obs[i])
		if string(a) != string(b) {
			out = append(out, difference{step: s.name, sim: string(a), real: string(b)})
		}
	}
	return out
}

// runBoth runs a case on both backends at once.
func runBoth(steps []step, sim, real *backend) (*runner, *runner) {
	var wg sync.WaitGroup
	var rs, rr *runner
	wg.Go(func() { rs = sim.run(steps) })
	wg.Go(func() { rr = real.run(steps) })
	wg.Wait()
	return rs, rr
}

// judge fails the test on a difference not listed for the case, on a
// listed case that no longer differs, and on listed steps that agree.
func judge(t *testing.T, name string, diffs []difference, known map[string]knownDivergence) {
	t.Helper()
	kd, listed := known[name]
	differing := map[string]bool{}
	for _, d := range diffs {
		differing[d.step] = true
		if listed && kd.steps[d.step] {
			t.Logf("known divergence (%s) in step %s:\n  sim:  %s\n  real: %s", kd.cause, d.step, d.sim, d.real)
			continue
		}
		t.Errorf("step %s differs:\n  sim:  %s\n  real: %s", d.step, d.sim, d.real)
	}
	if !listed {
		return
	}
	var agree []string
	for s := range kd.steps {
		if !differing[s] {
			agree = append(agree, s)
		}
	}
	sort.Strings(agree)
	if len(agree) > 0 {
		t.Errorf("known-divergences.txt lists steps %q of %s (%s), but both backends agree on them now: take them off the list",
			agree, name, kd.cause)
	}
}
