package kube

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	cdiclient "kubevirt.io/client-go/containerizeddataimporter"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/caddy-proxmox/caddy-proxmox/internal/realcluster"
	"github.com/caddy-proxmox/caddy-proxmox/testenv"
)

// TestStateCopyFailureOnCDI: CDI's own controller reports a state copy
// whose source claim is gone as stateDataVolumeFailure reads it, so that
// the clone task ends with CDI's words instead of waiting for its
// timeout.
func TestStateCopyFailureOnCDI(t *testing.T) {
	env := testenv.StartT(t, realcluster.Options())
	ctx := context.Background()
	cdi, err := cdiclient.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	sc := "local-path"
	dv := &cdiv1.DataVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "persistent-state-for-copy", Namespace: "default"},
		Spec: cdiv1.DataVolumeSpec{
			Source: &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "default", Name: "persistent-state-for-gone"}},
			PVC: &corev1.PersistentVolumeClaimSpec{
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: &sc,
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Mi")}},
			},
		},
	}
	if _, err := cdi.CdiV1beta1().DataVolumes("default").Create(ctx, dv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got string
	var last *cdiv1.DataVolume
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		last, err = cdi.CdiV1beta1().DataVolumes("default").Get(ctx, dv.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		got = stateDataVolumeFailure(last)
		return got != "", nil
	})
	if err != nil {
		t.Fatalf("CDI's status never read as a failure: %+v", last.Status)
	}
	if !strings.Contains(got, "persistent-state-for-gone") || !strings.HasSuffix(got, "("+cdiCloneWithoutSource+")") {
		t.Errorf("failure %q: want CDI's message naming the source, and its reason", got)
	}
	t.Logf("CDI: %s", got)
}
