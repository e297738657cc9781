package kube

import (
	"os"
	"path/filepath"
	"testing"
)

// The plugin's clients are not held to kubectl's 5 requests/s, unless the
// kubeconfig says otherwise.
func TestRestConfigRateLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kubeconfig := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := restConfig(path, "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.QPS != clientQPS || cfg.Burst != clientBurst {
		t.Fatalf("QPS %v, burst %d; want %v, %d", cfg.QPS, cfg.Burst, float32(clientQPS), clientBurst)
	}
}
