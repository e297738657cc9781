package testenv

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The real control plane of Options.KubeVirtControllers, as a cluster with
// KubeVirt and CDI installed runs it:
//
//   - kube-scheduler, as user system:kube-scheduler (its bootstrap RBAC);
//   - kube-controller-manager with the controllers a node-less cluster can
//     run (kubeControllers), each as its own service account in
//     kube-system (--use-service-account-credentials), as in a real
//     cluster;
//   - KubeVirt's virt-controller as kubevirt-controller, with the RBAC of
//     KubeVirt's install strategy and nothing more;
//   - CDI's API server (its webhooks and upload.cdi.kubevirt.io) as
//     cdi-apiserver and CDI's controllers as cdi-sa, with the RBAC, CRDs,
//     webhook configurations and APIService of CDI's operator, the CDI CR
//     and the CDIConfig the operator creates.
//
// What needs a node (kubelet, virt-handler, the node-labeller, CSI
// drivers) is Options.Nodes' part.

// Identities of kube-scheduler and kube-controller-manager (static tokens;
// kube-apiserver's bootstrap RBAC binds their roles to these users).
const (
	SchedulerUser         = "system:kube-scheduler"
	ControllerManagerUser = "system:kube-controller-manager"
)

// CDI as CDI's operator installs it.
const (
	// CDINamespace is CDI's install namespace, which CDI's processes out of
	// a pod also assume (util.GetNamespace).
	CDINamespace = "cdi"
	// CDIVersion is the CDI release the test cluster runs.
	CDIVersion = "v1.64.0"
	// Service accounts of CDI's controller and API server.
	CDIControllerServiceAccount = "cdi-sa"
	CDIAPIServerServiceAccount  = "cdi-apiserver"
	// CDIConfigName is the name of the CDIConfig and the CDI CR.
	CDIConfigName = "config"
	cdiCRName     = "cdi"
)

// kubeControllers are kube-controller-manager's controllers that the test
// cluster runs. Not the node lifecycle and taint eviction controllers (the
// stand-in kubelets post no node leases, so every node would be tainted
// unreachable and its pods evicted), nor those for workloads nobody here
// uses.
var kubeControllers = []string{
	"garbage-collector-controller",
	"namespace-controller",
	"serviceaccount-controller",
	"clusterrole-aggregation-controller",
	"persistentvolume-binder-controller",
	"persistentvolume-expander-controller",
	"persistentvolume-protection-controller",
	"persistentvolumeclaim-protection-controller",
	"pod-garbage-collector-controller",
}

// controllers are the processes of the real control plane.
type controllers struct {
	scheduler, controllerManager       *process
	virtController, cdiAPI, cdiManager *process
	virtControllerPort, cdiAPIPort     int
}

func (c *controllers) all() []*process {
	return []*process{c.scheduler, c.controllerManager, c.virtController, c.cdiAPI, c.cdiManager}
}

var (
	cdiGVR       = schema.GroupVersionResource{Group: "cdi.kubevirt.io", Version: "v1beta1", Resource: "cdis"}
	cdiConfigGVR = schema.GroupVersionResource{Group: "cdi.kubevirt.io", Version: "v1beta1", Resource: "cdiconfigs"}
)

// startControllers starts all processes of the real control plane, then
// waits until each serves: virt-controller leads, CDI's webhooks admit and
// its upload API is Available, CDI's config controller has reconciled the
// CDIConfig. virt-api must be running.
func (e *Env) startControllers(ctx context.Context, m *kubevirtManifests) error {
	c := &controllers{}
	e.controllers = c
	var err error
	if c.scheduler, err = e.runKubeComponent("kube-scheduler", SchedulerUser,
		"--leader-elect=false", "--secure-port=0"); err != nil {
		return err
	}
	if c.controllerManager, err = e.runKubeComponent("kube-controller-manager", ControllerManagerUser,
		"--leader-elect=false", "--secure-port=0", "--use-service-account-credentials=true",
		"--controllers="+strings.Join(kubeControllers, ",")); err != nil {
		return err
	}
	if err := e.installCDI(ctx); err != nil {
		return err
	}
	if err := e.runCDIAPIServer(ctx, c); err != nil {
		return err
	}
	if err := e.runCDIController(ctx, c); err != nil {
		return err
	}
	if err := e.runVirtController(ctx, c); err != nil {
		return err
	}
	if err := e.waitCDIAPIServer(ctx, c, m); err != nil {
		return err
	}
	if err := e.waitCDIController(ctx, c); err != nil {
		return err
	}
	return e.waitVirtControllerLeads(ctx, c)
}

