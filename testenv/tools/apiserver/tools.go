//go:build tools

// Package tools pins the Kubernetes components the integration tests run:
// kube-apiserver always; kube-scheduler and kube-controller-manager (its
// garbage collector, PersistentVolume binder and namespace controller)
// for the cluster with KubeVirt's own controllers. It lives in its own
// module so that k8s.io/kubernetes never enters the plugin's dependency
// graph.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
