package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubevirt"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/kubevirtsim"
)

// rowsEnv is an API handler over a fake cluster (kubevirtsim.Seed) whose
// guest usage is set by the test, with an Administrator token ("admin")
// and a PVEVMUser of pool lab ("lab").
type rowsEnv struct {
	t     *testing.T
	h     *APIHandler
	c     *kube.Cluster
	kv    kubevirt.Interface
	usage atomic.Pointer[kube.Usage] // of default/debian-12
}

// newRowsEnv starts it; usage is read every poll, and opts tune the
// KubeVirt clients.
func newRowsEnv(t *testing.T, poll time.Duration, opts ...func(*kubevirtsim.FakeKubeVirtClientset)) *rowsEnv {
	t.Helper()
	e := &rowsEnv{t: t}
	e.usage.Store(&kube.Usage{CPUCores: 1, MemBytes: 1 << 30})
	// debian-12 runs.
	vmi := &kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "debian-12", Namespace: "default", UID: "rows-vmi"},
		Status: kubevirtv1.VirtualMachineInstanceStatus{Phase: kubevirtv1.Running, NodeName: "kv-node-1.lab.internal",
			PhaseTransitionTimestamps: []kubevirtv1.VirtualMachineInstancePhaseTransitionTimestamp{{Phase: kubevirtv1.Running, PhaseTransitionTimestamp: metav1.NewTime(time.Now().Add(-time.Hour))}}},
	}
	kc, kv := kubevirtsim.NewFakeClients(append(kubevirtsim.Seed(), vmi)...)
	for _, o := range opts {
		o(kv.(*kubevirtsim.FakeKubeVirtClientset))
	}
	e.kv = kv
	src := kube.MetricsSourceFunc(func(context.Context, []string) (kube.MetricsSample, error) {
		return kube.MetricsSample{Guests: map[kube.GuestKey]kube.Usage{{Namespace: "default", Name: "debian-12"}: *e.usage.Load()}}, nil
	})
	e.c = kube.New(kc, kv, nil, kube.Options{Metrics: src, MetricsInterval: poll, AssumeKubeVirtAPIs: true, Logger: zap.NewNop()})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.c.Stop)
	h := &APIHandler{ClusterName: "rows", logger: zap.NewNop(), cluster: e.c}
	h.auth = newAuthenticator([]byte("rows-key"))
	h.auth.tokens["root@pam!admin"] = "s"
	h.auth.tokens["lab@pve!t"] = "s"
	var err error
	h.perms, err = newPermissions(false, []IdentityConfig{
		{ID: "root@pam", Roles: []GrantConfig{{Path: "/", Role: "Administrator"}}},
		{ID: "lab@pve", Roles: []GrantConfig{{Path: "/pool/lab", Role: "PVEVMUser"}}},
	}, "")
	if err != nil {
		t.Fatal(err)
	}
	h.metrics, _ = newAPIMetrics(nil)
	h.router = h.routes()
	e.h = h
	e.waitUsage(1)
	return e
}

// do answers one API call; token is "admin" or "lab".
func (e *rowsEnv) do(method, path, token string, form url.Values) (int, []byte) {
	e.t.Helper()
	id := map[string]string{"admin": "root@pam!admin", "lab": "lab@pve!t"}[token]
	var body *strings.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	} else {
		body = strings.NewReader("")
	}
	req := httptest.NewRequest(method, "https://x/api2/json"+path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.Header.Set("Authorization", "PVEAPIToken="+id+"=s")
	rec := httptest.NewRecorder()
	if err := e.h.ServeHTTP(rec, req, &nextHandler{}); err != nil {
		e.t.Fatal(err)
	}
	return rec.Code, rec.Body.Bytes()
}

// rows is /cluster/resources?type=vm (or another list) as the caller
// sees it, by vmid.
func (e *rowsEnv) rows(path, token string) map[float64]map[string]any {
	e.t.Helper()
	code, body := e.do(http.MethodGet, path, token, nil)
	if code != 200 {
		e.t.Fatalf("GET %s: %d %s", path, code, body)
	}
	var env struct{ Data []map[string]any }
	if err := json.Unmarshal(body, &env); err != nil {
		e.t.Fatalf("GET %s: %v: %s", path, err, body)
	}
	out := map[float64]map[string]any{}
	for _, r := range env.Data {
		if id, ok := r["vmid"].(float64); ok {
			out[id] = r
		}
	}
	return out
}

