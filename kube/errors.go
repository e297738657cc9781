package kube

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strings"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kvcorev1 "kubevirt.io/client-go/kubevirt/typed/core/v1"
)

// The kinds of error a Kubernetes call of this package can end with, so
// that callers answer them without reading apimachinery's or KubeVirt's
// error types.

// IsNotFound tells whether err says the object does not exist.
func IsNotFound(err error) bool { return apierrors.IsNotFound(err) }

// IsAlreadyExists tells whether err says an object of that name exists.
func IsAlreadyExists(err error) bool { return apierrors.IsAlreadyExists(err) }

// IsConflict tells whether err is a write refused because the object
// changed since it was read.
func IsConflict(err error) bool { return apierrors.IsConflict(err) }

// IsDenied tells whether Kubernetes refused the call to the identity that
// made it: RBAC's 403, or virt-api's on a console subresource.
func IsDenied(err error) bool {
	if apierrors.IsForbidden(err) {
		return true
	}
	var ae *kvcorev1.AsyncSubresourceError
	return errors.As(err, &ae) && ae.GetStatusCode() == 403
}

// IsUnavailable tells whether the cluster did not answer: the call timed
// out or was cancelled, the apiserver was unreachable, overloaded or
// unavailable. Trying again later may succeed.
func IsUnavailable(err error) bool {
	var ne net.Error
	var oe *net.OpError
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsTooManyRequests(err) ||
		errors.As(err, &ne) || errors.As(err, &oe) || errors.Is(err, syscall.ECONNREFUSED)
}

// StatusMessage is the apiserver's own words on err (its Status message),
// and whether err carries any.
func StatusMessage(err error) (string, bool) {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return se.Status().Message, true
	}
	return "", false
}

// AdmissionError is an admission webhook's refusal of a write (KubeVirt's
// rules on VM specs, snapshots, restores): what was asked cannot be done
// as asked, and asking again will not change that.
type AdmissionError struct {
	// Webhook names the webhook that refused, e.g.
	// "virtualmachine-validator.kubevirt.io".
	Webhook string
	// Reason is the webhook's own words ("" when it gave none).
	Reason string
	err    error
}

func (e *AdmissionError) Error() string {
	if e.Reason == "" {
		return fmt.Sprintf("refused by the admission webhook %s", e.Webhook)
	}
	return e.Reason
}

func (e *AdmissionError) Unwrap() error { return e.err }

// admissionRE matches kube-apiserver's wording of a webhook's denial
// (k8s.io/apiserver's webhook ToStatusErr).
var admissionRE = regexp.MustCompile(`(?s)^admission webhook "([^"]+)" denied the request(?:: (.*)| without explanation)$`)

// AsAdmission tells whether err is an admission webhook's refusal, and
// which.
func AsAdmission(err error) (*AdmissionError, bool) {
	var ae *AdmissionError
	if errors.As(err, &ae) {
		return ae, true
	}
	msg, ok := StatusMessage(err)
	if !ok {
		return nil, false
	}
	m := admissionRE.FindStringSubmatch(msg)
	if m == nil {
		return nil, false
	}
	return &AdmissionError{Webhook: m[1], Reason: uniqueCauses(strings.TrimSpace(m[2])), err: err}, true
}

// uniqueCauses drops repeats from a webhook's message: KubeVirt joins the
// messages of all its causes with ", ", and checks some rules on more than
// one path, so one reason can come several times.
func uniqueCauses(msg string) string {
	parts := strings.Split(msg, ", ")
	seen := map[string]bool{}
	out := parts[:0]
	for _, p := range parts {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return strings.Join(out, ", ")
}

// patchTestFailed tells whether err is kube-apiserver's answer to a JSON
// patch that does not apply to the object as it is now: a "test" that no
// longer holds, a "remove" of what is gone — the object changed since it
// was read. kube-apiserver words that as a bare 422 with a fixed message
// (json-patch's own words are dropped); an admission webhook's denial is a
// 422 too, but says who denied what.
func patchTestFailed(err error) bool {
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		return false
	}
	st := se.Status()
	return st.Code == http.StatusUnprocessableEntity && st.Message == patchNotApplicable
}

// patchNotApplicable is kube-apiserver's message for a JSON patch that
// does not apply (apimachinery's NewGenericServerResponse for a 422).
const patchNotApplicable = "the server rejected our request due to an error in our request"

// lostPatchRace tells whether err is virt-api's answer to a lifecycle
// call (start, stop, restart) that lost a race with another change of the
// VM: virt-api patches the VM with a "test" of what it read, and when that
// fails on this apiserver, which words the failure generically, virt-api
// does not recognise it and answers 500 "Internal error occurred: the
// server rejected our request due to an error in our request"
// (pkg/virt-api/rest/lifecycle.go); a start or stop request another call
// has just made gives "stop/start already underway". Asking again, on a
// fresh read, gives the real answer.
func lostPatchRace(err error) bool {
	if !apierrors.IsInternalError(err) {
		return false
	}
	msg, _ := StatusMessage(err)
	return strings.Contains(msg, patchNotApplicable) ||
		strings.Contains(msg, "stop/start already underway")
}
