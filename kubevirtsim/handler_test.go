package kubevirtsim

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubevirt"
)

func TestIsSubresourcePath(t *testing.T) {
	for p, want := range map[string]bool{
		"/apis/subresources.kubevirt.io":                                         true,
		"/apis/subresources.kubevirt.io/":                                        true,
		"/apis/subresources.kubevirt.io/v1":                                      true,
		"/apis/subresources.kubevirt.io/v1/namespaces/a/virtualmachines/b/start": true,
		"/apis/subresources.kubevirt.iox":                                        false,
		"/apis/kubevirt.io/v1/namespaces/a/virtualmachines/b":                    false,
		"/api/v1/nodes": false,
	} {
		if got := IsSubresourcePath(p); got != want {
			t.Errorf("IsSubresourcePath(%q) = %v, want %v", p, got, want)
		}
	}
}

func getJSON(t *testing.T, url string, into any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("%s: content type %q", url, ct)
	}
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		t.Fatalf("%s: decode: %v", url, err)
	}
	return resp.StatusCode
}

func TestHandlerDiscovery(t *testing.T) {
	e := newEnv(t)
	srv := httptest.NewServer(NewSubresourceHandler(e.kv, nil))
	defer srv.Close()

	var group metav1.APIGroup
	if code := getJSON(t, srv.URL+"/apis/subresources.kubevirt.io", &group); code != 200 {
		t.Fatalf("group: %d", code)
	}
	if group.Kind != "APIGroup" || group.Name != "subresources.kubevirt.io" || group.PreferredVersion.GroupVersion != "subresources.kubevirt.io/v1" || len(group.Versions) != 2 {
		t.Errorf("APIGroup = %+v", group)
	}

	for _, v := range []string{"v1", "v1alpha3"} {
		var list metav1.APIResourceList
		if code := getJSON(t, srv.URL+"/apis/subresources.kubevirt.io/"+v, &list); code != 200 {
			t.Fatalf("%s list: %d", v, code)
		}
		names := map[string]bool{}
		for _, r := range list.APIResources {
			names[r.Name] = r.Namespaced
		}
		if list.Kind != "APIResourceList" || list.GroupVersion != "subresources.kubevirt.io/"+v {
			t.Errorf("list header = %+v", list.TypeMeta)
		}
		for _, n := range []string{"virtualmachines/start", "virtualmachines/stop", "virtualmachines/restart",
			"virtualmachineinstances/pause", "virtualmachineinstances/unpause", "virtualmachineinstances/softreboot",
			"virtualmachineinstances/reset", "virtualmachineinstances/vnc", "virtualmachineinstances/console"} {
			if !names[n] {
				t.Errorf("%s: resource %s missing or not namespaced", v, n)
			}
		}
	}

	var version map[string]string
	if code := getJSON(t, srv.URL+"/apis/subresources.kubevirt.io/v1/version", &version); code != 200 || version["gitVersion"] != "v1.8.0" {
		t.Errorf("version: %d %v", code, version)
	}

	var st metav1.Status
	if code := getJSON(t, srv.URL+"/apis/subresources.kubevirt.io/v2", &st); code != 404 || st.Kind != "Status" || st.Reason != metav1.StatusReasonNotFound {
		t.Errorf("unknown version: %d %+v", code, st)
	}
}

