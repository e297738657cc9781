package testenv

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestCreateNodesOutlastsConflicts: a node stand-in that writes the new
// node more often than client-go's DefaultRetry allows for (five tries)
// must not fail the seed, and both the status write and the untaint
// must land on the node as it is after the other writer's changes.
func TestCreateNodesOutlastsConflicts(t *testing.T) {
	kube := fake.NewClientset()
	conflicts := map[string]int{"status": 4, "": 4} // subresource → conflicts to answer
	kube.PrependReactor("update", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sub := a.GetSubresource()
		if conflicts[sub] == 0 {
			return false, nil, nil
		}
		conflicts[sub]--
		// The other writer's change: a label, as virt-handler's stand-in sets.
		n, err := kube.Tracker().Get(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, "", "n1")
		if err != nil {
			return true, nil, err
		}
		node := n.(*corev1.Node).DeepCopy()
		if node.Labels == nil {
			node.Labels = map[string]string{}
		}
		node.Labels["other-writer"] = "yes"
		if err := kube.Tracker().Update(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, node, ""); err != nil {
			return true, nil, err
		}
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, "n1", nil)
	})
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
	if err := CreateNodes(context.Background(), kube, node); err != nil {
		t.Fatalf("CreateNodes: %v", err)
	}
	got, err := kube.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Type != corev1.NodeReady {
		t.Errorf("status not written: %+v", got.Status)
	}
	if len(got.Spec.Taints) != 0 {
		t.Errorf("not-ready taint left: %+v", got.Spec.Taints)
	}
	if got.Labels["other-writer"] != "yes" {
		t.Errorf("the other writer's label was lost: %v", got.Labels)
	}
	if conflicts["status"] != 0 || conflicts[""] != 0 {
		t.Errorf("conflicts not all answered: %v", conflicts)
	}
}
