// Command controller runs CDI v1.64.0's controllers the way
// cmd/cdi-controller wires them, out of a pod: the same controllers from
// CDI's own packages, built with the same arguments and in the same order,
// under one controller-runtime manager with leader election in CDI's
// namespace. cmd/cdi-controller itself cannot run more than once per host
// outside a container: it binds its metrics server to the fixed port :8443
// and reads the clone token keys from /var/run/cdi/token/keys. Here those
// are flags (-metrics-bind-address, default off; -token-key-dir); the
// container images and certificate paths come from the same environment
// variables as in CDI's Deployment.
package main

import (
	"crypto/rsa"
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kelseyhightower/envconfig"
	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v6/apis/volumesnapshot/v1"
	ocpconfigv1 "github.com/openshift/api/config/v1"
	imagev1 "github.com/openshift/api/image/v1"
	routev1 "github.com/openshift/api/route/v1"
	"go.uber.org/zap/zapcore"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	extv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/manager/signals"
	"sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	forklift "kubevirt.io/containerized-data-importer-api/pkg/apis/forklift/v1beta1"
	"kubevirt.io/containerized-data-importer/pkg/common"
	"kubevirt.io/containerized-data-importer/pkg/controller"
	dvc "kubevirt.io/containerized-data-importer/pkg/controller/datavolume"
	"kubevirt.io/containerized-data-importer/pkg/controller/populators"
	"kubevirt.io/containerized-data-importer/pkg/controller/transfer"
	metrics "kubevirt.io/containerized-data-importer/pkg/monitoring/metrics/cdi-controller"
	"kubevirt.io/containerized-data-importer/pkg/util"
	"kubevirt.io/containerized-data-importer/pkg/util/cert"
	"kubevirt.io/containerized-data-importer/pkg/util/cert/fetcher"
	"kubevirt.io/containerized-data-importer/pkg/util/cert/generator"
)

// certEnvs are cmd/cdi-controller's ControllerEnvs (same variables, same
// defaults).
type certEnvs struct {
	UploadServerKeyFile           string `default:"/var/run/certs/cdi-uploadserver-signer/tls.key" split_words:"true"`
	UploadServerCertFile          string `default:"/var/run/certs/cdi-uploadserver-signer/tls.crt" split_words:"true"`
	UploadClientKeyFile           string `default:"/var/run/certs/cdi-uploadserver-client-signer/tls.key" split_words:"true"`
	UploadClientCertFile          string `default:"/var/run/certs/cdi-uploadserver-client-signer/tls.crt" split_words:"true"`
	UploadServerCaBundleConfigMap string `default:"cdi-uploadserver-signer-bundle" split_words:"true"`
	UploadClientCaBundleConfigMap string `default:"cdi-uploadserver-client-signer-bundle" split_words:"true"`
}

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of CDI's controller service account")
	metricsAddr := flag.String("metrics-bind-address", "0", "metrics server address (cdi-controller: :8443); 0 turns it off")
	keyDir := flag.String("token-key-dir", controller.TokenKeyDir, "folder with id_rsa and id_rsa.pub, the cdi-api-signing-key secret")
	klog.InitFlags(nil)
	flag.Parse()
	verbose := "1"
	if f := flag.Lookup("v"); f != nil && f.Value.String() != "0" {
		verbose = f.Value.String()
	}
	if err := run(*kubeconfig, *metricsAddr, *keyDir, verbose); err != nil {
		klog.Errorf("cdi-controller: %v", err)
		klog.Flush()
		os.Exit(1)
	}
}