// The generated clientset, pointed at the handler, drives the lifecycle end
// to end: the request bodies are what the client really sends.
func TestHandlerThroughGeneratedClient(t *testing.T) {
	e := newEnv(t, testVM("man", virtv1.RunStrategyManual)).run(Options{})
	srv := httptest.NewServer(NewSubresourceHandler(e.kv, nil))
	defer srv.Close()
	client, err := kubevirt.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	vms := client.KubevirtV1().VirtualMachines(testNS)
	vmis := client.KubevirtV1().VirtualMachineInstances(testNS)

	requireStatus(t, vms.Start(e.ctx, "missing", &virtv1.StartOptions{}), 404, `virtualmachine.kubevirt.io "missing" not found`)
	if err := vms.Start(e.ctx, "man", &virtv1.StartOptions{}); err != nil {
		t.Fatalf("start over HTTP: %v", err)
	}
	first := e.waitRunning("man")
	requireStatus(t, vms.Start(e.ctx, "man", &virtv1.StartOptions{}), 409, "VM is already running")

	if err := vmis.Pause(e.ctx, "man", &virtv1.PauseOptions{}); err != nil {
		t.Fatalf("pause over HTTP: %v", err)
	}
	e.waitPrintable("man", virtv1.VirtualMachineStatusPaused)
	requireStatus(t, vmis.Pause(e.ctx, "man", &virtv1.PauseOptions{}), 409, "VMI is already paused")
	if err := vmis.Unpause(e.ctx, "man", &virtv1.UnpauseOptions{}); err != nil {
		t.Fatalf("unpause over HTTP: %v", err)
	}
	e.waitPrintable("man", virtv1.VirtualMachineStatusRunning)
	if err := vmis.SoftReboot(e.ctx, "man"); err != nil {
		t.Fatalf("softreboot over HTTP: %v", err)
	}
	if err := vmis.Reset(e.ctx, "man"); err != nil {
		t.Fatalf("reset over HTTP: %v", err)
	}
	if a := e.getVMI("man").Annotations; a[AnnotationReboots] != "1" || a[AnnotationResets] != "1" {
		t.Errorf("annotations after softreboot/reset: %v", a)
	}

	requireStatus(t, vms.Restart(e.ctx, "man", &virtv1.RestartOptions{GracePeriodSeconds: ptr(int64(3))}), 400, "only gracePeriod=0")
	if err := vms.Restart(e.ctx, "man", &virtv1.RestartOptions{}); err != nil {
		t.Fatalf("restart over HTTP: %v", err)
	}
	e.waitVMI("man", "restarted", func(v *virtv1.VirtualMachineInstance) bool { return v.UID != first.UID && v.IsRunning() })
	e.waitVM("man", "running without requests", func(vm *virtv1.VirtualMachine) bool {
		return vm.Status.PrintableStatus == virtv1.VirtualMachineStatusRunning && len(vm.Status.StateChangeRequests) == 0
	})

	if err := vms.Stop(e.ctx, "man", &virtv1.StopOptions{GracePeriod: ptr(int64(0))}); err != nil {
		t.Fatalf("stop over HTTP: %v", err)
	}
	e.waitNoVMI("man")
	e.waitStopped("man")
	requireStatus(t, vms.Stop(e.ctx, "man", &virtv1.StopOptions{}), 409, "VM is not running")
	requireStatus(t, vmis.Pause(e.ctx, "man", &virtv1.PauseOptions{}), 404, "not found")
	requireStatus(t, vms.Migrate(e.ctx, "man", &virtv1.MigrateOptions{}), 404, "not found")
	requireStatus(t, vms.AddVolume(e.ctx, "man", &virtv1.AddVolumeOptions{Name: "x"}), 404, "does not simulate")
}

