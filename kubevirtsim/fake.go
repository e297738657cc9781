package kubevirtsim

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	k8sscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/testing"
	virtv1 "kubevirt.io/api/core/v1"
	cdiclient "kubevirt.io/client-go/containerizeddataimporter"
	cdifake "kubevirt.io/client-go/containerizeddataimporter/fake"
	cdischeme "kubevirt.io/client-go/containerizeddataimporter/scheme"
	"kubevirt.io/client-go/kubevirt"
	kvfake "kubevirt.io/client-go/kubevirt/fake"
	kvscheme "kubevirt.io/client-go/kubevirt/scheme"
)

// FakeKubeVirtClientset is the KubeVirt clientset returned by NewFakeClients.
// It is the generated fake clientset with API-server semantics (see
// NewFakeClients); the embedded Clientset gives access to Actions() and
// Tracker() (write through the clientset, not the tracker, to keep resource
// versions consistent).
type FakeKubeVirtClientset struct {
	*kvfake.Clientset
}

// IsWatchListSemanticsUnSupported tells client-go reflectors (via
// cache.ToListWatcherWithWatchListSemantics) to use list+watch instead of
// the streaming WatchList protocol, which the fake does not implement.
func (*FakeKubeVirtClientset) IsWatchListSemanticsUnSupported() bool { return true }

// resources of the kubevirt clientset that have a status subresource.
var kubevirtStatusResources = []string{
	"virtualmachines",
	"virtualmachinesnapshots", "virtualmachinesnapshotcontents", "virtualmachinerestores",
	"virtualmachineclones", "virtualmachineexports", "virtualmachinepools",
	"virtualmachineinstancemigrations", "migrationpolicies", "kubevirts",
}

// NewFakeClients returns in-memory clientsets for simulate mode and unit
// tests, seeded with objects (KubeVirt objects go to the KubeVirt clientset,
// everything else to the Kubernetes one):
//
//   - the Kubernetes clientset is client-go's field-managed fake
//     (fake.NewClientset) that also fills in uid and creationTimestamp and
//     honours generateName on create, and whose watches honour selectors;
//   - the KubeVirt clientset is the generated fake with API-server
//     semantics (resourceVersion conflicts, status subresource, finalizers,
//     generation, selectors; see apiServer) whose subresource calls
//     (VirtualMachine(ns).Start/Stop/Restart/Migrate,
//     VirtualMachineInstance(ns).Pause/Unpause/SoftReboot/Reset) are
//     answered with the Subresources semantics of virt-api. Other
//     subresources return 404.
//
// Watches on both fire for every change, including those made by the
// subresource handlers and by a Controller, and never overflow (see
// watchHub). Run a Controller on the two clientsets to get VMIs started and
// stopped.
//
// The fakes record every call (Actions()); a long-running simulation should
// call ClearActions() on both now and then to bound that memory.
//
// CDI objects (DataVolumes, DataSources, ...) among objects are dropped; use
// NewFakeClientsWithCDI for a CDI clientset.
func NewFakeClients(objects ...runtime.Object) (kubernetes.Interface, kubevirt.Interface) {
	k8s, kv, _ := NewFakeClientsWithCDI(objects...)
	return k8s, kv
}

// FakeCDIClientset is the CDI clientset returned by NewFakeClientsWithCDI:
// the generated fake with the same API-server semantics as the KubeVirt one
// (DataVolumes, DataSources etc. have a status subresource).
type FakeCDIClientset struct {
	*cdifake.Clientset
	uploads *UploadProxy
}

// UploadProxy is the simulated cdi-uploadproxy whose tokens the clientset's
// UploadTokenRequests issue.
func (c *FakeCDIClientset) UploadProxy() *UploadProxy { return c.uploads }

// IsWatchListSemanticsUnSupported: see FakeKubeVirtClientset.
func (*FakeCDIClientset) IsWatchListSemanticsUnSupported() bool { return true }

// resources of the CDI clientset that have a status subresource.
var cdiStatusResources = []string{
	"datavolumes", "datasources", "dataimportcrons", "storageprofiles",
	"cdis", "cdiconfigs", "objecttransfers",
}

