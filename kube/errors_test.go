package kube

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	kvcorev1 "kubevirt.io/client-go/kubevirt/typed/core/v1"
)

// The error kinds callers answer by: each classifies what it names (also
// wrapped), and nothing else.
func TestErrorKinds(t *testing.T) {
	gr := schema.GroupResource{Group: "kubevirt.io", Resource: "virtualmachines"}
	wrap := func(err error) error { return fmt.Errorf("doing it: %w", err) }
	kinds := map[string]func(error) bool{
		"notfound": IsNotFound, "exists": IsAlreadyExists, "conflict": IsConflict,
		"denied": IsDenied, "unavailable": IsUnavailable,
	}
	for _, tc := range []struct {
		name string
		err  error
		is   string // the one kind that holds; "" for none
	}{
		{"not found", apierrors.NewNotFound(gr, "vm"), "notfound"},
		{"already exists", apierrors.NewAlreadyExists(gr, "vm"), "exists"},
		{"conflict", apierrors.NewConflict(gr, "vm", errors.New("changed")), "conflict"},
		{"forbidden", apierrors.NewForbidden(gr, "vm", errors.New("rbac")), "denied"},
		{"console 403", &kvcorev1.AsyncSubresourceError{StatusCode: 403}, "denied"},
		{"console 404", &kvcorev1.AsyncSubresourceError{StatusCode: 404}, ""},
		{"deadline", context.DeadlineExceeded, "unavailable"},
		{"cancelled", context.Canceled, "unavailable"},
		{"server timeout", apierrors.NewServerTimeout(gr, "get", 1), "unavailable"},
		{"timeout", apierrors.NewTimeoutError("slow", 1), "unavailable"},
		{"unavailable", apierrors.NewServiceUnavailable("down"), "unavailable"},
		{"too many requests", apierrors.NewTooManyRequests("busy", 1), "unavailable"},
		{"connection refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, "unavailable"},
		{"internal", apierrors.NewInternalError(errors.New("boom")), ""},
		{"plain", errors.New("plain"), ""},
	} {
		for _, err := range []error{tc.err, wrap(tc.err)} {
			for kind, is := range kinds {
				if got := is(err); got != (kind == tc.is) {
					t.Errorf("%s (%v): %s = %v", tc.name, err, kind, got)
				}
			}
		}
	}
}

// StatusMessage is the apiserver's own words, not the wrapping.
func TestStatusMessage(t *testing.T) {
	err := fmt.Errorf("patching: %w", apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "p", errors.New("no")))
	msg, ok := StatusMessage(err)
	if !ok || msg != `pods "p" is forbidden: no` {
		t.Fatalf("StatusMessage = %q, %v", msg, ok)
	}
	if msg, ok := StatusMessage(errors.New("plain")); ok || msg != "" {
		t.Fatalf("plain error: %q, %v", msg, ok)
	}
}

// webhookDenial is kube-apiserver's answer when an admission webhook
// refuses (k8s.io/apiserver's ToStatusErr over KubeVirt's
// ToAdmissionResponse).
func webhookDenial(webhook, msg string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid,
		Message: fmt.Sprintf("admission webhook %q denied the request: %s", webhook, msg),
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: metav1.CauseTypeFieldValueRequired, Message: msg}}},
	}}
}

// The 422s a VM write can get: a patch that no longer applies (the VM
// changed: read again) and a webhook's denial (the answer: never retried).
func TestAdmissionAndPatchRefusals(t *testing.T) {
	const dvt = "DataVolumeTemplate entry spec.dataVolumeTemplate[1] must be referenced in the VMI template's 'volumes' list"
	denied := webhookDenial("virtualmachine-validator.kubevirt.io", dvt)
	// As kube-apiserver answers a failed "test" (json-patch's words dropped).
	stale := apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "", schema.GroupResource{}, "",
		"testing value /metadata/resourceVersion failed: test failed", 0, false)
	unexplained := &apierrors.StatusError{ErrStatus: metav1.Status{Code: 400,
		Message: `admission webhook "virtualmachinesnapshot-validator.snapshot.kubevirt.io" denied the request without explanation`}}
	gateOff := &apierrors.StatusError{ErrStatus: metav1.Status{Code: 400,
		Message: `admission webhook "virtualmachinesnapshot-validator.snapshot.kubevirt.io" denied the request: snapshot feature gate not enabled`}}
	tests := []struct {
		name            string
		err             error
		webhook, reason string // "" webhook: no denial
		modified        bool
	}{
		{"webhook denial", denied, "virtualmachine-validator.kubevirt.io", dvt, false},
		{"a reason given twice", webhookDenial("virtualmachine-validator.kubevirt.io", "too many sockets, too many sockets, allowed: [a, b]"),
			"virtualmachine-validator.kubevirt.io", "too many sockets, allowed: [a, b]", false},
		{"wrapped denial", fmt.Errorf("writing: %w", denied), "virtualmachine-validator.kubevirt.io", dvt, false},
		{"denial without explanation", unexplained, "virtualmachinesnapshot-validator.snapshot.kubevirt.io", "", false},
		{"400 denial", gateOff, "virtualmachinesnapshot-validator.snapshot.kubevirt.io", "snapshot feature gate not enabled", false},
		{"failed test", stale, "", "", true},
		{"schema error", apierrors.NewInvalid(schema.GroupKind{Group: "kubevirt.io", Kind: "VirtualMachine"}, "vm", nil), "", "", false},
		{"plain", errors.New("the server rejected our request due to an error in our request"), "", "", false},
	}
	for _, tt := range tests {
		d, ok := AsAdmission(tt.err)
		switch {
		case ok != (tt.webhook != ""):
			t.Errorf("%s: AsAdmission = %v", tt.name, ok)
		case ok && (d.Webhook != tt.webhook || d.Reason != tt.reason || d.Unwrap() == nil):
			t.Errorf("%s: %+v", tt.name, d)
		}
		if got := patchTestFailed(tt.err); got != tt.modified {
			t.Errorf("%s: patchTestFailed = %v", tt.name, got)
		}
	}
}

