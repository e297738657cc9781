package kube

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// testNode is a node with the given NodeReady status ("" = no condition).
func testNode(name string, ready corev1.ConditionStatus) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse}}
	if ready != "" {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeReady, Status: ready})
	}
	return n
}

type nodeWant struct {
	name, kube string
	ready      bool
}

func TestBuildNodeTable(t *testing.T) {
	T, F, U := corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown
	cases := []struct {
		name  string
		nodes []*corev1.Node
		want  []nodeWant // in list order
	}{{
		name:  "dots become dashes",
		nodes: []*corev1.Node{testNode("kv-node-2.lab.internal", T), testNode("kv-node-1.lab.internal", T)},
		want: []nodeWant{
			{"kv-node-1-lab-internal", "kv-node-1.lab.internal", true},
			{"kv-node-2-lab-internal", "kv-node-2.lab.internal", true},
		},
	}, {
		name:  "a.b and a-b collide: the later name gets -2",
		nodes: []*corev1.Node{testNode("a.b", T), testNode("a-b", T)},
		want:  []nodeWant{{"a-b", "a-b", true}, {"a-b-2", "a.b", true}},
	}, {
		name:  "three-way collision",
		nodes: []*corev1.Node{testNode("a_b", T), testNode("a.b", F), testNode("a-b", T)},
		want:  []nodeWant{{"a-b", "a-b", true}, {"a-b-2", "a.b", false}, {"a-b-3", "a_b", true}},
	}, {
		name:  "a suffix never reuses a real node's name",
		nodes: []*corev1.Node{testNode("a.b", T), testNode("a-b-2", T), testNode("a-b", T)},
		want:  []nodeWant{{"a-b", "a-b", true}, {"a-b-2", "a-b-2", true}, {"a-b-3", "a.b", true}},
	}, {
		name: "Ready detection",
		nodes: []*corev1.Node{
			testNode("ready", T), testNode("not-ready", F), testNode("unknown", U), testNode("no-condition", ""),
		},
		want: []nodeWant{
			{"no-condition", "no-condition", false}, {"not-ready", "not-ready", false},
			{"ready", "ready", true}, {"unknown", "unknown", false},
		},
	}, {
		name: "no nodes",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, nodes := range [][]*corev1.Node{slices.Clone(tc.nodes), reversed(tc.nodes), rotated(tc.nodes)} {
				tab := buildNodeTable(nodes)
				var got []nodeWant
				for i, n := range tab.list {
					got = append(got, nodeWant{n.Name, n.KubeName, n.Ready})
					if n.Obj == nil || n.Obj.Name != n.KubeName {
						t.Errorf("list[%d].Obj = %v, want the node %s", i, n.Obj, n.KubeName)
					}
					if tab.byName[n.Name] != i {
						t.Errorf("byName[%s] = %d, want %d", n.Name, tab.byName[n.Name], i)
					}
					if tab.byKube[n.KubeName] != n.Name {
						t.Errorf("byKube[%s] = %q, want %q", n.KubeName, tab.byKube[n.KubeName], n.Name)
					}
				}
				if !slices.Equal(got, tc.want) {
					t.Fatalf("nodes = %v, want %v", got, tc.want)
				}
				if len(tab.byName) != len(tc.want) || len(tab.byKube) != len(tc.want) {
					t.Fatalf("byName %v / byKube %v, want %d entries", tab.byName, tab.byKube, len(tc.want))
				}
			}
		})
	}
}

