package kube

import (
	"hash/fnv"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// Node is a Kubernetes node under its Proxmox name.
type Node struct {
	// Name follows PVE's node grammar (no dots), unique in the cluster.
	Name     string
	KubeName string
	Ready    bool
	Obj      *corev1.Node
}

type nodeTable struct {
	gen    uint64 // the Cluster's nodeGen it was built at
	list   []Node
	byName map[string]int
	byKube map[string]string
}

func buildNodeTable(nodes []*corev1.Node) *nodeTable {
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	t := &nodeTable{byName: map[string]int{}, byKube: map[string]string{}}
	for _, n := range nodes {
		name := translate.NodeName(n.Name)
		// Two Kubernetes names can sanitise alike ("a.b" and "a-b"); the
		// later one in name order gets a numeric suffix, deterministically.
		for i := 2; ; i++ {
			if _, dup := t.byName[name]; !dup {
				break
			}
			name = translate.NodeName(n.Name) + "-" + strconv.Itoa(i)
		}
		t.byName[name] = len(t.list)
		t.byKube[n.Name] = name
		t.list = append(t.list, Node{Name: name, KubeName: n.Name, Ready: nodeReady(n), Obj: n})
	}
	return t
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (c *Cluster) nodeTable() *nodeTable {
	gen := c.nodeGen.Load()
	if t := c.nodeTab.Load(); t != nil && t.gen == gen {
		return t
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.nodeTab.Load(); t != nil && t.gen == gen {
		return t
	}
	var nodes []*corev1.Node
	for _, o := range c.nodes.list() {
		nodes = append(nodes, o.(*corev1.Node))
	}
	t := buildNodeTable(nodes)
	t.gen = gen
	c.nodeTab.Store(t)
	return t
}

// Nodes lists the cluster's nodes in name order.
func (c *Cluster) Nodes() []Node { return c.nodeTable().list }

// Node finds a node by its Proxmox name.
func (c *Cluster) Node(name string) (Node, bool) {
	t := c.nodeTable()
	i, ok := t.byName[name]
	if !ok {
		return Node{}, false
	}
	return t.list[i], true
}

// PVENodeName maps a Kubernetes node name to its Proxmox name.
func (c *Cluster) PVENodeName(kubeName string) string {
	if n, ok := c.nodeTable().byKube[kubeName]; ok {
		return n
	}
	return translate.NodeName(kubeName)
}

// DefaultNodeName is the node reported when the cluster has no nodes at
// all: PVE always has one, and clients need a node in every path.
const DefaultNodeName = "pve"

// homeNode picks the stable node for a VM without a home-node annotation:
// a hash of its UID over the node names, so it does not move with the VMI.
func homeNode(t *nodeTable, uid string) string {
	if len(t.list) == 0 {
		return DefaultNodeName
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(uid))
	return t.list[int(h.Sum32()%uint32(len(t.list)))].Name
}
