package testenv

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	virtv1 "kubevirt.io/api/core/v1"
)

// virtAPI is KubeVirt's virt-api process and the stand-in virt-handler
// behind it.
type virtAPI struct {
	proc        *process
	port        int
	handlerPort int
	handlerSrv  *http.Server
	stopNodes   context.CancelFunc
	nodesDone   chan struct{}
}

// standInControllerBinding lends cluster-admin to the service account the
// stand-in controller (Options.Controller) runs as. It authenticates as
// KubeVirt's virt-controller so that KubeVirt's webhooks treat its VMI
// writes as KubeVirt's own (only KubeVirt's service accounts may change a
// VMI's spec or reserved labels), but it also plays virt-handler, CDI, the
// volume snapshotter and kubelet, whose RBAC is not virt-controller's.
const standInControllerBinding = "testenv:stand-in-controller"

// startVirtAPI installs and starts virt-api as virt-operator would run
// it, and returns once its webhooks admit requests and its APIServices are
// Available.
func (e *Env) startVirtAPI(ctx context.Context, m *kubevirtManifests) error {
	if err := ensureKubeVirtCR(ctx, e.directDynamic, e.opts.FeatureGates); err != nil {
		return err
	}
	kubeconfig, err := e.serviceAccountKubeconfig(ctx, VirtAPIServiceAccount)
	if err != nil {
		return err
	}
	certs, err := e.virtAPICerts()
	if err != nil {
		return err
	}
	if _, err := e.DirectKube.CoreV1().ConfigMaps(KubeVirtNamespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kubevirt-ca", Namespace: KubeVirtNamespace},
		Data:       map[string]string{"ca-bundle": string(e.pki.kubevirt.pem)},
	}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("testenv: ConfigMap kubevirt-ca: %w", err)
	}

	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	v := &virtAPI{port: ports[0], handlerPort: ports[1]}
	e.virtAPI = v
	if e.VirtHandlerConfig, err = e.ServiceAccountConfig(ctx, KubeVirtNamespace, VirtHandlerServiceAccount); err != nil {
		return err
	}
	if e.opts.NewVirtHandler != nil {
		if err := e.startVirtHandler(ctx, v, e.opts.NewVirtHandler(e)); err != nil {
			return err
		}
	}
	if err := e.runVirtAPI(v, kubeconfig, certs); err != nil {
		return err
	}
	e.VirtAPIURL = "https://127.0.0.1:" + strconv.Itoa(v.port)
	if err := e.waitVirtAPIServing(ctx, v); err != nil {
		return err
	}
	routed, err := routeToLoopback(m.virtAPI, v.port, e.pki.caPEM)
	if err != nil {
		return err
	}
	if err := apply(ctx, e.directDynamic, routed); err != nil {
		return err
	}
	if err := e.waitVirtAPIAdmits(ctx, v); err != nil {
		return err
	}
	if err := e.waitAPIServicesAvailable(ctx, v.proc, routed); err != nil {
		return err
	}
	// virt-operator creates the common instancetypes once virt-api runs,
	// so they pass its webhooks.
	return apply(ctx, e.directDynamic, m.after)
}

// runVirtAPI starts the virt-api process, with the flags its Deployment
// gets from virt-operator, pointed at this Env.
func (e *Env) runVirtAPI(v *virtAPI, kubeconfig string, certs virtAPIFiles) error {
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--listen=127.0.0.1",
		"--port=" + strconv.Itoa(v.port),
		"--tls-cert-file=" + certs.servingCert,
		"--tls-key-file=" + certs.servingKey,
		"--handler-cert-file=" + certs.handlerCert,
		"--handler-key-file=" + certs.handlerKey,
		"--console-server-port=" + strconv.Itoa(v.handlerPort),
		"--ca-configmap-name=kubevirt-ca",
	}
	var tee io.Writer
	if envSet(EnvVerbose) {
		tee = os.Stderr
	}
	// virt-api keeps a temp dir of its own ("certsdir"): inside Dir it goes
	// with the Env.
	var err error
	v.proc, err = startProcess("virt-api", filepath.Join(e.BinDir, "virt-api"), args, e.Dir, tee, "TMPDIR="+e.Dir)
	return err
}

// virtAPIFiles are the certificate files virt-api is started with.
type virtAPIFiles struct{ servingCert, servingKey, handlerCert, handlerKey string }

// virtAPICerts issues virt-api's serving certificate (for the webhooks'
// URL and the aggregator, which checks virt-api.kubevirt.svc) and its
// client certificate towards virt-handler (secret
// kubevirt-virt-handler-certs in a real install).
func (e *Env) virtAPICerts() (f virtAPIFiles, err error) {
	// virt-api reloads its certificates on every change in their folder,
	// which must therefore not be Dir, where the logs grow.
	dir := filepath.Join(e.Dir, "virt-api-certs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return f, err
	}
	svc := "virt-api." + KubeVirtNamespace
	f.servingCert, f.servingKey, err = e.pki.ca.signFiles(dir, "virt-api", leaf{
		cn: svc + ".pod.cluster.local", usage: x509.ExtKeyUsageServerAuth,
		dns: []string{"virt-api", svc, svc + ".svc", svc + ".svc.cluster.local", "localhost"},
		ips: []net.IP{net.IPv4(127, 0, 0, 1)},
	})
	if err != nil {
		return f, err
	}
	f.handlerCert, f.handlerKey, err = e.pki.kubevirt.signFiles(dir, "handler-client", leaf{
		cn: "kubevirt.io:system:client:virt-handler", usage: x509.ExtKeyUsageClientAuth,
	})
	return f, err
}

