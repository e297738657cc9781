package kube

import (
	"context"
	"errors"
	"net"
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
