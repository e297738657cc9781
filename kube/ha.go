package kube

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// SetHA makes g's VM an HA resource with config cfg (nil: no longer one),
// as the caller: the config annotation and the run strategy of its
// requested state (translate.HARunStrategy; Manual without HA), in one
// write guarded by the VM's UID and resourceVersion (ErrModified when it
// changed).
func (c *Cluster) SetHA(ctx context.Context, g Guest, cfg *translate.HAConfig) (*kubevirtv1.VirtualMachine, error) {
	rs := kubevirtv1.RunStrategyManual
	ops := []patchOp{
		{Op: "test", Path: "/metadata/uid", Value: string(g.Meta().UID)},
		{Op: "test", Path: "/metadata/resourceVersion", Value: g.Meta().ResourceVersion},
	}
	key := "/metadata/annotations/" + jsonPointerEscape(translate.AnnotationHA)
	switch {
	case cfg != nil:
		rs = translate.HARunStrategy(cfg.State)
		if g.Meta().Annotations == nil {
			ops = append(ops, patchOp{Op: "add", Path: "/metadata/annotations", Value: map[string]string{}})
		}
		ops = append(ops, patchOp{Op: "add", Path: key, Value: cfg.Encode()})
	case g.Meta().Annotations[translate.AnnotationHA] != "":
		ops = append(ops, patchOp{Op: "remove", Path: key})
	}
	ops = append(ops, patchOp{Op: "add", Path: "/spec/runStrategy", Value: string(rs)})
	if g.Meta().Spec.Running != nil {
		ops = append(ops, patchOp{Op: "remove", Path: "/spec/running"})
	}
	out, err := c.jsonPatchVM(ctx, g, ops)
	if err != nil {
		return nil, modified(err)
	}
	c.cacheVM(out)
	return out, nil
}

// modified turns a failed guarded write into ErrModified.
func modified(err error) error {
	if apierrors.IsInvalid(err) || apierrors.IsConflict(err) {
		return fmt.Errorf("%w: %v", ErrModified, err)
	}
	return err
}

// HAResources are the guests that are HA resources, by vmid, with their
// config.
func (c *Cluster) HAResources() []HAGuest {
	var out []HAGuest
	for _, g := range c.Guests() {
		if cfg, ok := translate.HAConfigOf(g.Meta()); ok {
			out = append(out, HAGuest{Guest: g, Config: cfg})
		}
	}
	return out
}

// HAGuest is a guest that is an HA resource.
type HAGuest struct {
	Guest
	Config translate.HAConfig
}
