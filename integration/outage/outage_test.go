// Package outage stops and restarts kube-apiserver under a running Caddy.
// It has its own test cluster, so the outage cannot disturb other tests.
package outage

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"kubevirt.io/client-go/kubevirt"

	_ "github.com/caddy-proxmox/caddy-proxmox/caddymodule"
	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
	"github.com/caddy-proxmox/caddy-proxmox/internal/testutil"
	"github.com/caddy-proxmox/caddy-proxmox/kubevirtsim"
	"github.com/caddy-proxmox/caddy-proxmox/testenv"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

const (
	tokenID     = "root@pam!ci"
	tokenSecret = "0b6f3c1e-7d2a-4b8e-9c4f-5a6b7c8d9e0f"
	userID      = "alice@pve"
	userPass    = "correct-horse"
)

// staleReads is how long reads are answered from the caches during the
// outage (the handler's stale_reads).
const staleReads = 8 * time.Second

// startStack runs a test cluster with KubeVirt's virt-api, the stand-in
// controller and virt-handler, and an in-process Caddy serving the API on
// it.
func startStack(t *testing.T) (*testenv.Env, *testcaddy.PVE) {
	env := testenv.StartT(t, testenv.Options{
		Seed:    true,
		VirtAPI: true,
		Controller: func(ctx context.Context, kube kubernetes.Interface, kv kubevirt.Interface) error {
			// A slow start, so that a start task is still running when the
			// outage begins.
			return kubevirtsim.NewController(kv, kube, kubevirtsim.Options{
				StartDelay: 2 * time.Second, StopDelay: 200 * time.Millisecond,
			}).Run(ctx)
		},
		NewVirtHandler: func(e *testenv.Env) http.Handler {
			return kubevirtsim.NewVirtHandler(kubevirt.NewForConfigOrDie(e.VirtHandlerConfig))
		},
	})
	dir := t.TempDir()
	port := testcaddy.FreePort(t)
	testcaddy.Start(t, testcaddy.Globals(dir)+fmt.Sprintf(`
https://localhost:%d {
	tls internal
	proxmox_api {
		kubeconfig %s
		token %s %s
		user %s %s
		auth_failure_delay 0s
		stale_reads %s
	}
}
`, port, env.Kubeconfig, tokenID, tokenSecret, userID, userPass, staleReads))
	base := fmt.Sprintf("https://localhost:%d", port)
	testcaddy.WaitReady(t, base+"/api2/json/version")
	return env, &testcaddy.PVE{T: t, Base: base, C: testcaddy.Client(), Auth: testcaddy.TokenAuth(tokenID, tokenSecret)}
}