func TestHomeNode(t *testing.T) {
	kube := []string{"kv-node-1.lab.internal", "kv-node-2.lab.internal", "kv-node-3.lab.internal"}
	pve := []string{seedNode1, seedNode2, seedNode3}
	build := func(names []string) *nodeTable {
		var nodes []*corev1.Node
		for _, n := range names {
			nodes = append(nodes, testNode(n, corev1.ConditionTrue))
		}
		return buildNodeTable(nodes)
	}
	tab := build(kube)
	tabReordered := build([]string{kube[2], kube[0], kube[1]})
	seen := map[string]bool{}
	for i := range 40 {
		uid := fmt.Sprintf("0b6f1f5e-3c1d-4f8e-9a2b-%012d", i)
		want := homeNodeFor(uid, pve)
		for try, tb := range []*nodeTable{tab, tab, tabReordered} {
			if got := homeNode(tb, uid); got != want {
				t.Fatalf("homeNode(%s) try %d = %q, want %q", uid, try, got, want)
			}
		}
		seen[want] = true
	}
	if len(seen) != 3 {
		t.Errorf("40 UIDs landed on %d of 3 nodes: %v", len(seen), seen)
	}
	// Pinned values: a change of the hash would move every VM.
	pinned := map[string]string{seedLegacyUID: seedNode1, seedDebianUID: seedNode2, "": seedNode2}
	for uid, want := range pinned {
		if got := homeNode(tab, uid); got != want {
			t.Errorf("homeNode(%q) = %q, want %q", uid, got, want)
		}
	}
	for _, empty := range []*nodeTable{buildNodeTable(nil), {}} {
		if got := homeNode(empty, seedLegacyUID); got != "pve" || DefaultNodeName != "pve" { // PVE's default node name
			t.Errorf("homeNode with no nodes = %q, want pve", got)
		}
	}
	one := build([]string{"solo.example"})
	if got := homeNode(one, seedLegacyUID); got != "solo-example" {
		t.Errorf("homeNode with one node = %q, want solo-example", got)
	}
}

func TestClusterNodes(t *testing.T) {
	e := newEnv(t, envOptions{})
	c := e.cluster(Options{}, true)

	var got []nodeWant
	for _, n := range c.Nodes() {
		got = append(got, nodeWant{n.Name, n.KubeName, n.Ready})
	}
	want := []nodeWant{
		{seedNode1, "kv-node-1.lab.internal", true},
		{seedNode2, "kv-node-2.lab.internal", true},
		{seedNode3, "kv-node-3.lab.internal", true},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Nodes() = %v, want %v", got, want)
	}
	if n, ok := c.Node(seedNode2); !ok || n.KubeName != "kv-node-2.lab.internal" {
		t.Errorf("Node(%s) = %+v, %v", seedNode2, n, ok)
	}
	for _, name := range []string{"kv-node-2.lab.internal", "pve", ""} {
		if _, ok := c.Node(name); ok {
			t.Errorf("Node(%q) found, want not found", name)
		}
	}
	for kubeName, pveName := range map[string]string{
		"kv-node-3.lab.internal": seedNode3, "gone.example.org": "gone-example-org",
	} {
		if got := c.PVENodeName(kubeName); got != pveName {
			t.Errorf("PVENodeName(%s) = %q, want %q", kubeName, got, pveName)
		}
	}

	// A node turning NotReady is noticed (the table is rebuilt).
	n, err := e.kube.CoreV1().Nodes().Get(e.ctx, "kv-node-3.lab.internal", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			n.Status.Conditions[i].Status = corev1.ConditionFalse
		}
	}
	if _, err := e.kube.CoreV1().Nodes().UpdateStatus(e.ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "node 3 to be not ready", func() (bool, string) {
		n, _ := c.Node(seedNode3)
		return !n.Ready, fmt.Sprintf("%+v", n.Ready)
	})
	// A new node shows up, sanitised and colliding names resolved.
	for _, name := range []string{"kv-node-1_lab_internal", "aaa.new"} {
		if _, err := e.kube.CoreV1().Nodes().Create(e.ctx, testNode(name, corev1.ConditionTrue), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "new nodes", func() (bool, string) { return len(c.Nodes()) == 5, fmt.Sprint(c.Nodes()) })
	got = nil
	for _, n := range c.Nodes() {
		got = append(got, nodeWant{n.Name, n.KubeName, n.Ready})
	}
	want = []nodeWant{
		{"aaa-new", "aaa.new", true},
		{seedNode1, "kv-node-1.lab.internal", true},
		{seedNode1 + "-2", "kv-node-1_lab_internal", true},
		{seedNode2, "kv-node-2.lab.internal", true},
		{seedNode3, "kv-node-3.lab.internal", false},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Nodes() = %v, want %v", got, want)
	}
}