// runKubeComponent starts kube-scheduler or kube-controller-manager as
// user with a kubeconfig of its own.
func (e *Env) runKubeComponent(name, user string, args ...string) (*process, error) {
	path := filepath.Join(e.Dir, "kubeconfig-"+name+".yaml")
	if err := writeKubeconfig(path, e.APIServerURL, e.pki.caPEM, user, e.user(user).Token); err != nil {
		return nil, err
	}
	args = append([]string{"--kubeconfig=" + path, "-v=1"}, args...)
	return startProcess(name, filepath.Join(e.BinDir, name), args, e.Dir, e.tee())
}

// tee is where the processes' output is copied besides their log files.
func (e *Env) tee() io.Writer {
	if envSet(EnvVerbose) {
		return os.Stderr
	}
	return nil
}

// installCDI creates what CDI's operator creates besides the manifests:
// the CDI CR (Deployed), the CDIConfig, and the key pair of the
// cdi-api-signing-key secret, with which CDI's API server signs upload
// and clone tokens and CDI's controller checks them.
func (e *Env) installCDI(ctx context.Context) error {
	// CDI's CRD has no status subresource: the status goes with the
	// object.
	cr := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "CDI",
		"metadata": map[string]any{"name": cdiCRName},
		"spec":     map[string]any{"workloads": map[string]any{}},
		"status": map[string]any{"phase": "Deployed", "observedVersion": CDIVersion, "targetVersion": CDIVersion,
			"operatorVersion": CDIVersion},
	}}
	if _, err := e.directDynamic.Resource(cdiGVR).Create(ctx, cr, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("testenv: create CDI CR: %w", err)
	}
	cfg := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "CDIConfig",
		"metadata": map[string]any{"name": CDIConfigName},
		"spec":     map[string]any{},
	}}
	if _, err := e.directDynamic.Resource(cdiConfigGVR).Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("testenv: create CDIConfig: %w", err)
	}

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	keys := map[string][]byte{
		"id_rsa":     pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
		"id_rsa.pub": pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}),
	}
	dir := filepath.Join(e.Dir, "cdi", "token-keys")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for name, b := range keys {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return err
		}
	}
	_, err = e.DirectKube.CoreV1().Secrets(CDINamespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "cdi-api-signing-key", Namespace: CDINamespace,
			Labels: map[string]string{"cdi.kubevirt.io/component": "keystore"}},
		Type: corev1.SecretTypeOpaque,
		Data: keys,
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("testenv: secret cdi-api-signing-key: %w", err)
	}
	return nil
}

// runCDIAPIServer starts CDI's API server with a serving certificate for
// its Service (cdi-api.cdi.svc), on a free port.
func (e *Env) runCDIAPIServer(ctx context.Context, c *controllers) error {
	dir := filepath.Join(e.Dir, "cdi", "apiserver-certs")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	svc := "cdi-api." + CDINamespace
	cert, key, err := e.pki.ca.signFiles(dir, "tls", leaf{cn: svc + ".svc", usage: x509.ExtKeyUsageServerAuth,
		dns: []string{"cdi-api", svc, svc + ".svc", svc + ".svc.cluster.local", "localhost"},
		ips: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		return err
	}
	kubeconfig, err := e.serviceAccountKubeconfigIn(ctx, CDINamespace, CDIAPIServerServiceAccount)
	if err != nil {
		return err
	}
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	c.cdiAPIPort = ports[0]
	c.cdiAPI, err = startProcess("cdi-apiserver", filepath.Join(e.BinDir, "cdi-apiserver"), []string{
		"--kubeconfig=" + kubeconfig, "--listen=127.0.0.1", "--port=" + strconv.Itoa(c.cdiAPIPort),
	}, e.Dir, e.tee(), "CERT_FILE="+cert, "KEY_FILE="+key, "TMPDIR="+e.Dir)
	return err
}

// waitCDIAPIServer waits until CDI's API server answers, routes its
// webhooks and APIService to it, and waits until kube-apiserver calls the
// webhooks and reports the APIService Available.
func (e *Env) waitCDIAPIServer(ctx context.Context, c *controllers, m *kubevirtManifests) error {
	client := e.loopbackClient("cdi-api." + CDINamespace + ".svc")
	defer client.CloseIdleConnections()
	url := "https://127.0.0.1:" + strconv.Itoa(c.cdiAPIPort) + "/healthz"
	err := waitFor(ctx, 100*time.Millisecond, "cdi-apiserver "+url, e.procs(c.cdiAPI), func(ctx context.Context) (bool, error) {
		return httpOK(ctx, client, url)
	})
	if err != nil {
		return err
	}
	routed, err := routeToLoopback(m.cdiAPI, c.cdiAPIPort, e.pki.caPEM)
	if err != nil {
		return err
	}
	if err := apply(ctx, e.directDynamic, routed); err != nil {
		return err
	}
	dvs := e.directDynamic.Resource(schema.GroupVersionResource{Group: "cdi.kubevirt.io", Version: "v1beta1", Resource: "datavolumes"}).
		Namespace(metav1.NamespaceDefault)
	err = waitFor(ctx, 100*time.Millisecond, "CDI's webhooks", e.procs(c.cdiAPI), func(ctx context.Context) (bool, error) {
		// A DataVolume without source and size: CDI's validator denies it.
		_, err := dvs.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
			"metadata": map[string]any{"name": "testenv-webhook-probe"},
			"spec":     map[string]any{"storage": map[string]any{}},
		}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && strings.Contains(err.Error(), "admission webhook") && strings.Contains(err.Error(), "cdi.kubevirt.io") {
			return true, nil
		}
		return false, fmt.Errorf("invalid dry-run DataVolume not denied by CDI yet (%v)", err)
	})
	if err != nil {
		return err
	}
	return e.waitAPIServicesAvailable(ctx, c.cdiAPI, routed)
}

