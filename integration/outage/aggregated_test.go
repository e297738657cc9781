package outage

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// unavailableBody is kube-apiserver's answer for a group whose server it
// cannot reach (an APIService not Available).
const unavailableBody = `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",` +
	`"message":"the server is currently unable to handle the request","reason":"ServiceUnavailable","code":503}`

// TestServerErrorsAfterRestart: after a kube-apiserver restart an API
// group answers 503 for a while (an aggregated API whose server is not
// back yet) although /readyz says ok. Once it serves again, a change made
// meanwhile is served within seconds: the informers do not sit in
// client-go's reflector backoff (0.8 s doubling to 30 s, jittered up to
// 60 s) that 25 s of failures would have grown to.
func TestServerErrorsAfterRestart(t *testing.T) {
	env, a := startStack(t)
	ctx := context.Background()
	node := a.FirstNode()
	var id, upid string
	a.OK("GET", "/cluster/nextid", nil, &id)
	a.OK("POST", "/nodes/"+node+"/qemu", testcaddy.Form("vmid", id, "name", "failing-group", "cores", "1", "memory", "512"), &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create: %s", exit)
	}
	vmPath := "/nodes/" + node + "/qemu/" + id
	vm := env.VMByID(t, id)

	// kubevirt.io answers 503 through the plugin's way in; the test's
	// direct client still reaches it.
	var failed atomic.Int64
	env.Proxy.SetAPI("kubevirt.io", "v1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		failed.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, unavailableBody)
	}))
	t.Cleanup(func() { env.Proxy.SetAPI("kubevirt.io", "", nil) })
	if err := env.RestartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	tReady := time.Now()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"renamed-while-failing"}}}`, translate.AnnotationName)
	for {
		_, err := env.DirectKubeVirt.KubevirtV1().VirtualMachines(vm.Namespace).Patch(ctx, vm.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if err == nil {
			break
		}
		if time.Since(tReady) > 30*time.Second {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Long enough for the reflector's backoff to reach 12.8-25.6 s.
	const failing = 25 * time.Second
	time.Sleep(failing - time.Since(tReady))
	if n := failed.Load(); n == 0 {
		t.Fatal("the plugin never asked kubevirt.io while it failed")
	} else {
		t.Logf("kubevirt.io answered 503 %d times in %v", n, failing)
	}
	env.Proxy.SetAPI("kubevirt.io", "", nil)
	tBack := time.Now()

	for {
		ans := a.Do("GET", vmPath+"/config", nil)
		if ans.Code == http.StatusOK {
			var cfg map[string]any
			_ = json.Unmarshal(ans.Data, &cfg)
			if cfg["name"] == "renamed-while-failing" {
				break
			}
		} else if ans.Code != http.StatusServiceUnavailable {
			t.Fatalf("after kubevirt.io served again: %s %s", ans.Status, ans.Raw)
		}
		if time.Since(tBack) > 90*time.Second {
			t.Fatalf("no fresh data 90 s after kubevirt.io served again: %s %s", ans.Status, ans.Raw)
		}
		time.Sleep(50 * time.Millisecond)
	}
	recovered := time.Since(tBack)
	t.Logf("RECOVERY: fresh data %v after kubevirt.io served again", recovered.Round(time.Millisecond))
	// The retries are at most 2 s apart; the reflector's would be 12 s
	// or more by now.
	if recovered > 6*time.Second {
		t.Errorf("fresh data only %v after kubevirt.io served again (want within 6 s)", recovered)
	}
}
