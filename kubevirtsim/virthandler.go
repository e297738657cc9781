package kubevirtsim

import (
	"context"
	"net/http"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/util/retry"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubevirt"
)

// NewVirtHandler serves the part of virt-handler's REST API that KubeVirt's
// own virt-api calls (the routes of cmd/virt-handler in KubeVirt v1.8.0),
// for a test cluster that runs the real virt-api but has no node:
//
//	PUT /v1/namespaces/{ns}/virtualmachineinstances/{name}/{pause,unpause,softreboot,reset}
//	GET /v1/namespaces/{ns}/virtualmachineinstances/{name}/{console,vnc}   websockets
//
// virt-api has already checked the request (phase, paused state, agent or
// ACPI, liveness probe) when it forwards it, as it does towards the real
// virt-handler. Where virt-handler would ask libvirt, the stand-in records
// the effect on the VMI with kv, which should be virt-handler's identity:
// the Paused condition, or the AnnotationReboots / AnnotationResets
// counters. The streams are those of ConsoleServer: an echo TTY and a
// scripted RFB server, one session per VMI and kind.
//
// Like virt-handler, which reads VMIs from its informer, it only lists,
// watches, updates and patches VMIs: virt-handler's ClusterRole has no get.
//
// Other handler routes (freeze, guest agent queries, screenshots, usbredir,
// vsock, SEV, backups) answer 404, so virt-api reports them as failed.
func NewVirtHandler(kv kubevirt.Interface) http.Handler {
	h := &virtHandler{kv: kv, console: NewConsoleServer(kv)}
	h.console.getVMI = h.getVMI
	return h
}

type virtHandler struct {
	kv      kubevirt.Interface
	console *ConsoleServer
}

// getVMI reads a VMI with a list by name.
func (h *virtHandler) getVMI(ctx context.Context, ns, name string) (*virtv1.VirtualMachineInstance, error) {
	list, err := h.kv.KubevirtV1().VirtualMachineInstances(ns).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(),
	})
	if err != nil {
		return nil, err
	}
	if len(list.Items) == 0 {
		return nil, apierrors.NewNotFound(vmiGroupResource, name)
	}
	return &list.Items[0], nil
}

// updateVMI applies mutate to the current VMI and writes it back, retrying
// on conflicts.
func (h *virtHandler) updateVMI(ctx context.Context, ns, name string, mutate func(*virtv1.VirtualMachineInstance)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		vmi, err := h.getVMI(ctx, ns, name)
		if err != nil {
			return err
		}
		mutate(vmi)
		_, err = h.kv.KubevirtV1().VirtualMachineInstances(ns).Update(ctx, vmi, metav1.UpdateOptions{})
		return err
	})
}

// parseHandlerPath splits /v1/namespaces/{ns}/virtualmachineinstances/{name}/{action}.
func parseHandlerPath(p string) (ns, name, action string, ok bool) {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	if len(parts) != 6 || parts[0] != "v1" || parts[1] != "namespaces" || parts[3] != "virtualmachineinstances" ||
		parts[2] == "" || parts[4] == "" {
		return "", "", "", false
	}
	return parts[2], parts[4], parts[5], true
}

func (h *virtHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ns, name, action, ok := parseHandlerPath(r.URL.Path)
	if !ok {
		writeStatus(w, notFound())
		return
	}
	var mutate func(*virtv1.VirtualMachineInstance)
	switch action {
	case "console", "vnc":
		h.console.serve(w, r, ns, name, action)
		return
	case "pause":
		mutate = func(vmi *virtv1.VirtualMachineInstance) { setPaused(vmi, true, time.Now()) }
	case "unpause":
		mutate = func(vmi *virtv1.VirtualMachineInstance) { setPaused(vmi, false, time.Now()) }
	case "softreboot":
		mutate = func(vmi *virtv1.VirtualMachineInstance) { bumpAnnotation(vmi, AnnotationReboots) }
	case "reset":
		mutate = func(vmi *virtv1.VirtualMachineInstance) { bumpAnnotation(vmi, AnnotationResets) }
	default:
		writeStatus(w, notFound())
		return
	}
	if r.Method != http.MethodPut {
		writeStatus(w, methodNotAllowed(r.Method))
		return
	}
	if err := h.updateVMI(r.Context(), ns, name, mutate); err != nil {
		if !apierrors.IsNotFound(err) {
			err = apierrors.NewInternalError(err)
		}
		writeStatus(w, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}
