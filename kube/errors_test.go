package kube

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
