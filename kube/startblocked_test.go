package kube

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// What virt-controller reports about a start it retries forever ends the
// start task with KubeVirt's reason; what may still pass does not.
func TestStartBlocked(t *testing.T) {
	pending := func(reason, msg string) *kubevirtv1.VirtualMachineInstance {
		vmi := &kubevirtv1.VirtualMachineInstance{Status: kubevirtv1.VirtualMachineInstanceStatus{Phase: kubevirtv1.Pending}}
		if reason != "" {
			vmi.Status.Conditions = []kubevirtv1.VirtualMachineInstanceCondition{{Type: kubevirtv1.VirtualMachineInstanceSynchronized,
				Status: corev1.ConditionFalse, Reason: reason, Message: msg}}
		}
		return vmi
	}
	vmWith := func(st kubevirtv1.VirtualMachinePrintableStatus) *kubevirtv1.VirtualMachine {
		return &kubevirtv1.VirtualMachine{Status: kubevirtv1.VirtualMachineStatus{PrintableStatus: st}}
	}
	crashing := vmWith(kubevirtv1.VirtualMachineStatusCrashLoopBackOff)
	crashing.Status.StartFailure = &kubevirtv1.VirtualMachineStartFailure{ConsecutiveFailCount: 3}
	for _, c := range []struct {
		name   string
		vm     *kubevirtv1.VirtualMachine
		vmi    *kubevirtv1.VirtualMachineInstance
		waited time.Duration
		want   string
	}{
		{"starting", vmWith(kubevirtv1.VirtualMachineStatusStarting), pending("", ""), time.Hour, ""},
		{"missing claim", vmWith(kubevirtv1.VirtualMachineStatusPvcNotFound), pending("FailedPvcNotFound", "PVC default/iso does not exist, waiting for it to appear"), 0,
			"PVC default/iso does not exist, waiting for it to appear (KubeVirt: FailedPvcNotFound)"},
		{"missing network", vmWith(kubevirtv1.VirtualMachineStatusStarting),
			pending("FailedCreate", "failed to render launch manifest: failed to locate network attachment definition default/vmbr1"), 0,
			"bridge 'vmbr1' does not exist (KubeVirt: failed to render launch manifest: failed to locate network attachment definition default/vmbr1)"},
		{"pod not created yet", vmWith(kubevirtv1.VirtualMachineStatusStarting), pending("FailedCreate", "active migration exists"), 0, ""},
		{"image", vmWith(kubevirtv1.VirtualMachineStatusErrImagePull), pending("ErrImagePull", "rpc error: pull access denied"), 0,
			"rpc error: pull access denied (KubeVirt: ErrImagePull)"},
		{"backoff", vmWith(kubevirtv1.VirtualMachineStatusImagePullBackOff), nil, 0, "KubeVirt status: ImagePullBackOff"},
		{"crash loop", crashing, nil, 0, "the VM instance failed 3 times in a row (KubeVirt status: CrashLoopBackOff)"},
		{"binding", vmWith(kubevirtv1.VirtualMachineStatusWaitingForVolumeBinding), nil, time.Minute, ""},
		{"never binds", vmWith(kubevirtv1.VirtualMachineStatusWaitingForVolumeBinding), nil, 3 * time.Minute,
			"the VM's volumes are not bound after 2m0s (KubeVirt status: WaitingForVolumeBinding)"},
	} {
		if got := startBlocked(c.vm, c.vmi, c.waited); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
