package kubevirtsim

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	virtv1 "kubevirt.io/api/core/v1"
)

// The stand-in virt-handler records on the VMI what the real one would do
// through libvirt, on the paths virt-api calls.
func TestVirtHandler(t *testing.T) {
	e := newEnv(t, testVM("web", virtv1.RunStrategyAlways)).run(Options{})
	e.waitRunning("web")
	srv := httptest.NewServer(NewVirtHandler(e.kv))
	defer srv.Close()
	do := func(method, action string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+"/v1/namespaces/"+testNS+"/virtualmachineinstances/web/"+action, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := do(http.MethodPut, "pause"); code != http.StatusOK {
		t.Fatalf("pause: %d %s", code, body)
	}
	if !hasVMICondition(e.getVMI("web"), virtv1.VirtualMachineInstancePaused, corev1.ConditionTrue) {
		t.Error("pause did not set Paused=True")
	}
	if code, body := do(http.MethodPut, "unpause"); code != http.StatusOK {
		t.Fatalf("unpause: %d %s", code, body)
	}
	if findVMICondition(e.getVMI("web"), virtv1.VirtualMachineInstancePaused) != nil {
		t.Error("unpause left the Paused condition")
	}
	do(http.MethodPut, "softreboot")
	do(http.MethodPut, "reset")
	do(http.MethodPut, "reset")
	if a := e.getVMI("web").Annotations; a[AnnotationReboots] != "1" || a[AnnotationResets] != "2" {
		t.Errorf("counters after softreboot, reset, reset: %v", a)
	}
	if code, _ := do(http.MethodGet, "pause"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET pause = %d, want 405", code)
	}
	if code, _ := do(http.MethodPut, "freeze"); code != http.StatusNotFound {
		t.Errorf("freeze = %d, want 404 (not stood in)", code)
	}
	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/v1/namespaces/"+testNS+"/virtualmachineinstances/nope/pause", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), "nope") {
		t.Errorf("pause of a missing VMI = %d %s, want 404", resp.StatusCode, b)
	}
}
