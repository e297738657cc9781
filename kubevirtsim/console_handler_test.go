package kubevirtsim

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	virtv1 "kubevirt.io/api/core/v1"
	kvcorev1 "kubevirt.io/client-go/kubevirt/typed/core/v1"
)

// The subresource handler serves the vnc and console websockets to
// KubeVirt's own client (AsyncSubresourceHelper, as virtctl dials them),
// after authorizing "get" on the subresource.
func TestHandlerConsoleWebsockets(t *testing.T) {
	e := newEnv(t, testVM("web", virtv1.RunStrategyAlways)).run(Options{})
	e.waitRunning("web")
	type call struct{ verb, resource, sub, ns, name, auth string }
	var mu sync.Mutex
	var calls []call
	authorize := func(r *http.Request, verb, resource, sub, ns, name string) error {
		mu.Lock()
		calls = append(calls, call{verb, resource, sub, ns, name, r.Header.Get("Authorization")})
		mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer alice-token" {
			return Forbidden("bob", verb, resource, sub, ns, name, "")
		}
		return nil
	}
	srv := httptest.NewServer(NewSubresourceHandler(e.kv, authorize))
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL, BearerToken: "alice-token"}

	// Serial console: an echo TTY.
	st, err := kvcorev1.AsyncSubresourceHelper(cfg, "virtualmachineinstances", testNS, "web", "console", nil)
	if err != nil {
		t.Fatalf("console: %v", err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- st.Stream(kvcorev1.StreamOptions{In: inR, Out: outW}) }()
	if _, err := inW.Write([]byte("hi\r")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(outR, got); err != nil || string(got) != "hi\r\n" {
		t.Fatalf("echo %q, %v", got, err)
	}
	_ = inW.Close()
	select {
	case <-done:
	case <-time.After(waitTimeout):
		t.Fatal("console stream did not end after its input closed")
	}

	// VNC: the RFB greeting arrives.
	st, err = kvcorev1.AsyncSubresourceHelper(cfg, "virtualmachineinstances", testNS, "web", "vnc", url.Values{"preserveSession": {"false"}})
	if err != nil {
		t.Fatalf("vnc: %v", err)
	}
	inR, inW = io.Pipe()
	outR, outW = io.Pipe()
	go func() { done <- st.Stream(kvcorev1.StreamOptions{In: inR, Out: outW}) }()
	greeting := make([]byte, 12)
	if _, err := io.ReadFull(outR, greeting); err != nil || !bytes.Equal(greeting, []byte("RFB 003.008\n")) {
		t.Fatalf("greeting %q, %v", greeting, err)
	}
	_ = inW.Close()
	<-done

	// Another caller is refused before any upgrade.
	_, err = kvcorev1.AsyncSubresourceHelper(&rest.Config{Host: srv.URL, BearerToken: "bob-token"}, "virtualmachineinstances", testNS, "web", "vnc", nil)
	if ae, ok := err.(*kvcorev1.AsyncSubresourceError); !ok || ae.GetStatusCode() != http.StatusForbidden {
		t.Fatalf("bob's vnc: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []call{
		{"get", "virtualmachineinstances", "console", testNS, "web", "Bearer alice-token"},
		{"get", "virtualmachineinstances", "vnc", testNS, "web", "Bearer alice-token"},
		{"get", "virtualmachineinstances", "vnc", testNS, "web", "Bearer bob-token"},
	}
	if len(calls) != len(want) {
		t.Fatalf("authorizer calls %+v", calls)
	}
	for i := range want {
		if calls[i] != want[i] {
			t.Fatalf("authorizer call %d = %+v, want %+v", i, calls[i], want[i])
		}
	}
}
