package kube

import (
	"context"
	"fmt"

	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	cdiclient "kubevirt.io/client-go/containerizeddataimporter"
	"kubevirt.io/client-go/kubevirt"
)

// Kubeconfig says where the connection to a real cluster comes from.
type Kubeconfig struct {
	// Path is the kubeconfig file; empty means the standard loading rules
	// ($KUBECONFIG, ~/.kube/config), then the in-cluster config.
	Path string
	// Context selects a kubeconfig context; empty means the current one.
	Context string
}

// Connect builds the plugin's own clients (Kubernetes, KubeVirt, CDI) for
// a real cluster and starts a Cluster on them: it returns once the caches
// are in sync. Without a task namespace or served namespaces, task records
// go to the pod's own namespace (in a cluster), else "default".
func Connect(ctx context.Context, kc Kubeconfig, opts Options) (*Cluster, error) {
	cfg, err := restConfig(kc.Path, kc.Context)
	if err != nil {
		return nil, err
	}
	kcs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	kv, err := kubevirt.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubevirt client: %w", err)
	}
	if opts.CDI == nil {
		if opts.CDI, err = cdiclient.NewForConfig(cfg); err != nil {
			return nil, fmt.Errorf("CDI client: %w", err)
		}
	}
	if opts.TaskNamespace == "" && len(opts.Namespaces) == 0 {
		opts.TaskNamespace = inClusterNamespace()
	}
	c := New(kcs, kv, cfg, opts)
	if err := c.Start(ctx); err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", cfg.Host, err)
	}
	c.logger.Info("connected to kubernetes", zap.String("host", cfg.Host), zap.Strings("namespaces", opts.Namespaces), zap.String("task_namespace", c.TaskNamespace()))
	return c, nil
}

// The plugin's request rate limit towards kube-apiserver, per client (its
// own, and each caller's impersonating one).
const clientQPS, clientBurst = 50, 100

// restConfig loads a kubeconfig with the standard rules (explicit path,
// $KUBECONFIG, ~/.kube/config), falling back to the in-cluster config.
func restConfig(path, context string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: context}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	cfg.UserAgent = "caddy-proxmox"
	// client-go's default (5 requests/s, bursts of 10) is for kubectl: a
	// create here takes five or six calls (vmid claim, VM, task record,
	// cloud-init Secret), so a few clients at once waited seconds on the
	// limiter, and an id nextid offered stayed uncreated that long. As
	// controllers do, allow more; a kubeconfig that sets its own stays.
	if cfg.QPS == 0 {
		cfg.QPS = clientQPS
	}
	if cfg.Burst == 0 {
		cfg.Burst = clientBurst
	}
	return cfg, nil
}

// inClusterNamespace is the pod's namespace when running in a cluster.
func inClusterNamespace() string {
	cfg := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{})
	if ns, _, err := cfg.Namespace(); err == nil && ns != "" {
		return ns
	}
	return "default"
}
