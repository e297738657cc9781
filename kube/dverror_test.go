package kube

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiclient "kubevirt.io/client-go/containerizeddataimporter"
	"kubevirt.io/client-go/kubevirt"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/caddy-proxmox/caddy-proxmox/kubevirtsim"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// The message CDI's clone populator records when its progress poll of a
// worker pod's /metrics times out (GetProgressReportFromURL's 2 s).
const metricsPollError = `Get "https://10.244.1.7:8443/metrics": context deadline exceeded`

// dvErrorEnv is a fake cluster with CDI and a clone in progress: VM
// default/copy (KubeVirt status DataVolumeError) whose disk copy-disk CDI
// reports with the given status.
type dvErrorEnv struct {
	c    *Cluster
	kube kubernetes.Interface
	kv   kubevirt.Interface
	cdi  cdiclient.Interface
}

func newDVErrorEnv(t *testing.T, status cdiv1.DataVolumeStatus) *dvErrorEnv {
	t.Helper()
	checkGoroutines(t)
	vm := vmOnDataVolume("copy", "copy-disk", kubevirtv1.VirtualMachineStatusDataVolumeError)
	owner := metav1.OwnerReference{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: "copy", UID: "copy-uid"}
	dv := &cdiv1.DataVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "copy-disk", Namespace: "default", UID: "copy-disk-uid", OwnerReferences: []metav1.OwnerReference{owner}},
		Status:     status,
	}
	pvc := claim("default", "copy-disk", &metav1.OwnerReference{APIVersion: "cdi.kubevirt.io/v1beta1", Kind: "DataVolume", Name: "copy-disk", UID: "copy-disk-uid"})
	pvc.Status.Phase = corev1.ClaimBound
	kc, kv, cdi := kubevirtsim.NewFakeClientsWithCDI(append(kubevirtsim.Seed(), []k8sruntime.Object{vm, dv, pvc}...)...)
	return &dvErrorEnv{c: startWithCDI(t, kc, kv, cdi), kube: kc, kv: kv, cdi: cdi}
}

// startWithCDI starts a Cluster with CDI on the fake clients, its task
// passes every 20 ms; it is stopped when the test ends.
func startWithCDI(t *testing.T, kc kubernetes.Interface, kv kubevirt.Interface, cdi cdiclient.Interface) *Cluster {
	t.Helper()
	c := New(kc, kv, nil, Options{CDI: cdi, AssumeKubeVirtAPIs: true})
	c.Tasks.Interval = 20 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// vmOnDataVolume is VM default/name (UID name-uid) whose disk scsi0 is the
// DataVolume template dv, in the given KubeVirt status.
func vmOnDataVolume(name, dv string, status kubevirtv1.VirtualMachinePrintableStatus) *kubevirtv1.VirtualMachine {
	return &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name + "-uid")},
		Spec: kubevirtv1.VirtualMachineSpec{
			DataVolumeTemplates: []kubevirtv1.DataVolumeTemplateSpec{{ObjectMeta: metav1.ObjectMeta{Name: dv}}},
			Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{Spec: kubevirtv1.VirtualMachineInstanceSpec{
				Volumes: []kubevirtv1.Volume{{Name: "scsi0", VolumeSource: kubevirtv1.VolumeSource{
					DataVolume: &kubevirtv1.DataVolumeSource{Name: dv}}}},
			}},
		},
		Status: kubevirtv1.VirtualMachineStatus{PrintableStatus: status},
	}
}

// clone starts the clone task that waits for the VM's volumes.
func (e *dvErrorEnv) clone(t *testing.T) string {
	t.Helper()
	task, err := e.c.Tasks.Begin(context.Background(), TaskSpec{
		Node: seedNode1, Type: translate.TaskClone, ID: "100", User: "root@pam",
		Goal: GoalProvisioned, Namespace: "default", Name: "copy", UID: "copy-uid",
	})
	if err != nil {
		t.Fatal(err)
	}
	return task.UPID.String()
}

func dvCondition(typ cdiv1.DataVolumeConditionType, status corev1.ConditionStatus, reason, msg string) cdiv1.DataVolumeCondition {
	return cdiv1.DataVolumeCondition{Type: typ, Status: status, Reason: reason, Message: msg}
}