// runCDIController starts CDI's controllers as cdi-sa, with the images and
// certificate paths CDI's Deployment gives them.
func (e *Env) runCDIController(ctx context.Context, c *controllers) error {
	kubeconfig, err := e.serviceAccountKubeconfigIn(ctx, CDINamespace, CDIControllerServiceAccount)
	if err != nil {
		return err
	}
	// The signers of upload server certificates (secrets
	// cdi-uploadserver-signer and cdi-uploadserver-client-signer), and
	// the bundles of their CA certificates (ConfigMaps
	// cdi-uploadserver-signer-bundle and
	// cdi-uploadserver-client-signer-bundle), from which CDI's controller
	// gives an upload server the CA of its clients and a clone source the
	// CA of the upload server it sends to (CDI pkg/operator/resources/cert).
	dir := filepath.Join(e.Dir, "cdi", "upload-signers")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	env := []string{"TMPDIR=" + e.Dir}
	for _, s := range []struct{ prefix, name string }{{"UPLOAD_SERVER", "server"}, {"UPLOAD_CLIENT", "client"}} {
		signer := "cdi-uploadserver-" + s.name + "-signer"
		if s.name == "server" {
			signer = "cdi-uploadserver-signer"
		}
		ca, err := newRSAAuthorityFiles(dir, s.name, signer)
		if err != nil {
			return err
		}
		if err := e.publishCABundle(ctx, signer+"-bundle", ca.cert); err != nil {
			return err
		}
		env = append(env, s.prefix+"_CERT_FILE="+ca.cert, s.prefix+"_KEY_FILE="+ca.key)
	}
	img := func(name string) string { return "quay.io/kubevirt/" + name + ":" + CDIVersion }
	env = append(env,
		"IMPORTER_IMAGE="+img("cdi-importer"), "CLONER_IMAGE="+img("cdi-cloner"),
		"UPLOADSERVER_IMAGE="+img("cdi-uploadserver"), "OVIRT_POPULATOR_IMAGE="+img("cdi-importer"),
		"UPLOADPROXY_SERVICE=cdi-uploadproxy", "PULL_POLICY=IfNotPresent",
		"INSTALLER_PART_OF_LABEL=", "INSTALLER_VERSION_LABEL=")
	c.cdiManager, err = startProcess("cdi-controller", filepath.Join(e.BinDir, "cdi-controller"), []string{
		"--kubeconfig=" + kubeconfig, "--token-key-dir=" + filepath.Join(e.Dir, "cdi", "token-keys"),
	}, e.Dir, e.tee(), env...)
	return err
}

// publishCABundle writes the CA certificate in file to the ConfigMap name
// of CDI's namespace (key ca-bundle.crt), as CDI's operator publishes its
// signers' bundles.
func (e *Env) publishCABundle(ctx context.Context, name, file string) error {
	pemCA, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	_, err = e.DirectKube.CoreV1().ConfigMaps(CDINamespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: CDINamespace},
		Data:       map[string]string{"ca-bundle.crt": string(pemCA)},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("testenv: ConfigMap %s: %w", name, err)
	}
	return nil
}

