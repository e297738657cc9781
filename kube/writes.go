package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// CreateVM creates a VirtualMachine. The caller has built it from PVE
// parameters; this only writes it. Its vmid is claimed on the apiserver
// first, so of concurrent creates with one vmid, on any replica, exactly
// one goes ahead; the others get a *VMIDTakenError.
func (c *Cluster) CreateVM(ctx context.Context, vm *kubevirtv1.VirtualMachine) (*kubevirtv1.VirtualMachine, error) {
	if !c.Serves(vm.Namespace) {
		return nil, fmt.Errorf("namespace %q is not served", vm.Namespace)
	}
	var claim *vmidClaim
	if id := vm.Labels[translate.LabelVMID]; id != "" {
		if n, err := strconv.Atoi(id); err == nil {
			// nextid must not offer it while the create is under way.
			c.HoldVMID(n)
		}
		var err error
		if claim, err = c.claimVMID(ctx, id, vm.Namespace, vm.Name, vm.Annotations[translate.AnnotationNode]); err != nil {
			return nil, err
		}
	}
	out, err := c.as(ctx).kv.KubevirtV1().VirtualMachines(vm.Namespace).Create(ctx, vm, metav1.CreateOptions{})
	if err != nil {
		if claim != nil {
			claim.release(context.WithoutCancel(ctx))
		}
		return nil, err
	}
	if claim != nil {
		claim.commit(ctx, out.UID)
		c.dropStale(claim.prev)
	}
	// Read-your-writes: the vmid resolves for the client's next call even
	// before the watch event arrives (put tells the vmid table).
	c.vms.put(out, true)
	return out, nil
}

// dropStale takes the VM of a claim that was taken over out of the
// cache: the claim was stale because that VM is gone from the apiserver,
// and a cache that has not heard of its deletion yet would show the id
// twice (ambiguous) next to the new VM.
func (c *Cluster) dropStale(prev map[string]string) {
	if prev == nil || prev["uid"] == "" {
		return
	}
	if vm := c.cachedVM(prev["namespace"], prev["name"]); vm != nil && vm.hasUID(types.UID(prev["uid"])) {
		c.vms.drop(vm)
		c.vmidGen.Add(1)
		c.guestGen.Add(1)
	}
}

// DeleteVM deletes the VM, guarded by its UID. Owned objects (the VMI,
// DataVolumes created with it) are removed by the garbage collector.
func (c *Cluster) DeleteVM(ctx context.Context, g Guest) error {
	uid := g.Meta().UID
	// Background, not foreground: foreground deletion waits on the garbage
	// collector, and the delete task must end when the VM object is gone.
	bg := metav1.DeletePropagationBackground
	return c.as(ctx).kv.KubevirtV1().VirtualMachines(g.Namespace()).Delete(ctx, g.Name(), metav1.DeleteOptions{
		Preconditions:     &metav1.Preconditions{UID: &uid},
		PropagationPolicy: &bg,
	})
}