func TestHandlerAuthorizerDenial(t *testing.T) {
	e := newEnv(t, testVM("man", virtv1.RunStrategyManual))
	type call struct{ verb, resource, subresource, ns, name, token string }
	var mu sync.Mutex
	var calls []call
	deny := func(r *http.Request, verb, resource, subresource, ns, name string) error {
		mu.Lock()
		calls = append(calls, call{verb, resource, subresource, ns, name, r.Header.Get("Authorization")})
		mu.Unlock()
		if resource == "virtualmachines" && subresource == "start" {
			return Forbidden("alice", verb, resource, subresource, ns, name, "")
		}
		return nil
	}
	srv := httptest.NewServer(NewSubresourceHandler(e.kv, deny))
	defer srv.Close()
	client, err := kubevirt.NewForConfig(&rest.Config{Host: srv.URL, BearerToken: "alice-token"})
	if err != nil {
		t.Fatal(err)
	}
	err = client.KubevirtV1().VirtualMachines(testNS).Start(e.ctx, "man", &virtv1.StartOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("expected 403, got %v", err)
	}
	want := `virtualmachines.subresources.kubevirt.io "man" is forbidden: User "alice" cannot update resource "virtualmachines/start" in API group "subresources.kubevirt.io" in the namespace "default"`
	if err.Error() != want {
		t.Errorf("message:\n got %s\nwant %s", err.Error(), want)
	}
	st := err.(apierrors.APIStatus).Status()
	if st.Details == nil || st.Details.Group != SubresourceGroup || st.Details.Kind != "virtualmachines" || st.Details.Name != "man" {
		t.Errorf("details = %+v", st.Details)
	}
	if vm := e.getVM("man"); len(vm.Status.StateChangeRequests) != 0 {
		t.Fatalf("a denied start must not act: %s", describeVM(vm))
	}
	// Allowed calls still work and were authorized with the right attributes.
	requireStatus(t, client.KubevirtV1().VirtualMachineInstances(testNS).Pause(e.ctx, "man", &virtv1.PauseOptions{}), 404, "not found")
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 2 || calls[0] != (call{"update", "virtualmachines", "start", testNS, "man", "Bearer alice-token"}) ||
		calls[1] != (call{"update", "virtualmachineinstances", "pause", testNS, "man", "Bearer alice-token"}) {
		t.Errorf("authorizer calls = %+v", calls)
	}
}

func TestHandlerRequestErrors(t *testing.T) {
	e := newEnv(t, testVM("man", virtv1.RunStrategyManual))
	srv := httptest.NewServer(NewSubresourceHandler(e.kv, nil))
	defer srv.Close()
	do := func(method, path, body string) (int, metav1.Status) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st metav1.Status
		b, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(b, &st)
		return resp.StatusCode, st
	}
	base := "/apis/subresources.kubevirt.io/v1/namespaces/default/"
	if code, st := do(http.MethodGet, base+"virtualmachines/man/start", ""); code != 405 || st.Reason != metav1.StatusReasonMethodNotAllowed {
		t.Errorf("GET start: %d %+v", code, st)
	}
	if code, st := do(http.MethodPut, base+"virtualmachines/man/start", "{not json"); code != 400 || !strings.Contains(st.Message, "Can not unmarshal Request body to struct") {
		t.Errorf("bad body: %d %+v", code, st)
	}
	if code, st := do(http.MethodPut, base+"virtualmachines/man/frobnicate", ""); code != 404 || st.Kind != "Status" {
		t.Errorf("unknown subresource: %d %+v", code, st)
	}
	if code, _ := do(http.MethodPut, base+"virtualmachines/man/start", ""); code != 202 {
		t.Errorf("start with empty body: %d", code)
	}
	if code, _ := do(http.MethodPut, "/apis/subresources.kubevirt.io/v1alpha3/namespaces/default/virtualmachines/man/start", `{}`); code != 500 {
		// The first start request is still pending (no controller runs).
		t.Errorf("second start (v1alpha3 path): %d", code)
	}
}

// fakeAuthAPI answers SelfSubjectAccessReview and SelfSubjectReview like a
// kube-apiserver with two tokens: "admin" may do anything, "bob" nothing.
type fakeAuthAPI struct {
	mu      sync.Mutex
	reviews []authorizationv1.SelfSubjectAccessReview
	headers []http.Header
}

func (f *fakeAuthAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	user := map[string]string{"Bearer admin": "admin", "Bearer bob": "bob"}[r.Header.Get("Authorization")]
	if r.Header.Get("Authorization") == "" {
		user = "system:anonymous"
	}
	if imp := r.Header.Get("Impersonate-User"); imp != "" && user == "admin" {
		user = imp
	}
	f.mu.Lock()
	f.headers = append(f.headers, r.Header.Clone())
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if user == "" {
		w.WriteHeader(401)
		_ = json.NewEncoder(w).Encode(apierrors.NewUnauthorized("Unauthorized").Status())
		return
	}
	switch r.URL.Path {
	case "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews":
		// client-go may send protobuf or JSON; decode either.
		body, _ := io.ReadAll(r.Body)
		obj, _, err := k8sscheme.Codecs.UniversalDeserializer().Decode(body, nil, &authorizationv1.SelfSubjectAccessReview{})
		if err != nil {
			w.WriteHeader(400)
			return
		}
		review := *obj.(*authorizationv1.SelfSubjectAccessReview)
		f.mu.Lock()
		f.reviews = append(f.reviews, review)
		f.mu.Unlock()
		review.Status.Allowed = user == "admin"
		_ = json.NewEncoder(w).Encode(review)
	case "/apis/authentication.k8s.io/v1/selfsubjectreviews":
		_ = json.NewEncoder(w).Encode(authenticationv1.SelfSubjectReview{Status: authenticationv1.SelfSubjectReviewStatus{
			UserInfo: authenticationv1.UserInfo{Username: user}}})
	default:
		w.WriteHeader(404)
	}
}