// waitUsage waits until debian-12's row shows cores of usage.
func (e *rowsEnv) waitUsage(cores float64) {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		g, err := e.c.Guest(100)
		if err != nil {
			e.t.Fatal(err)
		}
		if u, ok := e.c.GuestMetrics(g.Namespace(), g.Name()); ok && u.CPUCores == cores {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("no usage reading of %v cores", cores)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// frozenVMWatch makes the VM watch deliver nothing: the informer then
// knows only what it listed and what the API's own writes put in.
func frozenVMWatch(kv *kubevirtsim.FakeKubeVirtClientset) {
	kv.PrependWatchReactor("virtualmachines", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, watch.NewFake(), nil
	})
}

// TestRowCacheReadsOwnWrites: a change made through the API shows in the
// very next /cluster/resources, /nodes/{n}/qemu and status/current, even
// when the watch has not delivered it (here: never will).
func TestRowCacheReadsOwnWrites(t *testing.T) {
	// Usage is read once: no new reading rebuilds the rows by chance.
	e := newRowsEnv(t, time.Hour, frozenVMWatch)
	for _, p := range []string{"/cluster/resources?type=vm", "/nodes/kv-node-1-lab-internal/qemu"} {
		if tags := e.rows(p, "admin")[100]["tags"]; tags != nil {
			t.Fatalf("%s: VM 100 tags %v before the change", p, tags)
		}
	}
	if code, body := e.do(http.MethodPut, "/nodes/kv-node-1-lab-internal/qemu/100/config", "admin", url.Values{"tags": {"cached"}}); code != 200 {
		t.Fatalf("PUT config: %d %s", code, body)
	}
	for _, p := range []string{"/cluster/resources?type=vm", "/nodes/kv-node-1-lab-internal/qemu", "/nodes/kv-node-1-lab-internal/qemu?full=1"} {
		if tags := e.rows(p, "admin")[100]["tags"]; tags != "cached" {
			t.Errorf("%s right after the write: VM 100 tags %v, want cached", p, tags)
		}
	}
	_, body := e.do(http.MethodGet, "/nodes/kv-node-1-lab-internal/qemu/100/status/current", "admin", nil)
	if !bytes.Contains(body, []byte(`"tags":"cached"`)) {
		t.Errorf("status/current right after the write: %s", body)
	}
}

// TestRowCacheFollowsEvents: a change made behind the API's back shows
// once the informer has it, and a deleted VM leaves the lists.
func TestRowCacheFollowsEvents(t *testing.T) {
	e := newRowsEnv(t, 10*time.Millisecond)
	e.rows("/cluster/resources?type=vm", "admin") // the cache is warm

	// Another client renames VM 101.
	vm, err := e.kv.KubevirtV1().VirtualMachines("default").Get(context.Background(), "win-11", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vm.Annotations["pve.caddy-proxmox.io/name"] = "renamed"
	if _, err := e.kv.KubevirtV1().VirtualMachines("default").Update(context.Background(), vm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.rows("/cluster/resources?type=vm", "admin")[101]["name"] != "renamed" {
		if time.Now().After(deadline) {
			t.Fatal("the rename never showed in /cluster/resources")
		}
		time.Sleep(5 * time.Millisecond)
	}

	// A deleted VM leaves the list with the informer's event.
	if err := e.kv.KubevirtV1().VirtualMachines("default").Delete(context.Background(), "win-11", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for e.rows("/cluster/resources?type=vm", "admin")[101] != nil {
		if time.Now().After(deadline) {
			t.Fatal("the deleted VM stayed in /cluster/resources")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRowCacheUsageFresh: usage readings change rows without any change
// to the VM or its instance.
func TestRowCacheUsageFresh(t *testing.T) {
	e := newRowsEnv(t, 10*time.Millisecond)
	cpus := e.rows("/cluster/resources?type=vm", "admin")[100]["maxcpu"].(float64)
	e.usage.Store(&kube.Usage{CPUCores: 2, MemBytes: 3 << 30})
	e.waitUsage(2)
	for _, p := range []string{"/cluster/resources?type=vm", "/nodes/kv-node-1-lab-internal/qemu?full=1"} {
		row := e.rows(p, "admin")[100]
		if row["mem"] != float64(3<<30) || row["cpu"] != min(2/cpus, 1) {
			t.Errorf("%s: VM 100 cpu %v mem %v after the new reading", p, row["cpu"], row["mem"])
		}
	}
	_, body := e.do(http.MethodGet, "/nodes/kv-node-1-lab-internal/qemu/100/status/current", "admin", nil)
	if !bytes.Contains(body, []byte(`"mem":3221225472`)) {
		t.Errorf("status/current after the new reading: %s", body)
	}
}

// TestRowCachePerCaller: rows are shared, what each caller sees is not:
// the pool user sees only the VMs of its pool, before and after an
// Administrator filled the cache, and the Administrator still sees all.
func TestRowCachePerCaller(t *testing.T) {
	e := newRowsEnv(t, 10*time.Millisecond)
	inLab := map[float64]bool{}
	for _, g := range e.c.Guests() {
		inLab[float64(g.VMID)] = g.Namespace() == "lab"
	}
	lab := func() {
		t.Helper()
		seen := 0
		for _, p := range []string{"/cluster/resources?type=vm", "/cluster/resources", "/nodes/kv-node-1-lab-internal/qemu", "/nodes/kv-node-2-lab-internal/qemu", "/nodes/kv-node-3-lab-internal/qemu?full=1"} {
			for id := range e.rows(p, "lab") {
				seen++
				if !inLab[id] {
					t.Errorf("%s: the lab pool's user sees VM %v, which is not in the pool", p, id)
				}
			}
		}
		if seen == 0 {
			t.Error("the lab pool's user sees none of its VMs")
		}
		if code, _ := e.do(http.MethodGet, "/nodes/kv-node-1-lab-internal/qemu/100/status/current", "lab", nil); code != http.StatusForbidden {
			t.Errorf("status/current of a VM outside the pool: %d, want 403", code)
		}
	}
	lab()
	all := e.rows("/cluster/resources?type=vm", "admin")
	if len(all) < 3 {
		t.Fatalf("the Administrator sees %d VMs", len(all))
	}
	lab()
	if again := e.rows("/cluster/resources?type=vm", "admin"); len(again) != len(all) {
		t.Errorf("the Administrator sees %d VMs after the pool user, %d before", len(again), len(all))
	}
}

// TestRowCacheBytes: the cached rows are byte for byte the rows encoded
// afresh at the same moment, uptime included, on every list and for
// status/current.
func TestRowCacheBytes(t *testing.T) {
	e := newRowsEnv(t, 10*time.Millisecond)
	c, r := e.c, e.h.vmRows(e.c)
	for _, now := range []time.Time{time.Now(), time.Now().Add(90 * time.Minute)} {
		rows := r.rows(c)
		if len(rows) != len(c.Guests()) {
			t.Fatalf("%d rows for %d guests", len(rows), len(c.Guests()))
		}
		for _, row := range rows {
			g, err := c.Guest(row.g.VMID)
			if err != nil {
				t.Fatal(err)
			}
			f := factsOf(c, g, now)
			for _, tc := range []struct {
				name string
				got  []byte
				want any
			}{
				{"resource", row.appendResource(nil, now, true), vmResource(g, f, e.h.guestPool(c, g))},
				{"resource, pool hidden", row.appendResource(nil, now, false), vmResource(g, f, "")},
				{"status", row.appendStatus(nil, now), vmStatus(g, f)},
				{"current", r.row(c, g).appendCurrent(nil, now), vmCurrent(g, f)},
			} {
				want, _ := json.Marshal(tc.want)
				if !bytes.Equal(tc.got, want) {
					t.Errorf("VM %d %s row:\ncached %s\nfresh  %s", g.VMID, tc.name, tc.got, want)
				}
			}
		}
	}
}

// TestRowCacheReuses: with nothing changed, a list reuses every row, and
// a change re-encodes only the rows it is about.
func TestRowCacheReuses(t *testing.T) {
	e := newRowsEnv(t, 10*time.Millisecond)
	r := e.h.vmRows(e.c)
	before := map[string]*guestRow{}
	for _, row := range r.rows(e.c) {
		before[row.g.Name()] = row
	}
	vm, err := e.kv.KubevirtV1().VirtualMachines("default").Get(context.Background(), "win-11", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vm.Annotations["pve.caddy-proxmox.io/name"] = "changed"
	if _, err := e.kv.KubevirtV1().VirtualMachines("default").Update(context.Background(), vm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if g, _ := e.c.Guest(101); g.PVEName() == "changed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the change never reached the cache")
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, row := range r.rows(e.c) {
		switch name := row.g.Name(); {
		case name == "win-11" && row == before[name]:
			t.Error("the changed VM's row was not rebuilt")
		case name != "win-11" && name != "debian-12" && row != before[name]:
			// debian-12 runs and has usage readings coming in.
			t.Errorf("the row of %s was rebuilt though nothing about it changed", name)
		}
	}
}