// waitCDIController waits until CDI's config controller has reconciled the
// CDIConfig (its status carries the filesystem overhead).
func (e *Env) waitCDIController(ctx context.Context, c *controllers) error {
	return waitFor(ctx, 100*time.Millisecond, "CDI's controller (CDIConfig status)", e.procs(c.cdiManager), func(ctx context.Context) (bool, error) {
		cfg, err := e.directDynamic.Resource(cdiConfigGVR).Get(ctx, CDIConfigName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		global, _, _ := unstructured.NestedString(cfg.Object, "status", "filesystemOverhead", "global")
		return global != "", nil
	})
}

// runVirtController starts KubeVirt's virt-controller as virt-operator's
// Deployment does, as kubevirt-controller, listening on a free loopback
// port.
func (e *Env) runVirtController(ctx context.Context, c *controllers) error {
	kubeconfig, err := e.serviceAccountKubeconfig(ctx, VirtControllerServiceAccount)
	if err != nil {
		return err
	}
	dir := filepath.Join(e.Dir, "virt-controller-certs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	cert, key, err := e.pki.ca.signFiles(dir, "tls", e.pki.servingLeaf("virt-controller"))
	if err != nil {
		return err
	}
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	c.virtControllerPort = ports[0]
	c.virtController, err = startProcess("virt-controller", filepath.Join(e.BinDir, "virt-controller"), []string{
		"--kubeconfig=" + kubeconfig,
		"--launcher-image=quay.io/kubevirt/virt-launcher:" + KubeVirtVersion,
		"--exporter-image=quay.io/kubevirt/virt-exportserver:" + KubeVirtVersion,
		"--listen=127.0.0.1", "--port=" + strconv.Itoa(c.virtControllerPort),
		"--prom-cert-file=" + cert, "--prom-key-file=" + key,
	}, e.Dir, e.tee(), "TMPDIR="+e.Dir)
	return err
}

// waitVirtControllerLeads waits until virt-controller holds its leader
// lease and has started its controllers (GET /leader).
func (e *Env) waitVirtControllerLeads(ctx context.Context, c *controllers) error {
	client := e.loopbackClient("localhost")
	defer client.CloseIdleConnections()
	url := "https://127.0.0.1:" + strconv.Itoa(c.virtControllerPort) + "/leader"
	return waitFor(ctx, 200*time.Millisecond, "virt-controller "+url, e.procs(c.virtController), func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		var body struct {
			APIServer struct {
				Leader string `json:"leader"`
			} `json:"apiserver"`
		}
		if err := json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&body); err != nil {
			return false, err
		}
		return body.APIServer.Leader == "true", nil
	})
}

// loopbackClient is an HTTPS client for the environment's processes on
// 127.0.0.1 whose certificates name serverName.
func (e *Env) loopbackClient(serverName string) *http.Client {
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: e.pki.certPool(), ServerName: serverName},
	}}
}

func httpOK(ctx context.Context, client *http.Client, url string) (bool, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := client.Do(req)
	if err != nil {
		return false, err
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("%s: %d %s", url, resp.StatusCode, b)
	}
	return true, nil
}

// serviceAccountKubeconfigIn writes a kubeconfig for service account
// ns/sa with a fresh token, pointing straight at kube-apiserver.
func (e *Env) serviceAccountKubeconfigIn(ctx context.Context, ns, sa string) (string, error) {
	cfg, err := e.ServiceAccountConfig(ctx, ns, sa)
	if err != nil {
		return "", err
	}
	path := filepath.Join(e.Dir, "kubeconfig-sa-"+ns+"-"+sa+".yaml")
	user := "system:serviceaccount:" + ns + ":" + sa
	return path, writeKubeconfig(path, e.APIServerURL, e.pki.caPEM, user, cfg.BearerToken)
}

// rsaFiles are the PEM files of an RSA certificate authority.
type rsaFiles struct{ cert, key string }

// newRSAAuthorityFiles writes a self-signed RSA CA to dir/name.{crt,key}:
// CDI's certificate generator signs with RSA keys only.
func newRSAAuthorityFiles(dir, name, cn string) (rsaFiles, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return rsaFiles{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(), Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return rsaFiles{}, err
	}
	f := rsaFiles{cert: filepath.Join(dir, name+".crt"), key: filepath.Join(dir, name+".key")}
	if err := os.WriteFile(f.cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return f, err
	}
	return f, os.WriteFile(f.key, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600)
}