// jsonPointerEscape escapes a key for a JSON patch path.
func jsonPointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// ReplaceVM writes want's template spec, DataVolume templates, labels
// and the given annotations onto the VM, guarded by UID and
// resourceVersion: a VM that changed since it was read is never
// overwritten with a stale view.
func (c *Cluster) ReplaceVM(ctx context.Context, g Guest, want *kubevirtv1.VirtualMachine, annotations ...string) (*kubevirtv1.VirtualMachine, error) {
	ops := []patchOp{
		{Op: "test", Path: "/metadata/uid", Value: string(g.Meta().UID)},
		{Op: "test", Path: "/metadata/resourceVersion", Value: g.Meta().ResourceVersion},
		{Op: "replace", Path: "/spec/template/spec", Value: want.Spec.Template.Spec},
		{Op: "add", Path: "/spec/dataVolumeTemplates", Value: want.Spec.DataVolumeTemplates},
	}
	if want.Spec.RunStrategy != nil {
		ops = append(ops, patchOp{Op: "add", Path: "/spec/runStrategy", Value: string(*want.Spec.RunStrategy)})
	}
	if g.Meta().Annotations == nil {
		ops = append(ops, patchOp{Op: "add", Path: "/metadata/annotations", Value: map[string]string{}})
	}
	for _, k := range annotations {
		if v, ok := want.Annotations[k]; ok {
			ops = append(ops, patchOp{Op: "add", Path: "/metadata/annotations/" + jsonPointerEscape(k), Value: v})
		} else if _, had := g.Meta().Annotations[k]; had {
			ops = append(ops, patchOp{Op: "remove", Path: "/metadata/annotations/" + jsonPointerEscape(k)})
		}
	}
	if g.Meta().Labels == nil {
		ops = append(ops, patchOp{Op: "add", Path: "/metadata/labels", Value: map[string]string{}})
	}
	for k, v := range want.Labels {
		if g.Meta().Labels[k] != v {
			ops = append(ops, patchOp{Op: "add", Path: "/metadata/labels/" + jsonPointerEscape(k), Value: v})
		}
	}
	out, err := c.jsonPatchVM(ctx, g, ops)
	if err != nil {
		// A failed test is the VM changing under the write; any other
		// refusal (a webhook's, as a 422 too) is the answer.
		if apierrors.IsConflict(err) || patchTestFailed(err) {
			return nil, fmt.Errorf("%w: %v", ErrModified, err)
		}
		return nil, err
	}
	c.cacheVM(out)
	return out, nil
}

// jsonPatchVM applies a JSON patch to g's VM as the caller.
func (c *Cluster) jsonPatchVM(ctx context.Context, g Guest, ops []patchOp) (*kubevirtv1.VirtualMachine, error) {
	body, err := json.Marshal(ops)
	if err != nil {
		return nil, fmt.Errorf("encoding patch: %w", err)
	}
	return c.as(ctx).kv.KubevirtV1().VirtualMachines(g.Namespace()).Patch(ctx, g.Name(), types.JSONPatchType, body, metav1.PatchOptions{})
}

// cacheVM puts a VM the apiserver just answered to an update into the
// cache, so that the client's next call reads its own write.
func (c *Cluster) cacheVM(vm *kubevirtv1.VirtualMachine) { c.vms.put(vm, false) }

// ErrModified means the VM changed between read and write.
//
//lint:ignore ST1005 PVE's own words, which clients show and match.
var ErrModified = errors.New("detected modified configuration - file changed by other user? Try again.")

// ResizePVC grows a claim's storage request.
func (c *Cluster) ResizePVC(ctx context.Context, ns, name string, bytes int64) error {
	body := fmt.Sprintf(`{"spec":{"resources":{"requests":{"storage":%q}}}}`, resource.NewQuantity(bytes, resource.BinarySI).String())
	_, err := c.as(ctx).kube.CoreV1().PersistentVolumeClaims(ns).Patch(ctx, name, types.MergePatchType, []byte(body), metav1.PatchOptions{})
	return err
}

// ApplySecret creates or replaces a Secret owned by the VM, so that it goes
// when the VM goes.
func (c *Cluster) ApplySecret(ctx context.Context, vm *kubevirtv1.VirtualMachine, name string, data map[string][]byte) error {
	ctrl := true
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: vm.Namespace,
			Labels:          map[string]string{"app.kubernetes.io/managed-by": "caddy-proxmox"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: vm.Name, UID: vm.UID, Controller: &ctrl}},
		},
		Data: data,
	}
	secrets := c.as(ctx).kube.CoreV1().Secrets(vm.Namespace)
	cur, err := secrets.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = secrets.Create(ctx, s, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	cur.Data = data
	cur.OwnerReferences = s.OwnerReferences
	_, err = secrets.Update(ctx, cur, metav1.UpdateOptions{})
	return err
}

// Secret reads a Secret (direct read; secrets are never cached).
func (c *Cluster) Secret(ctx context.Context, ns, name string) (*corev1.Secret, error) {
	return c.as(ctx).kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
}
