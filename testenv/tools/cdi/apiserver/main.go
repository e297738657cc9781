// Command apiserver runs CDI v1.64.0's API server (its admission webhooks
// and the upload token API, upload.cdi.kubevirt.io) the way
// cmd/cdi-apiserver wires it, out of a pod: CDI's own apiserver package
// with the same arguments. cmd/cdi-apiserver itself always listens on
// 0.0.0.0:8443, which lets only one run per host; here -listen and -port
// choose. The serving certificate comes from the same environment variables
// (CERT_FILE, KEY_FILE) as in CDI's Deployment.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/kelseyhightower/envconfig"
	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v6/apis/volumesnapshot/v1"
	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v6/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/manager/signals"

	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"kubevirt.io/containerized-data-importer/pkg/apiserver"
	cdiclient "kubevirt.io/containerized-data-importer/pkg/client/clientset/versioned"
	"kubevirt.io/containerized-data-importer/pkg/common"
	dvc "kubevirt.io/containerized-data-importer/pkg/controller/datavolume"
	certwatcher "kubevirt.io/containerized-data-importer/pkg/util/cert/watcher"
	cryptowatch "kubevirt.io/containerized-data-importer/pkg/util/tls-crypto-watch"
)

// certEnvs are cmd/cdi-apiserver's APIServerEnvs.
type certEnvs struct {
	CertFile string `default:"/var/run/certs/cdi-apiserver-server-cert/tls.crt" split_words:"true"`
	KeyFile  string `default:"/var/run/certs/cdi-apiserver-server-cert/tls.key" split_words:"true"`
}

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of CDI's apiserver service account")
	listen := flag.String("listen", "0.0.0.0", "address to listen on (cdi-apiserver: 0.0.0.0)")
	port := flag.Uint("port", 8443, "port to listen on (cdi-apiserver: 8443)")
	klog.InitFlags(nil)
	flag.Parse()
	if err := run(*kubeconfig, *listen, *port); err != nil {
		klog.Errorf("cdi-apiserver: %v", err)
		klog.Flush()
		os.Exit(1)
	}
}

func run(kubeconfig, listen string, port uint) error {
	var envs certEnvs
	if err := envconfig.Process("", &envs); err != nil {
		return err
	}
	installerLabels := map[string]string{}
	if v := os.Getenv(common.InstallerPartOfLabel); v != "" {
		installerLabels[common.AppKubernetesPartOfLabel] = v
	}
	if v := os.Getenv(common.InstallerVersionLabel); v != "" {
		installerLabels[common.AppKubernetesVersionLabel] = v
	}
	utilruntime.Must(corev1.AddToScheme(scheme.Scheme))
	utilruntime.Must(cdiv1.AddToScheme(scheme.Scheme))
	utilruntime.Must(snapshotv1.AddToScheme(scheme.Scheme))

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	cl, err := cluster.New(cfg)
	if err != nil {
		return fmt.Errorf("controller-runtime cluster: %w", err)
	}
	if err := cdiv1.AddToScheme(cl.GetScheme()); err != nil {
		return err
	}
	if err := dvc.CreateAvailablePersistentVolumeIndex(cl.GetFieldIndexer()); err != nil {
		return fmt.Errorf("field index: %w", err)
	}
	ctx := signals.SetupSignalHandler()
	authConfigWatcher, err := apiserver.NewAuthConfigWatcher(ctx, client)
	if err != nil {
		return fmt.Errorf("auth config watcher: %w", err)
	}
	cdiClient := cdiclient.NewForConfigOrDie(cfg)
	tlsWatcher, err := cryptowatch.NewCdiConfigTLSWatcher(ctx, cdiClient)
	if err != nil {
		return fmt.Errorf("CDIConfig TLS watcher: %w", err)
	}
	authorizer, err := apiserver.NewAuthorizorFromConfig(cfg, authConfigWatcher)
	if err != nil {
		return fmt.Errorf("authorizer: %w", err)
	}
	certs, err := certwatcher.New(envs.CertFile, envs.KeyFile)
	if err != nil {
		return fmt.Errorf("certificate watcher: %w", err)
	}
	app, err := apiserver.NewCdiAPIServer(listen, port, client, aggregatorclient.NewForConfigOrDie(cfg), cdiClient,
		snapclient.NewForConfigOrDie(cfg), cl.GetClient(), authorizer, authConfigWatcher, tlsWatcher, certs, installerLabels)
	if err != nil {
		return fmt.Errorf("CDI API server: %w", err)
	}
	go func() {
		if err := cl.Start(ctx); err != nil {
			klog.Errorf("cluster failed: %v", err)
		}
	}()
	go func() {
		if err := certs.Start(ctx.Done()); err != nil {
			klog.Errorf("cert watcher failed: %v", err)
		}
	}()
	return app.Start(ctx.Done())
}