// TestTransientDataVolumeError: KubeVirt shows DataVolumeError while CDI's
// clone populator retries an error of its own (a progress poll of the
// worker pod that timed out: Running=False, reason Error, no restart); the
// clone task goes on, says what CDI retries, and ends OK once CDI has
// copied the disk.
func TestTransientDataVolumeError(t *testing.T) {
	e := newDVErrorEnv(t, cdiv1.DataVolumeStatus{
		Phase: cdiv1.CloneInProgress,
		Conditions: []cdiv1.DataVolumeCondition{
			dvCondition(cdiv1.DataVolumeBound, corev1.ConditionTrue, "Bound", ""),
			dvCondition(cdiv1.DataVolumeRunning, corev1.ConditionFalse, "Error", metricsPollError),
			dvCondition(cdiv1.DataVolumeReady, corev1.ConditionFalse, "Error", metricsPollError),
		},
	})
	upid := e.clone(t)
	retried := "CDI retries after an error: DataVolume copy-disk: " + metricsPollError
	eventually(t, "the task to say what CDI retries", func() (bool, string) {
		task, err := e.c.Tasks.Get(context.Background(), upid)
		if err != nil {
			return false, err.Error()
		}
		if !task.Running() {
			t.Fatalf("the task ended on an error CDI retries: %q", task.ExitStatus)
		}
		return slices.Contains(task.Log, retried), strings.Join(task.Log, "\n")
	})
	waitPasses(t, e.c, 2)
	if task, _ := e.c.Tasks.Get(context.Background(), upid); !task.Running() {
		t.Fatalf("the task ended on an error CDI retries: %q", task.ExitStatus)
	}

	ctx := context.Background()
	dv, err := e.cdi.CdiV1beta1().DataVolumes("default").Get(ctx, "copy-disk", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dv.Status = cdiv1.DataVolumeStatus{Phase: cdiv1.Succeeded, Progress: "100.0%", Conditions: []cdiv1.DataVolumeCondition{
		dvCondition(cdiv1.DataVolumeBound, corev1.ConditionTrue, "Bound", ""),
		dvCondition(cdiv1.DataVolumeRunning, corev1.ConditionFalse, "Completed", "Clone Complete"),
		dvCondition(cdiv1.DataVolumeReady, corev1.ConditionTrue, "", ""),
	}}
	if _, err := e.cdi.CdiV1beta1().DataVolumes("default").UpdateStatus(ctx, dv, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	vm, err := e.kv.KubevirtV1().VirtualMachines("default").Get(ctx, "copy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vm.Status.PrintableStatus = kubevirtv1.VirtualMachineStatusStopped
	if _, err := e.kv.KubevirtV1().VirtualMachines("default").UpdateStatus(ctx, vm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	end := waitTaskEnd(t, e.c, upid)
	if end.ExitStatus != translate.ExitOK {
		t.Fatalf("exit %q, want OK; log %q", end.ExitStatus, end.Log)
	}
	if !slices.Contains(end.Log, retried) {
		t.Errorf("log %q: want what CDI retried", end.Log)
	}
}

// TestFinalDataVolumeError: what CDI gives up on, or what persists across
// CDI's own retry, ends the clone task with CDI's reason, and the
// half-made VM goes.
func TestFinalDataVolumeError(t *testing.T) {
	const pullMsg = "Unable to pull image: registry.invalid/disk:latest"
	const importMsg = "Unable to connect to http data source: expected status code 200, got 404. Status: 404 Not Found"
	for _, tc := range []struct {
		name   string
		status cdiv1.DataVolumeStatus
		want   string
	}{
		{"worker failed again after a restart", cdiv1.DataVolumeStatus{
			Phase: cdiv1.ImportInProgress, RestartCount: 1,
			Conditions: []cdiv1.DataVolumeCondition{dvCondition(cdiv1.DataVolumeRunning, corev1.ConditionFalse, "Error", importMsg)},
		}, importMsg},
		{"failed phase", cdiv1.DataVolumeStatus{
			Phase:      cdiv1.Failed,
			Conditions: []cdiv1.DataVolumeCondition{dvCondition(cdiv1.DataVolumeReady, corev1.ConditionFalse, "ClaimLost", "claim lost")},
		}, "claim lost"},
		{"image pull", cdiv1.DataVolumeStatus{
			Phase:      cdiv1.ImportInProgress,
			Conditions: []cdiv1.DataVolumeCondition{dvCondition(cdiv1.DataVolumeRunning, corev1.ConditionFalse, "ImagePullFailed", pullMsg)},
		}, pullMsg},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newDVErrorEnv(t, tc.status)
			end := waitTaskEnd(t, e.c, e.clone(t))
			if want := "volume provisioning failed: DataVolume copy-disk: " + tc.want; end.ExitStatus != want {
				t.Fatalf("exit %q, want %q", end.ExitStatus, want)
			}
			if !slices.Contains(end.Log, "removing the partly cloned VM default/copy") {
				t.Errorf("log %q", end.Log)
			}
			eventually(t, "the failed clone's VM to go", func() (bool, string) {
				_, err := e.kv.KubevirtV1().VirtualMachines("default").Get(context.Background(), "copy", metav1.GetOptions{})
				return apierrors.IsNotFound(err), "VM still there"
			})
		})
	}
}
