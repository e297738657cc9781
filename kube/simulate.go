package kube

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/internal/fleet"
	"github.com/caddy-proxmox/caddy-proxmox/kubevirtsim"
)

// Simulate starts a Cluster over an in-memory cluster: fake client sets
// seeded with a small lab (plus extraVMs VMs as fleet makes them), driven by the KubeVirt
// stand-in controller and virt-api console server of kubevirtsim. It is
// the same code as a real cluster's above the clients; Stop ends the
// simulator too. This is why `simulate` ships kubevirtsim and client-go's
// fakes in the binary.
func Simulate(ctx context.Context, extraVMs int, opts Options) (*Cluster, error) {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	objs := append(kubevirtsim.Seed(), kubevirtsim.SeedCDIConfig(), kubevirtsim.SeedKubeVirt())
	if extraVMs > 0 {
		var nodes []string
		for _, o := range objs {
			if n, ok := o.(*corev1.Node); ok {
				nodes = append(nodes, n.Name)
			}
		}
		bulk, err := fleet.Objects(fleet.Spec{Namespace: "default", N: extraVMs, FirstVMID: 1000, Nodes: nodes})
		if err != nil {
			return nil, err
		}
		objs = append(objs, bulk...)
	}
	kc, kv, cdi := kubevirtsim.NewFakeClientsWithCDI(objs...)
	simCtx, cancel := context.WithCancel(context.Background())
	ctrl := kubevirtsim.NewController(kv, kc, kubevirtsim.Options{
		StartDelay:      1500 * time.Millisecond,
		StopDelay:       time.Second,
		CDI:             cdi,
		DataVolumeDelay: 2 * time.Second,
		SnapshotDelay:   time.Second,
		MigrationDelay:  time.Second,
		// The simulated cluster serves no NetworkAttachmentDefinitions: a
		// bridge other than vmbr0 does not exist, as on a cluster without
		// that Multus network.
		NetworkAttachmentDefinition: func(string, string) bool { return false },
		// A guest with agent=1 answers virt-handler's first poll once it
		// has booted.
		AgentDelay: 2 * time.Second,
		// ceph-rbd can snapshot, local-lvm cannot.
		Dynamic: kubevirtsim.NewFakeDynamic(kubevirtsim.SeedSnapshotClasses()...),
		Logger:  opts.Logger.Named("simulator"),
	})
	go func() { _ = ctrl.Run(simCtx) }()
	go forgetActions(simCtx, kc, kv, cdi)
	opts.AssumeKubeVirtAPIs = true
	opts.CDI = cdi
	// The simulated cdi-uploadproxy answers in process.
	opts.UploadProxy = &UploadProxyConfig{URL: "https://cdi-uploadproxy.cdi.svc", Client: &http.Client{Transport: cdi.(*kubevirtsim.FakeCDIClientset).UploadProxy().Transport()}}
	opts.Metrics = simulatedMetrics(ctrl.Metrics())
	if opts.MetricsInterval == 0 {
		opts.MetricsInterval = 5 * time.Second
	}
	c := New(kc, kv, nil, opts)
	c.SetVirtAPI(true)
	consoles := kubevirtsim.NewConsoleServer(kv)
	c.setConsoleDialer(consoles.Dial)
	stopSim := func() {
		cancel()
		c.setConsoleDialer(nil)
		_ = consoles.Close()
	}
	if err := c.Start(ctx); err != nil {
		stopSim()
		return nil, fmt.Errorf("starting the simulated cluster: %w", err)
	}
	c.onStop = stopSim
	c.logger.Warn("SIMULATED CLUSTER: serving an in-memory KubeVirt stand-in; no real VM exists and nothing is persisted")
	return c, nil
}

// simulatedMetrics adapts the simulator's usage readings to the poller.
func simulatedMetrics(m *kubevirtsim.Metrics) MetricsSource {
	return MetricsSourceFunc(func(ctx context.Context, namespaces []string) (MetricsSample, error) {
		nodes, guests, err := m.Sample(ctx, namespaces)
		if err != nil {
			return MetricsSample{}, err
		}
		out := MetricsSample{Nodes: map[string]Usage{}, Guests: map[GuestKey]Usage{}}
		for n, u := range nodes {
			out.Nodes[n] = Usage{CPUCores: u.CPUCores, MemBytes: u.MemBytes}
		}
		for k, u := range guests {
			ns, name, _ := strings.Cut(k, "/")
			out.Guests[GuestKey{Namespace: ns, Name: name}] = Usage{CPUCores: u.CPUCores, MemBytes: u.MemBytes}
		}
		return out, nil
	})
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
