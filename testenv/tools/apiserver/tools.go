//go:build tools

// Package tools pins the kube-apiserver used by the integration tests.
// It lives in its own module so that k8s.io/kubernetes never enters the
// plugin's dependency graph.
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
