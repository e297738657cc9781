package api

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	cdiclient "kubevirt.io/client-go/containerizeddataimporter"
	"kubevirt.io/client-go/kubevirt"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/kubevirtsim"
	"github.com/caddy-proxmox/caddy-proxmox/prom"
)

// clusters shares one cluster connection (and its informers) between
// handler instances with the same settings, across config reloads, so a
// `caddy reload` neither relists the cluster nor loses running task workers.
var clusters = caddy.NewUsagePool()

// backendKey identifies a cluster connection.
type backendKey struct {
	simulate      bool
	simulateVMs   int
	kubeconfig    string
	context       string
	namespaces    string
	taskNamespace string
	prometheus    string
}

// backend is a started cluster; it is the UsagePool value.
type backend struct {
	cluster *kube.Cluster
	history *prom.History // nil without Prometheus
	stop    func()
}

// Destruct stops the informers when the last handler using them goes.
func (b *backend) Destruct() error {
	b.stop()
	return nil
}

func (h *APIHandler) key() backendKey {
	return backendKey{
		simulate:      h.Simulate,
		simulateVMs:   h.SimulateVMs,
		kubeconfig:    h.Kubeconfig,
		context:       h.Context,
		namespaces:    strings.Join(h.Namespaces, ","),
		taskNamespace: h.TaskNamespace,
		prometheus:    h.Prometheus.key(),
	}
}

// connect returns the shared backend for this handler's settings.
func (h *APIHandler) connect(ctx caddy.Context, logger *zap.Logger) (*backend, error) {
	val, _, err := clusters.LoadOrNew(h.key(), func() (caddy.Destructor, error) {
		b, err := h.newBackend(logger)
		if err != nil {
			return nil, err
		}
		h.startPrometheus(b, logger)
		return b, nil
	})
	if err != nil {
		return nil, err
	}
	return val.(*backend), nil
}

// startPrometheus runs the history cache next to the cluster; the current
// values were wired into kube.Options by newBackend.
func (h *APIHandler) startPrometheus(b *backend, logger *zap.Logger) {
	if h.Prometheus == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.history = prom.NewHistory(h.Prometheus.client(), h.Prometheus.interval(), logger.Named("prometheus"))
	go b.history.Run(ctx)
	stop := b.stop
	b.stop = func() { cancel(); stop() }
	logger.Info("reading metrics and history from prometheus", zap.String("url", redactURL(h.Prometheus.URL)))
}

func (h *APIHandler) newBackend(logger *zap.Logger) (*backend, error) {
	opts := kube.Options{
		Namespaces:    h.Namespaces,
		TaskNamespace: h.TaskNamespace,
		SyncTimeout:   time.Duration(h.SyncTimeout),
		Logger:        logger.Named("kube"),
	}
	if h.Prometheus != nil {
		opts.KubeVirtMetrics = prom.NewSource(h.Prometheus.client())
		opts.KubeVirtMetricsInterval = h.Prometheus.interval()
	}
	if h.Simulate {
		return newSimulatedBackend(opts, h.SimulateVMs, logger)
	}
	cfg, err := restConfig(h.Kubeconfig, h.Context)
	if err != nil {
		return nil, err
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	kv, err := kubevirt.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubevirt client: %w", err)
	}
	if opts.CDI, err = cdiclient.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("CDI client: %w", err)
	}
	if opts.TaskNamespace == "" && len(h.Namespaces) == 0 {
		opts.TaskNamespace = inClusterNamespace()
	}
	c := kube.New(kc, kv, cfg, opts)
	if err := c.Start(context.Background()); err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", cfg.Host, err)
	}
	logger.Info("connected to kubernetes", zap.String("host", cfg.Host), zap.Strings("namespaces", h.Namespaces), zap.String("task_namespace", c.TaskNamespace()))
	return &backend{cluster: c, stop: c.Stop}, nil
}

// newSimulatedBackend runs the same code over an in-memory cluster with the
// KubeVirt stand-in controller, seeded with a small lab.
func newSimulatedBackend(opts kube.Options, extraVMs int, logger *zap.Logger) (*backend, error) {
	objs := kubevirtsim.Seed()
	if extraVMs > 0 {
		var nodes []string
		for _, o := range objs {
			if n, ok := o.(*corev1.Node); ok {
				nodes = append(nodes, n.Name)
			}
		}
		objs = append(objs, kubevirtsim.BulkVMs("default", extraVMs, 1000, nodes)...)
	}
	kc, kv, cdi := kubevirtsim.NewFakeClientsWithCDI(objs...)
	ctx, cancel := context.WithCancel(context.Background())
	ctrl := kubevirtsim.NewController(kv, kc, kubevirtsim.Options{
		StartDelay:      1500 * time.Millisecond,
		StopDelay:       time.Second,
		CDI:             cdi,
		DataVolumeDelay: 2 * time.Second,
		SnapshotDelay:   time.Second,
		MigrationDelay:  time.Second,
		Logger:          logger.Named("simulator"),
	})
	go func() { _ = ctrl.Run(ctx) }()
	go forgetActions(ctx, kc, kv, cdi)
	opts.AssumeKubeVirtAPIs = true
	opts.CDI = cdi
	opts.Metrics = simulatedMetrics(kubevirtsim.NewMetrics(kc, kv))
	if opts.MetricsInterval == 0 {
		opts.MetricsInterval = 5 * time.Second
	}
	c := kube.New(kc, kv, nil, opts)
	c.SetVirtAPI(true)
	consoles := kubevirtsim.NewConsoleServer(kv)
	c.SetConsoleDialer(consoles.Dial)
	if err := c.Start(ctx); err != nil {
		cancel()
		c.SetConsoleDialer(nil)
		_ = consoles.Close()
		return nil, fmt.Errorf("starting the simulated cluster: %w", err)
	}
	logger.Warn("SIMULATED CLUSTER: serving an in-memory KubeVirt stand-in; no real VM exists and nothing is persisted")
	return &backend{cluster: c, stop: func() { c.Stop(); cancel(); c.SetConsoleDialer(nil); _ = consoles.Close() }}, nil
}

// simulatedMetrics adapts the simulator's usage readings to the poller.
func simulatedMetrics(m *kubevirtsim.Metrics) kube.MetricsSource {
	return kube.MetricsSourceFunc(func(ctx context.Context, namespaces []string) (kube.MetricsSample, error) {
		nodes, guests, err := m.Sample(ctx, namespaces)
		if err != nil {
			return kube.MetricsSample{}, err
		}
		out := kube.MetricsSample{Nodes: map[string]kube.Usage{}, Guests: map[kube.GuestKey]kube.Usage{}}
		for n, u := range nodes {
			out.Nodes[n] = kube.Usage{CPUCores: u.CPUCores, MemBytes: u.MemBytes}
		}
		for k, u := range guests {
			ns, name, _ := strings.Cut(k, "/")
			out.Guests[kube.GuestKey{Namespace: ns, Name: name}] = kube.Usage{CPUCores: u.CPUCores, MemBytes: u.MemBytes}
		}
		return out, nil
	})
}

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

// forgetActions empties the fakes' call records now and then: they keep
// every call forever, which a long-running simulation cannot afford.
func forgetActions(ctx context.Context, clients ...any) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			for _, c := range clients {
				if f, ok := c.(interface{ ClearActions() }); ok {
					f.ClearActions()
				}
			}
		}
	}
}
