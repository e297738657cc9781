package kubevirtsim

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubevirt"
)

// Usage is a simulated usage reading.
type Usage struct {
	CPUCores float64
	MemBytes int64
}

// Metrics stands in for metrics-server: deterministic usage derived from
// the running VMIs' names and sizes, so that dashboards show numbers.
type Metrics struct {
	kube     kubernetes.Interface
	kubevirt kubevirt.Interface
	// vmis and nodes, when set, are a Controller's caches, read in place
	// instead of listing through the clients.
	vmis, nodes cache.Store
}

// NewMetrics reads the simulated cluster through its clients.
func NewMetrics(kc kubernetes.Interface, kv kubevirt.Interface) *Metrics {
	return &Metrics{kube: kc, kubevirt: kv}
}

// Metrics reads the simulated cluster off the controller's own caches.
// A fake client's List copies every object: with the simulator in the
// plugin's process, a reading of 5,000 running VMIs every few seconds
// allocated tens of megabytes, a cost metrics-server puts on its own
// process, not on the plugin's.
func (c *Controller) Metrics() *Metrics {
	return &Metrics{vmis: c.vmiInformer.GetStore(), nodes: c.nodeInformer.GetStore()}
}

// Node base load: what the kubelet and system pods use.
const (
	nodeBaseCores = 0.25
	nodeBaseMem   = 1 << 30
)

// Sample returns usage by Kubernetes node name and by "namespace/vmi".
// Each running VMI uses a fixed share (5..34 % of its vCPUs, 30..69 % of
// its memory) picked by a hash of its name; a node uses its base load plus
// its VMIs'.
func (m *Metrics) Sample(ctx context.Context, namespaces []string) (nodes, guests map[string]Usage, err error) {
	names, err := m.nodeNames(ctx)
	if err != nil {
		return nil, nil, err
	}
	nodes = map[string]Usage{}
	for _, n := range names {
		nodes[n] = Usage{CPUCores: nodeBaseCores, MemBytes: nodeBaseMem}
	}
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	guests = map[string]Usage{}
	for _, ns := range namespaces {
		vmis, err := m.instances(ctx, ns)
		if err != nil {
			return nil, nil, err
		}
		for _, vmi := range vmis {
			if vmi.Status.Phase != virtv1.Running {
				continue
			}
			u := guestUsage(vmi)
			guests[vmi.Namespace+"/"+vmi.Name] = u
			if n, ok := nodes[vmi.Status.NodeName]; ok {
				n.CPUCores += u.CPUCores
				n.MemBytes += u.MemBytes
				nodes[vmi.Status.NodeName] = n
			}
		}
	}
	return nodes, guests, nil
}

// nodeNames are the names of the cluster's nodes.
func (m *Metrics) nodeNames(ctx context.Context) ([]string, error) {
	if m.nodes != nil {
		return m.nodes.ListKeys(), nil
	}
	l, err := m.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	names := make([]string, len(l.Items))
	for i := range l.Items {
		names[i] = l.Items[i].Name
	}
	return names, nil
}

// instances are the VMIs of ns (all namespaces for ""), to read only.
func (m *Metrics) instances(ctx context.Context, ns string) ([]*virtv1.VirtualMachineInstance, error) {
	var out []*virtv1.VirtualMachineInstance
	if m.vmis != nil {
		for _, o := range m.vmis.List() {
			if vmi, ok := o.(*virtv1.VirtualMachineInstance); ok && (ns == "" || vmi.Namespace == ns) {
				out = append(out, vmi)
			}
		}
		return out, nil
	}
	l, err := m.kubevirt.KubevirtV1().VirtualMachineInstances(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range l.Items {
		out = append(out, &l.Items[i])
	}
	return out, nil
}

func guestUsage(vmi *virtv1.VirtualMachineInstance) Usage {
	sum := hashOf(vmi.Namespace + "/" + vmi.Name)
	cpus := 1
	if c := vmi.Spec.Domain.CPU; c != nil {
		cpus = int(max(c.Sockets, 1) * max(c.Cores, 1) * max(c.Threads, 1))
	}
	var mem int64
	if mm := vmi.Spec.Domain.Memory; mm != nil && mm.Guest != nil {
		mem = mm.Guest.Value()
	} else if q, ok := vmi.Spec.Domain.Resources.Requests[corev1.ResourceMemory]; ok {
		mem = q.Value()
	}
	return Usage{
		CPUCores: float64(cpus) * float64(5+sum%30) / 100,
		MemBytes: mem * int64(30+(sum/30)%40) / 100,
	}
}