// virt-api's lifecycle calls that lost a race with another change of the
// VM are asked again; what they then answer is said as qemu-server says
// it, and a race lost every time as a busy VM, never in virt-api's words.
func TestLifecycleRetries(t *testing.T) {
	defer func(b wait.Backoff) { lifecycleBackoff = b }(lifecycleBackoff)
	lifecycleBackoff = wait.Backoff{Duration: time.Millisecond, Steps: 4}
	vmGR := schema.GroupResource{Group: "kubevirt.io", Resource: "virtualmachine"}
	race := apierrors.NewInternalError(errors.New(patchNotApplicable))
	underway := apierrors.NewInternalError(errors.New("unable to complete request: stop/start already underway"))
	g := Guest{VMID: 104}
	tests := []struct {
		name    string
		answers []error // in turn; the last repeats
		calls   int
		want    string // "" for success
	}{
		{"first time", []error{nil}, 1, ""},
		{"after a lost race", []error{race, race, nil}, 3, ""},
		{"after another call's request", []error{underway, nil}, 2, ""},
		{"then running", []error{race, apierrors.NewConflict(vmGR, "vm", errors.New("VM is already running"))}, 2, "VM 104 already running"},
		{"stopped meanwhile", []error{apierrors.NewConflict(vmGR, "vm", errors.New("VM is not running"))}, 1, "VM 104 not running"},
		{"always lost", []error{race}, 4, "VM 104 is busy: another start, stop or reboot of it is under way; try again"},
		{"other errors are not retried", []error{apierrors.NewForbidden(vmGR, "vm", errors.New("rbac"))}, 1,
			`virtualmachine.kubevirt.io "vm" is forbidden: rbac`},
	}
	for _, tt := range tests {
		calls := 0
		err := lifecycle(g, func() error {
			calls++
			return tt.answers[min(calls, len(tt.answers))-1]
		})
		if got := errText(err); got != tt.want || calls != tt.calls {
			t.Errorf("%s: %q after %d calls, want %q after %d", tt.name, got, calls, tt.want, tt.calls)
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// KubeVirt's snapshot and restore webhooks refusing for the feature gate
// are ErrSnapshotsOff; other refusals and errors stay what they are.
func TestSnapshotWriteErr(t *testing.T) {
	gate := func(webhook, msg string) error {
		return &apierrors.StatusError{ErrStatus: metav1.Status{Code: 400,
			Message: fmt.Sprintf("admission webhook %q denied the request: %s", webhook, msg)}}
	}
	for _, err := range []error{
		gate("virtualmachinesnapshot-validator.snapshot.kubevirt.io", "snapshot feature gate not enabled"),
		gate("virtualmachinerestore-validator.snapshot.kubevirt.io", "Snapshot/Restore feature gate not enabled"),
	} {
		if got := snapshotWriteErr(err); !errors.Is(got, ErrSnapshotsOff) {
			t.Errorf("%v: %v", err, got)
		}
	}
	other := gate("virtualmachinesnapshot-validator.snapshot.kubevirt.io", "VirtualMachine \"x\" does not exist")
	for _, err := range []error{nil, other, errors.New("plain")} {
		if got := snapshotWriteErr(err); got != err {
			t.Errorf("%v became %v", err, got)
		}
	}
}

// lifecycleBackoff keeps asking for about 5 s, as its comment promises:
// summed as wait.ExponentialBackoff sleeps (a Cap would cut the steps).
func TestLifecycleBackoffBudget(t *testing.T) {
	b := lifecycleBackoff
	b.Jitter = 0
	tries, slept := 0, time.Duration(0)
	for b.Steps > 0 {
		tries++
		if b.Steps == 1 {
			break
		}
		slept += b.Step()
	}
	if tries < 8 || slept < 4*time.Second || slept > 6*time.Second {
		t.Errorf("lifecycleBackoff: %d tries over %v, want about 5 s", tries, slept)
	}
}
