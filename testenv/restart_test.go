package testenv

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// TestRestartAPIServer stops kube-apiserver and etcd mid-run and starts
// them again: data, URLs, tokens and the proxy's kubeconfig survive, and
// clients fail fast in between.
func TestRestartAPIServer(t *testing.T) {
	e := StartT(t, Options{Users: []User{{Name: "carol"}}})
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before", Namespace: "default"}, Data: map[string]string{"k": "v"}}
	if _, err := e.Kube.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, apiPid := e.PIDs()
	url := e.APIServerURL

	e.StopAPIServer()
	if e.APIServerRunning() {
		t.Fatal("kube-apiserver still running after StopAPIServer")
	}
	for name, kube := range map[string]kubernetes.Interface{"proxy": e.Kube, "direct": e.DirectKube} {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		t0 := time.Now()
		_, err := kube.CoreV1().ConfigMaps("default").Get(c, "before", metav1.GetOptions{})
		cancel()
		if err == nil {
			t.Fatalf("%s: read succeeded with kube-apiserver stopped", name)
		}
		t.Logf("%s: failed in %v: %v", name, time.Since(t0).Round(time.Millisecond), err)
	}
	if err := e.StartAPIServer(ctx); err == nil {
		// A second start of a running one must be refused.
		if err := e.StartAPIServer(ctx); err == nil {
			t.Fatal("StartAPIServer on a running kube-apiserver succeeded")
		}
	} else {
		t.Fatal(err)
	}
	if _, pid := e.PIDs(); pid == apiPid || e.APIServerURL != url {
		t.Fatalf("restart: pid %d (was %d), url %s (was %s)", pid, apiPid, e.APIServerURL, url)
	}
	// Same data, same tokens, through the old clients and a kubeconfig.
	for name, kube := range map[string]kubernetes.Interface{"proxy": e.Kube, "direct": e.DirectKube} {
		got, err := kube.CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{})
		if err != nil || got.Data["k"] != "v" {
			t.Fatalf("%s after restart: %v %v", name, got, err)
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", e.KubeconfigFor("carol"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = kubernetes.NewForConfigOrDie(cfg).CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("carol (no rights) after restart: want forbidden (authenticated), got %v", err)
	}

	// etcd: kube-apiserver stays up but cannot serve data; then it can.
	e.StopEtcd()
	c, cancel := context.WithTimeout(ctx, 3*time.Second)
	_, err = e.DirectKube.CoreV1().ConfigMaps("default").Get(c, "before", metav1.GetOptions{ResourceVersion: ""})
	cancel()
	if err == nil {
		t.Log("read served from the watch cache with etcd stopped (allowed)")
	}
	if err := e.StartEtcd(ctx); err != nil {
		t.Fatal(err)
	}
	cm.Name = "after"
	if _, err := e.Kube.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("write after etcd restart: %v", err)
	}
	list, err := e.Kube.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, c := range list.Items {
		names[c.Name] = true
	}
	if !names["before"] || !names["after"] {
		t.Fatalf("configmaps after the restarts: %v", names)
	}
}