func TestSelfSubjectAccessAuthorizer(t *testing.T) {
	api := &fakeAuthAPI{}
	apiSrv := httptest.NewServer(api)
	defer apiSrv.Close()
	// The base config's own credentials must not be used for the review.
	authorize := SelfSubjectAccessAuthorizer(&rest.Config{Host: apiSrv.URL, BearerToken: "admin"})

	req := func(headers map[string][]string) *http.Request {
		r := httptest.NewRequest(http.MethodPut, "/apis/subresources.kubevirt.io/v1/namespaces/lab/virtualmachines/vm1/stop", nil)
		for k, vs := range headers {
			for _, v := range vs {
				r.Header.Add(k, v)
			}
		}
		return r
	}

	if err := authorize(req(map[string][]string{"Authorization": {"Bearer admin"}}), "update", "virtualmachines", "stop", "lab", "vm1"); err != nil {
		t.Fatalf("admin denied: %v", err)
	}
	api.mu.Lock()
	ra := api.reviews[0].Spec.ResourceAttributes
	api.mu.Unlock()
	if ra == nil || *ra != (authorizationv1.ResourceAttributes{Namespace: "lab", Verb: "update", Group: "subresources.kubevirt.io",
		Version: "v1", Resource: "virtualmachines", Subresource: "stop", Name: "vm1"}) {
		t.Errorf("review attributes = %+v", ra)
	}

	err := authorize(req(map[string][]string{"Authorization": {"Bearer bob"}}), "update", "virtualmachines", "stop", "lab", "vm1")
	want := `virtualmachines.subresources.kubevirt.io "vm1" is forbidden: User "bob" cannot update resource "virtualmachines/stop" in API group "subresources.kubevirt.io" in the namespace "lab"`
	if !apierrors.IsForbidden(err) || err.Error() != want {
		t.Fatalf("bob: %v", err)
	}

	// Impersonation headers are forwarded (admin impersonating a PVE user).
	err = authorize(req(map[string][]string{
		"Authorization":           {"Bearer admin"},
		"Impersonate-User":        {"pve:alice@pve"},
		"Impersonate-Group":       {"pve:users", "system:authenticated"},
		"Impersonate-Extra-Realm": {"pve"},
	}), "update", "virtualmachineinstances", "pause", "lab", "vm1")
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `User "pve:alice@pve" cannot update resource "virtualmachineinstances/pause"`) {
		t.Fatalf("impersonated: %v", err)
	}
	api.mu.Lock()
	last := api.headers[len(api.headers)-1]
	api.mu.Unlock()
	if last.Get("Impersonate-User") != "pve:alice@pve" || strings.Join(last.Values("Impersonate-Group"), ",") != "pve:users,system:authenticated" ||
		last.Get("Impersonate-Extra-Realm") != "pve" || last.Get("Authorization") != "Bearer admin" {
		t.Errorf("forwarded headers = %v", last)
	}

	if err := authorize(req(map[string][]string{"Authorization": {"Bearer wrong"}}), "update", "virtualmachines", "stop", "lab", "vm1"); !apierrors.IsUnauthorized(err) {
		t.Errorf("bad token: %v", err)
	}
	if err := authorize(req(nil), "update", "virtualmachines", "stop", "lab", "vm1"); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `User "system:anonymous"`) {
		t.Errorf("anonymous: %v", err)
	}
}
