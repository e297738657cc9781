package kube

import (
	"context"
	"errors"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// cdiDefaultOverhead is CDI's default filesystem overhead
// (pkg/common DefaultGlobalOverhead), assumed when CDIConfig exists but
// cannot be read.
const cdiDefaultOverhead = 0.06

// ClaimGrowth is what growing a disk's claim asked of Kubernetes.
type ClaimGrowth struct {
	// Request is the claim's storage request for the new disk size;
	// Current what it asked before. Request <= Current: it already had
	// room and was left alone.
	Request, Current int64
	// Filesystem: a Filesystem-mode claim, which CDI inflates by
	// Overhead (a fraction) for the filesystem holding the disk image.
	Filesystem bool
	Overhead   float64
}

// Grown tells whether the claim's request was raised.
func (g ClaimGrowth) Grown() bool { return g.Request > g.Current }

// GrowClaim grows the claim ns/name so that it holds a disk of diskBytes
// as CDI sizes one: a Filesystem-mode claim of a spec.storage DataVolume
// asks for the disk inflated by CDI's filesystem overhead (so a grow
// smaller than the overhead asks for no more than the claim has, and is
// left alone: Kubernetes refuses a request below the capacity), a Block
// one for the disk itself. A claim not created yet returns NotFound (its
// DataVolume creates it at the new size).
func (c *Cluster) GrowClaim(ctx context.Context, ns, name string, diskBytes int64) (ClaimGrowth, error) {
	pvc, err := c.as(ctx).kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return ClaimGrowth{}, err
	}
	g := ClaimGrowth{Filesystem: pvc.Spec.VolumeMode == nil || *pvc.Spec.VolumeMode == corev1.PersistentVolumeFilesystem}
	if g.Filesystem {
		g.Overhead = c.filesystemOverhead(ctx, pvc.Spec.StorageClassName)
	}
	g.Request = translate.ClaimRequest(diskBytes, g.Overhead, g.Filesystem)
	if q, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; ok {
		g.Current = q.Value()
	}
	if q, ok := pvc.Status.Capacity[corev1.ResourceStorage]; ok && q.Value() > g.Current {
		g.Current = q.Value()
	}
	if !g.Grown() {
		return g, nil
	}
	return g, c.ResizePVC(ctx, ns, name, g.Request)
}

// filesystemOverhead is CDI's filesystem overhead for a StorageClass:
// CDIConfig status.filesystemOverhead's for the class, else its global
// one (pkg/controller/common GetFilesystemOverheadForStorageClass); none
// without a CDIConfig, as CDI.
func (c *Cluster) filesystemOverhead(ctx context.Context, class *string) float64 {
	if c.own.cdi == nil {
		return 0
	}
	cfg, err := c.own.cdi.CdiV1beta1().CDIConfigs().Get(ctx, "config", metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return 0
	case err != nil:
		return cdiDefaultOverhead
	}
	fo := cfg.Status.FilesystemOverhead
	if fo == nil {
		return 0
	}
	p := fo.Global
	if class != nil {
		if v, ok := fo.StorageClass[*class]; ok {
			p = v
		}
	}
	f, err := strconv.ParseFloat(string(p), 64)
	if err != nil || f < 0 || f >= 1 {
		return cdiDefaultOverhead
	}
	return f
}

// FilesystemOverhead is CDI's filesystem overhead (a fraction) for the
// claims of StorageClass class (filesystemOverhead): what a
// Filesystem-mode claim of a spec.storage DataVolume holds besides its
// disk.
func (c *Cluster) FilesystemOverhead(ctx context.Context, class *string) float64 {
	return c.filesystemOverhead(ctx, class)
}

// GateExpandDisks is KubeVirt's feature gate that lets a guest see its
// disk grow (Alpha in v1.8, off unless the KubeVirt CR enables it).
const GateExpandDisks = "ExpandDisks"

// errNoKubeVirtCR: no KubeVirt CR to read the feature gates from.
var errNoKubeVirtCR = errors.New("no KubeVirt CR found")

// FeatureGate tells whether the KubeVirt CR enables gate
// (spec.configuration.developerConfiguration.featureGates), or why it
// cannot tell.
func (c *Cluster) FeatureGate(ctx context.Context, gate string) (bool, error) {
	l, err := c.own.kv.KubevirtV1().KubeVirts(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, err
	}
	if len(l.Items) == 0 {
		return false, errNoKubeVirtCR
	}
	for _, kv := range l.Items {
		if dev := kv.Spec.Configuration.DeveloperConfiguration; dev != nil && slices.Contains(dev.FeatureGates, gate) {
			return true, nil
		}
	}
	return false, nil
}