func run(kubeconfig, metricsAddr, keyDir, verbose string) error {
	images := map[string]string{}
	for _, name := range []string{"IMPORTER_IMAGE", "CLONER_IMAGE", "UPLOADSERVER_IMAGE", "OVIRT_POPULATOR_IMAGE", "UPLOADPROXY_SERVICE"} {
		if images[name] = os.Getenv(name); images[name] == "" {
			return fmt.Errorf("environment variable %q undefined", name)
		}
	}
	pullPolicy := common.DefaultPullPolicy
	if pp := os.Getenv(common.PullPolicy); pp != "" {
		pullPolicy = pp
	}
	installerLabels := map[string]string{}
	if v := os.Getenv(common.InstallerPartOfLabel); v != "" {
		installerLabels[common.AppKubernetesPartOfLabel] = v
	}
	if v := os.Getenv(common.InstallerVersionLabel); v != "" {
		installerLabels[common.AppKubernetesVersionLabel] = v
	}
	var envs certEnvs
	if err := envconfig.Process("", &envs); err != nil {
		return err
	}
	logf.SetLogger(zap.New(zap.Level(zapcore.Level(-1))))
	log := logf.Log.WithName("controller")
	if err := metrics.SetupMetrics(); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	pub, priv, err := tokenKeys(keyDir)
	if err != nil {
		return err
	}

	namespace := util.GetNamespace()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	k8s, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, cdiv1.AddToScheme, extv1.AddToScheme, snapshotv1.AddToScheme,
		forklift.AddToScheme, imagev1.Install, ocpconfigv1.Install, routev1.Install,
	} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	// Not OpenShift: cmd/cdi-controller adds Routes to the namespaced
	// cache only there.
	inCDI := cache.ByObject{Field: fields.Set{"metadata.namespace": namespace}.AsSelector()}
	mgr, err := manager.New(cfg, manager.Options{
		LeaderElection:             true,
		LeaderElectionNamespace:    namespace,
		LeaderElectionID:           "cdi-controller-leader-election-helper",
		LeaderElectionResourceLock: "leases",
		Scheme:                     scheme,
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&networkingv1.Ingress{}: inCDI, &batchv1.CronJob{}: inCDI, &batchv1.Job{}: inCDI,
			&corev1.ConfigMap{}: inCDI, &corev1.Secret{}: inCDI,
		}},
		Metrics: server.Options{BindAddress: metricsAddr, SecureServing: true,
			TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}},
	})
	if err != nil {
		return err
	}

	uploadClientCertGenerator := &generator.FetchCertGenerator{Fetcher: &fetcher.FileCertFetcher{
		KeyFileName: envs.UploadClientKeyFile, CertFileName: envs.UploadClientCertFile}}
	uploadServerBundleFetcher := &fetcher.ConfigMapCertBundleFetcher{
		Name: envs.UploadServerCaBundleConfigMap, Client: k8s.CoreV1().ConfigMaps(namespace)}
	uploadServerCertGenerator := &generator.FetchCertGenerator{Fetcher: &fetcher.FileCertFetcher{
		KeyFileName: envs.UploadServerKeyFile, CertFileName: envs.UploadServerCertFile}}
	uploadClientBundleFetcher := &fetcher.ConfigMapCertBundleFetcher{
		Name: envs.UploadClientCaBundleConfigMap, Client: k8s.CoreV1().ConfigMaps(namespace)}

	ctx := signals.SetupSignalHandler()
	importer, cloner := images["IMPORTER_IMAGE"], images["CLONER_IMAGE"]
	steps := []struct {
		name string
		fn   func() error
	}{
		{"config controller", func() error {
			_, err := controller.NewConfigController(mgr, log, images["UPLOADPROXY_SERVICE"], common.ConfigName, installerLabels)
			return err
		}},
		{"storage profile controller", func() error {
			_, err := controller.NewStorageProfileController(mgr, log, installerLabels)
			return err
		}},
		{"shared indexes", func() error { return dvc.CreateCommonIndexes(mgr) }},
		{"datavolume import controller", func() error {
			_, err := dvc.NewImportController(ctx, mgr, log, installerLabels)
			return err
		}},
		{"datavolume upload controller", func() error {
			_, err := dvc.NewUploadController(ctx, mgr, log, installerLabels)
			return err
		}},
		{"datavolume pvc clone controller", func() error {
			_, err := dvc.NewPvcCloneController(ctx, mgr, log, cloner, importer, pullPolicy, pub, priv, installerLabels)
			return err
		}},
		{"datavolume snapshot clone controller", func() error {
			_, err := dvc.NewSnapshotCloneController(ctx, mgr, log, cloner, importer, pullPolicy, pub, priv, installerLabels)
			return err
		}},
		{"datavolume external-population controller", func() error {
			_, err := dvc.NewPopulatorController(ctx, mgr, log, installerLabels)
			return err
		}},
		{"import controller", func() error {
			_, err := controller.NewImportController(mgr, log, importer, pullPolicy, verbose, installerLabels)
			return err
		}},
		{"clone controller", func() error {
			_, err := controller.NewCloneController(mgr, log, cloner, pullPolicy, verbose, uploadClientCertGenerator,
				uploadServerBundleFetcher, pub, installerLabels)
			return err
		}},
		{"upload controller", func() error {
			_, err := controller.NewUploadController(mgr, log, images["UPLOADSERVER_IMAGE"], pullPolicy, verbose,
				uploadServerCertGenerator, uploadClientBundleFetcher, installerLabels)
			return err
		}},
		{"transfer controller", func() error {
			_, err := transfer.NewObjectTransferController(mgr, log, installerLabels)
			return err
		}},
		{"dataimportcron controller", func() error {
			_, err := controller.NewDataImportCronController(mgr, log, importer, pullPolicy, installerLabels)
			return err
		}},
		{"datasource controller", func() error {
			_, err := controller.NewDataSourceController(mgr, log, installerLabels)
			return err
		}},
		{"populator indexes", func() error { return populators.CreateCommonPopulatorIndexes(mgr) }},
		{"import populator", func() error {
			_, err := populators.NewImportPopulator(ctx, mgr, log, installerLabels)
			return err
		}},
		{"upload populator", func() error {
			_, err := populators.NewUploadPopulator(ctx, mgr, log, installerLabels)
			return err
		}},
		{"clone populator", func() error {
			_, err := populators.NewClonePopulator(ctx, mgr, log, cloner, pullPolicy, installerLabels, pub)
			return err
		}},
		{"forklift populator", func() error {
			_, err := populators.NewForkliftPopulator(ctx, mgr, log, importer, images["OVIRT_POPULATOR_IMAGE"], installerLabels)
			return err
		}},
	}
	for _, s := range steps {
		if err := s.fn(); err != nil {
			return fmt.Errorf("set up %s: %w", s.name, err)
		}
	}
	klog.V(1).Infoln("created cdi controllers")
	return mgr.Start(ctx)
}

// tokenKeys reads the key pair of the cdi-api-signing-key secret, which
// CDI's operator mounts at controller.TokenKeyDir.
func tokenKeys(dir string) (*rsa.PublicKey, *rsa.PrivateKey, error) {
	b, err := os.ReadFile(filepath.Join(dir, "id_rsa.pub"))
	if err != nil {
		return nil, nil, err
	}
	pub, err := controller.DecodePublicKey(b)
	if err != nil {
		return nil, nil, fmt.Errorf("decode public key: %w", err)
	}
	if b, err = os.ReadFile(filepath.Join(dir, "id_rsa")); err != nil {
		return nil, nil, err
	}
	obj, err := cert.ParsePrivateKeyPEM(b)
	if err != nil {
		return nil, nil, fmt.Errorf("decode private key: %w", err)
	}
	priv, ok := obj.(*rsa.PrivateKey)
	if !ok {
		return nil, nil, fmt.Errorf("private key is %T, not RSA", obj)
	}
	return pub, priv, nil
}