// TestAPIServerOutage: while kube-apiserver is down writes answer PVE's
// 503 at once; reads are answered from the caches for stale_reads, then
// 503 too; login always works; a start task interrupted by the outage
// ends truthfully; after kube-apiserver returns, a change made then is
// served within seconds without restarting Caddy, and no goroutines are
// left behind.
func TestAPIServerOutage(t *testing.T) {
	env, a := startStack(t)
	ctx := context.Background()
	node := a.FirstNode()
	var id string
	a.OK("GET", "/cluster/nextid", nil, &id)
	var upid string
	a.OK("POST", "/nodes/"+node+"/qemu", testcaddy.Form("vmid", id, "name", "outage-test", "cores", "1", "memory", "512"), &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create: %s", exit)
	}
	vmPath := "/nodes/" + node + "/qemu/" + id
	// Warm every code path once, then take the goroutine baseline.
	a.Status(node, id)
	a.OK("GET", "/cluster/resources", nil, nil)
	a.C.CloseIdleConnections()
	before := testutil.SettledGoroutineBaseline()
	t.Logf("goroutines before the outage: %d", before.Count())

	// A start accepted right before the outage.
	a.OK("POST", vmPath+"/status/start", nil, &upid)
	tStop := time.Now()
	env.StopAPIServer()

	// A write answers 503 quickly: the first within the probe's reach.
	// (A lock changes nothing of the guest: it fails either way.)
	var first time.Duration
	deadline := time.Now().Add(30 * time.Second)
	for {
		ans := a.Do("PUT", vmPath+"/config", testcaddy.Form("description", "written during the outage"))
		if ans.Code == http.StatusServiceUnavailable {
			first = time.Since(tStop)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("while kube-apiserver goes down: %s %s", ans.Status, ans.Raw)
		}
		time.Sleep(100 * time.Millisecond)
	}
	tDown := time.Now()
	t.Logf("first 503 %v after kube-apiserver was stopped", first.Round(time.Millisecond))

	// Reads are still answered from the caches, until stale_reads has
	// passed since the cluster was lost; then they answer 503 too.
	var stale int
	for {
		var list []map[string]any
		ans := a.Do("GET", "/cluster/resources?type=vm", nil)
		if ans.Code == http.StatusServiceUnavailable {
			break
		}
		if ans.Code != http.StatusOK || json.Unmarshal(ans.Data, &list) != nil || !hasVMID(list, id) {
			t.Fatalf("a read during the outage: %s %s", ans.Status, ans.Raw)
		}
		stale++
		if time.Since(tDown) > staleReads+30*time.Second {
			t.Fatalf("reads still answered from the caches %v after the outage began (stale_reads %v)", time.Since(tStop), staleReads)
		}
		time.Sleep(200 * time.Millisecond)
	}
	servedFor := time.Since(tStop)
	t.Logf("reads answered from the caches: %d, for %v after kube-apiserver was stopped (stale_reads %v)", stale, servedFor.Round(time.Millisecond), staleReads)
	// Answered from the caches at first; a machine so loaded that the
	// outage was noticed only after stale_reads cannot show it.
	if stale == 0 && time.Since(tDown) < staleReads/2 {
		t.Errorf("no read answered from the caches during the outage")
	}
	if servedFor < staleReads {
		t.Errorf("reads answered 503 %v after kube-apiserver was stopped, before stale_reads (%v)", servedFor, staleReads)
	}

	var during []int
	var slowest time.Duration
	for round := 0; round < 5; round++ {
		for _, c := range []struct{ method, path string }{
			{"GET", vmPath + "/status/current"},
			{"GET", "/cluster/resources"},
			{"GET", "/nodes"},
			{"GET", "/nodes/" + node + "/tasks/" + upid + "/status"},
			{"POST", vmPath + "/status/stop"}, // must not happen
			{"PUT", vmPath + "/config"},
		} {
			var f url.Values
			if c.method == "PUT" {
				f = testcaddy.Form("description", "written during the outage")
			}
			t0 := time.Now()
			ans := a.Do(c.method, c.path, f)
			took := time.Since(t0)
			slowest = max(slowest, took)
			if ans.Code != http.StatusServiceUnavailable || !strings.HasPrefix(ans.Status, "503 cluster unavailable: ") ||
				!strings.HasPrefix(ans.Message, "cluster unavailable: ") || string(ans.Data) != "null" {
				t.Fatalf("%s %s during the outage: %s %s", c.method, c.path, ans.Status, ans.Raw)
			}
			if took > 5*time.Second {
				t.Errorf("%s %s took %v during the outage", c.method, c.path, took)
			}
		}
		// Login and the version need no cluster.
		a.OK("GET", "/version", nil, nil)
		var login map[string]any
		anon := &testcaddy.PVE{T: t, Base: a.Base, C: a.C}
		anon.OK("POST", "/access/ticket", testcaddy.Form("username", userID, "password", userPass), &login)
		if login["ticket"] == nil {
			t.Fatalf("login during the outage: %v", login)
		}
		during = append(during, runtime.NumGoroutine())
		time.Sleep(time.Second)
	}
	t.Logf("during the outage: slowest answer %v; goroutines %v", slowest.Round(time.Millisecond), during)
	if during[len(during)-1] > during[0]+3 {
		t.Errorf("goroutines grow during the outage: %v", during)
	}

	// Back: a change made now must be served within seconds.
	if err := env.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	tBack := time.Now()
	vm := env.VMByID(t, id)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"renamed-after-outage"}}}`, translate.AnnotationName)
	for {
		_, err := env.DirectKubeVirt.KubevirtV1().VirtualMachines(vm.Namespace).Patch(ctx, vm.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if err == nil {
			break
		}
		if time.Since(tBack) > 30*time.Second {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var recovered time.Duration
	for {
		ans := a.Do("GET", vmPath+"/config", nil)
		if ans.Code == http.StatusOK {
			var cfg map[string]any
			_ = json.Unmarshal(ans.Data, &cfg)
			if cfg["name"] == "renamed-after-outage" {
				recovered = time.Since(tBack)
				break
			}
		} else if ans.Code != http.StatusServiceUnavailable {
			t.Fatalf("after kube-apiserver returned: %s %s", ans.Status, ans.Raw)
		}
		if time.Since(tBack) > 60*time.Second {
			t.Fatalf("no fresh data 60 s after kube-apiserver returned: %s %s", ans.Status, ans.Raw)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("RECOVERY: fresh data %v after kube-apiserver was ready again (target 10 s)", recovered.Round(time.Millisecond))
	if recovered > 10*time.Second {
		// The target; generous already for a 1 s probe.
		t.Errorf("fresh data only %v after kube-apiserver returned (target 10 s)", recovered)
	}

	// The interrupted start says what happened: the VM did start (the
	// controller catches up), and the writes answered 503 did not happen.
	// The controller catches up on its own schedule: its workqueue (client-go's
	// default controller rate limiter, as virt-controller's) retried the
	// VMI's writes from 5 ms doubling through the outage, so its next try
	// comes up to about the outage's length after kube-apiserver is back,
	// and twice that when the first one meets kube-apiserver still warming
	// up (26 s on a quiet machine, over a minute under CI's load). Its
	// timing is not the plugin's to meet, so the bound covers it.
	tWait := time.Now()
	if exit := a.WaitTaskWithin(upid, 3*time.Minute); exit != "OK" {
		t.Fatalf("start task interrupted by the outage: %s", exit)
	}
	t.Logf("the interrupted start ended %v after the recovery", time.Since(tWait).Round(time.Millisecond))
	if st := a.Status(node, id); st["status"] != "running" {
		t.Fatalf("status after the outage: %v", st)
	}
	var cfg map[string]any
	a.OK("GET", vmPath+"/config", nil, &cfg)
	if cfg["description"] != nil {
		t.Fatalf("a write answered 503 happened: %v", cfg)
	}
	var tasks []map[string]any
	a.OK("GET", "/cluster/tasks", nil, &tasks)
	for _, tk := range tasks {
		if tk["status"] == nil || tk["endtime"] == nil {
			t.Errorf("task still running after the outage: %v", tk)
		}
	}

	// Informers reconnected: their watch goroutines are new ones in place
	// of the old, so the count is compared, not the goroutines themselves.
	a.C.CloseIdleConnections()
	before.CheckCount(t, 30*time.Second, 5)
	t.Logf("goroutines: %d before the outage, %d after recovery", before.Count(), runtime.NumGoroutine())
}

// hasVMID tells whether a /cluster/resources list shows the VM vmid.
func hasVMID(list []map[string]any, vmid string) bool {
	for _, r := range list {
		if fmt.Sprint(r["vmid"]) == vmid {
			return true
		}
	}
	return false
}