// waitVirtAPIServing waits until virt-api answers on its port; it starts
// serving only once its informers have synced.
func (e *Env) waitVirtAPIServing(ctx context.Context, v *virtAPI) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: e.pki.certPool(), ServerName: "virt-api." + KubeVirtNamespace + ".svc"},
	}}
	defer client.CloseIdleConnections()
	url := e.VirtAPIURL + "/apis/subresources.kubevirt.io/v1/healthz"
	return waitFor(ctx, 100*time.Millisecond, "virt-api "+url, e.procs(v.proc), func(ctx context.Context) (bool, error) {
		return httpOK(ctx, client, url)
	})
}

// waitVirtAPIAdmits waits until kube-apiserver calls KubeVirt's webhooks:
// a dry-run create of a valid VirtualMachine comes back mutated (the
// mutator gives it a firmware UUID) and one naming a disk without a volume
// is denied by the validator.
func (e *Env) waitVirtAPIAdmits(ctx context.Context, v *virtAPI) error {
	vms := e.DirectKubeVirt.KubevirtV1().VirtualMachines(metav1.NamespaceDefault)
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	return waitFor(ctx, 100*time.Millisecond, "KubeVirt's webhooks", e.procs(v.proc), func(ctx context.Context) (bool, error) {
		got, err := vms.Create(ctx, webhookProbeVM(false), dry)
		if err != nil {
			return false, err
		}
		if fw := got.Spec.Template.Spec.Domain.Firmware; fw == nil || fw.UUID == "" {
			return false, fmt.Errorf("dry-run VirtualMachine not mutated yet")
		}
		_, err = vms.Create(ctx, webhookProbeVM(true), dry)
		if !isWebhookDenial(err) {
			return false, fmt.Errorf("invalid dry-run VirtualMachine not denied yet (%v)", err)
		}
		return true, nil
	})
}

// waitAPIServicesAvailable waits until kube-apiserver's aggregator reports
// every APIService among objs (served by server) Available.
func (e *Env) waitAPIServicesAvailable(ctx context.Context, server *process, objs []*unstructured.Unstructured) error {
	for _, o := range objs {
		if o.GetKind() != "APIService" {
			continue
		}
		name := o.GetName()
		err := waitFor(ctx, 100*time.Millisecond, "APIService "+name+" Available", e.procs(server), func(ctx context.Context) (bool, error) {
			cur, err := e.directDynamic.Resource(apiServiceGVR).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			conds, _, _ := unstructured.NestedSlice(cur.Object, "status", "conditions")
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Available" {
					if m["status"] == "True" {
						return true, nil
					}
					return false, fmt.Errorf("%v: %v", m["reason"], m["message"])
				}
			}
			return false, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// procs are the processes whose exit ends a wait: the cluster's and p.
func (e *Env) procs(p ...*process) []*process {
	return append([]*process{e.etcd, e.apiserver}, p...)
}

// serviceAccountKubeconfig writes a kubeconfig for a KubeVirt service
// account with a fresh token, pointing straight at kube-apiserver.
func (e *Env) serviceAccountKubeconfig(ctx context.Context, sa string) (string, error) {
	cfg, err := e.ServiceAccountConfig(ctx, KubeVirtNamespace, sa)
	if err != nil {
		return "", err
	}
	path := filepath.Join(e.Dir, "kubeconfig-sa-"+sa+".yaml")
	user := "system:serviceaccount:" + KubeVirtNamespace + ":" + sa
	return path, writeKubeconfig(path, e.APIServerURL, e.pki.caPEM, user, cfg.BearerToken)
}

// ServiceAccountConfig returns a config straight at kube-apiserver that
// authenticates as service account ns/name with a token from the
// TokenRequest API (valid for a week).
func (e *Env) ServiceAccountConfig(ctx context.Context, ns, name string) (*rest.Config, error) {
	week := int64(7 * 24 * 3600)
	tr, err := e.DirectKube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &week},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("testenv: token for service account %s/%s: %w", ns, name, err)
	}
	cfg := rest.CopyConfig(e.DirectConfig)
	cfg.BearerToken = tr.Status.Token
	cfg.UserAgent = "caddy-proxmox-testenv/" + name
	return cfg, nil
}

// bindStandInController gives the stand-in controller's identity the
// rights of the components it plays (see standInControllerBinding).
func (e *Env) bindStandInController(ctx context.Context) error {
	_, err := e.DirectKube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: standInControllerBinding},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: KubeVirtNamespace,
			Name: VirtControllerServiceAccount}},
	}, metav1.CreateOptions{})
	return ignoreExists(err)
}

// webhookProbeVM is a VirtualMachine for the dry-run creates of
// waitVirtAPIAdmits; invalid names a disk that has no volume.
func webhookProbeVM(invalid bool) *virtv1.VirtualMachine {
	halted := virtv1.RunStrategyHalted
	vm := &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "testenv-webhook-probe"},
		Spec: virtv1.VirtualMachineSpec{
			RunStrategy: &halted,
			Template:    &virtv1.VirtualMachineInstanceTemplateSpec{},
		},
	}
	if invalid {
		vm.Spec.Template.Spec.Domain.Devices.Disks = []virtv1.Disk{{Name: "no-such-volume"}}
	}
	return vm
}