// NewFakeClientsWithCDI is NewFakeClients plus a fake CDI clientset
// (cdi.kubevirt.io, e.g. DataVolumes), which gets the CDI objects among
// objects. Pass it as Options.CDI to have a Controller play CDI.
func NewFakeClientsWithCDI(objects ...runtime.Object) (kubernetes.Interface, kubevirt.Interface, cdiclient.Interface) {
	var k8sObjects, kvObjects, cdiObjects []runtime.Object
	for _, obj := range objects {
		switch {
		case isCDIObject(obj):
			cdiObjects = append(cdiObjects, obj)
		case isKubeVirtObject(obj):
			kvObjects = append(kvObjects, obj)
		default:
			k8sObjects = append(k8sObjects, obj)
		}
	}

	k8s := k8sfake.NewClientset(k8sObjects...)
	k8s.PrependReactor("create", "*", defaultCreateMeta)
	k8sHub := newWatchHub(k8s.Tracker(), k8sscheme.Scheme, nil, false)
	k8s.PrependReactor("*", "*", k8sHub.writeGate)
	k8s.PrependWatchReactor("*", k8sHub.watch)
	// Access reviews about others: the simulated cluster grants nothing
	// by RBAC (KubeVirt's clone authorization asks about ServiceAccounts).
	k8s.PrependReactor("create", "subjectaccessreviews", func(action testing.Action) (bool, runtime.Object, error) {
		sar, ok := action.(testing.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		if !ok {
			return false, nil, nil
		}
		out := sar.DeepCopy()
		out.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: false}
		return true, out, nil
	})

	// Reactors run while the fake holds its lock, so the subresource
	// handlers work on a second clientset that shares the object tracker
	// (and the emulated API server) but has its own lock.
	outer := kvfake.NewSimpleClientset()
	inner := kvfake.NewSimpleClientset()
	api := newAPIServer(outer.Tracker(), kvscheme.Scheme, kubevirtStatusResources...)
	api.admit = (&admission{tracker: outer.Tracker()}).admit
	for _, obj := range kvObjects {
		if err := api.seed(obj); err != nil {
			panic(fmt.Sprintf("kubevirtsim: seed %T: %v", obj, err))
		}
	}
	api.install(&inner.Fake)
	api.install(&outer.Fake)
	sub := &Subresources{KV: &FakeKubeVirtClientset{inner}}
	outer.PrependReactor("put", "*", subresourceReactor(sub))

	cdi := cdifake.NewSimpleClientset()
	cdiAPI := newAPIServer(cdi.Tracker(), cdischeme.Scheme, cdiStatusResources...)
	for _, obj := range cdiObjects {
		if err := cdiAPI.seed(obj); err != nil {
			panic(fmt.Sprintf("kubevirtsim: seed %T: %v", obj, err))
		}
	}
	cdiAPI.install(&cdi.Fake)
	// UploadTokenRequests are answered by cdi-apiserver, never stored.
	uploads := NewUploadProxy(k8s)
	cdi.PrependReactor("create", "uploadtokenrequests", uploads.tokenReactor)
	return k8s, &FakeKubeVirtClientset{outer}, &FakeCDIClientset{cdi, uploads}
}

func isCDIObject(obj runtime.Object) bool {
	gvks, _, err := cdischeme.Scheme.ObjectKinds(obj)
	return err == nil && len(gvks) > 0 && strings.HasSuffix(gvks[0].Group, "cdi.kubevirt.io")
}

func isKubeVirtObject(obj runtime.Object) bool {
	gvks, _, err := kvscheme.Scheme.ObjectKinds(obj)
	return err == nil && len(gvks) > 0 && strings.HasSuffix(gvks[0].Group, "kubevirt.io")
}

// defaultCreateMeta fills in what the API server sets on create and lets the
// next reactor store the object.
func defaultCreateMeta(action testing.Action) (bool, runtime.Object, error) {
	ca, ok := action.(testing.CreateActionImpl)
	if !ok || ca.GetSubresource() != "" || ca.GetObject() == nil {
		return false, nil, nil
	}
	m, err := meta.Accessor(ca.GetObject())
	if err != nil {
		return false, nil, nil
	}
	if m.GetName() == "" && m.GetGenerateName() != "" {
		m.SetName(m.GetGenerateName() + utilrand.String(5))
	}
	if m.GetUID() == "" {
		m.SetUID(types.UID(uuid.NewString()))
	}
	if ts := m.GetCreationTimestamp(); ts.IsZero() {
		m.SetCreationTimestamp(metav1.NewTime(time.Now().Truncate(time.Second)))
	}
	return false, nil, nil
}

// subresourceReactor answers PUT subresource actions of the fake KubeVirt
// clientset with virt-api's semantics.
func subresourceReactor(sub *Subresources) testing.ReactionFunc {
	return func(action testing.Action) (bool, runtime.Object, error) {
		named, ok := action.(interface{ GetName() string })
		if !ok {
			return false, nil, nil
		}
		ctx := context.Background()
		ns, name := action.GetNamespace(), named.GetName()
		path := action.GetResource().Resource + "/" + action.GetSubresource()
		switch path {
		case "virtualmachines/start":
			return true, nil, sub.Start(ctx, ns, name, putOptions[*virtv1.StartOptions](action))
		case "virtualmachines/stop":
			return true, nil, sub.Stop(ctx, ns, name, putOptions[*virtv1.StopOptions](action))
		case "virtualmachines/restart":
			return true, nil, sub.Restart(ctx, ns, name, putOptions[*virtv1.RestartOptions](action))
		case "virtualmachines/migrate":
			return true, nil, sub.Migrate(ctx, ns, name, putOptions[*virtv1.MigrateOptions](action))
		case "virtualmachineinstances/pause":
			return true, nil, sub.PauseWithOptions(ctx, ns, name, putOptions[*virtv1.PauseOptions](action))
		case "virtualmachineinstances/unpause":
			return true, nil, sub.UnpauseWithOptions(ctx, ns, name, putOptions[*virtv1.UnpauseOptions](action))
		case "virtualmachineinstances/softreboot":
			return true, nil, sub.SoftReboot(ctx, ns, name)
		case "virtualmachineinstances/reset":
			return true, nil, sub.Reset(ctx, ns, name)
		}
		return true, nil, notSimulated(path)
	}
}

func putOptions[T any](action testing.Action) T {
	var zero T
	if a, ok := action.(interface{ GetOptions() T }); ok {
		return a.GetOptions()
	}
	return zero
}

func notSimulated(path string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusNotFound,
		Reason:  metav1.StatusReasonNotFound,
		Message: fmt.Sprintf("the server could not find the requested resource (kubevirtsim does not simulate %q)", path),
	}}
}
