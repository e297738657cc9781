package behaviour

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"kubevirt.io/client-go/containerizeddataimporter"
)

// logRealCluster logs, when t has failed, what the real cluster's
// controllers said about the case's VMs: the warning events and the
// conditions of the DataVolumes whose names hold one of vmids. Without it
// a real backend's failure shows only the task's one-line exit status.
func logRealCluster(t *testing.T, vmids []string) {
	t.Helper()
	if !t.Failed() || len(vmids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mine := func(name string) bool {
		for _, id := range vmids {
			if strings.Contains(name, "-"+id+"-") || strings.HasSuffix(name, "-"+id) {
				return true
			}
		}
		return false
	}
	var lines []string
	evs, err := env.DirectKube.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "type=" + corev1.EventTypeWarning})
	if err != nil {
		t.Logf("real cluster: list events: %v", err)
	}
	if evs != nil {
		for _, ev := range evs.Items {
			if mine(ev.InvolvedObject.Name) {
				lines = append(lines, fmt.Sprintf("event %s/%s %s: %s", ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Reason, ev.Message))
			}
		}
	}
	cdi, err := containerizeddataimporter.NewForConfig(env.DirectConfig)
	if err == nil {
		dvs, lerr := cdi.CdiV1beta1().DataVolumes("").List(ctx, metav1.ListOptions{})
		if lerr != nil {
			t.Logf("real cluster: list DataVolumes: %v", lerr)
		}
		if dvs != nil {
			for _, dv := range dvs.Items {
				if !mine(dv.Name) {
					continue
				}
				for _, c := range dv.Status.Conditions {
					lines = append(lines, fmt.Sprintf("DataVolume %s phase %s: %s=%s %s %s", dv.Name, dv.Status.Phase, c.Type, c.Status, c.Reason, c.Message))
				}
			}
		}
	}
	sort.Strings(lines)
	t.Logf("real cluster, about VMs %v:\n  %s", vmids, strings.Join(lines, "\n  "))
}
