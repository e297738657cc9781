package api

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/prom"
)

// connections shares one cluster connection (and its informers) between
// handler instances with the same settings, across config reloads, so a
// `caddy reload` neither relists the cluster nor loses running task workers.
var connections = caddy.NewUsagePool()

// backendKey identifies a cluster connection.
type backendKey struct {
	simulate      bool
	simulateVMs   int
	kubeconfig    string
	context       string
	namespaces    string
	taskNamespace string
	prometheus    string
	uploadProxy   string
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
		uploadProxy:   h.UploadProxy.key(),
	}
}

// connect returns the shared backend for this handler's settings.
func (h *APIHandler) connect(ctx caddy.Context, logger *zap.Logger) (*backend, error) {
	val, _, err := connections.LoadOrNew(h.key(), func() (caddy.Destructor, error) {
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

// newBackend connects to the configured cluster, or starts the simulated
// one; kube builds the clients either way.
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
	up, err := h.UploadProxy.kube()
	if err != nil {
		return nil, fmt.Errorf("proxmox_api: %w", err)
	}
	opts.UploadProxy = up
	var c *kube.Cluster
	if h.Simulate {
		c, err = kube.Simulate(context.Background(), h.SimulateVMs, opts)
	} else {
		c, err = kube.Connect(context.Background(), kube.Kubeconfig{Path: h.Kubeconfig, Context: h.Context}, opts)
	}
	if err != nil {
		return nil, err
	}
	return &backend{cluster: c, stop: c.Stop}, nil
}
