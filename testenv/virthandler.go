package testenv

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// The stand-in virt-handler. virt-api forwards VMI calls that need the
// node (pause, unpause, softreboot, reset, freeze, guest agent queries, the
// console and vnc streams) to the virt-handler Pod on the VMI's node: it
// lists Pods labelled kubevirt.io=virt-handler with spec.nodeName, and
// calls https://<podIP>:<--console-server-port>/v1/namespaces/... with
// mutual TLS under the KubeVirt CA (kubecli.NewVirtHandlerClient,
// pkg/util/tls). testenv gives every Node such a Pod with the address
// 127.0.0.1 and serves Options.NewVirtHandler there, with the certificate
// and the client check of the real one.

// VirtHandlerLabel is the label virt-api finds virt-handler Pods by.
const VirtHandlerLabel = "kubevirt.io"

// startVirtHandler serves h as virt-handler on 127.0.0.1:v.handlerPort and
// keeps a virt-handler Pod on every Node.
func (e *Env) startVirtHandler(ctx context.Context, v *virtAPI, h http.Handler) error {
	certPEM, keyPEM, err := e.pki.kubevirt.sign(leaf{
		cn: "kubevirt.io:system:node:virt-handler", usage: x509.ExtKeyUsageServerAuth,
		dns: []string{"virt-handler", "virt-handler." + KubeVirtNamespace, "virt-handler." + KubeVirtNamespace + ".svc"},
	})
	if err != nil {
		return err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(v.handlerPort)))
	if err != nil {
		return fmt.Errorf("testenv: virt-handler listener: %w", err)
	}
	v.handlerSrv = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         virtHandlerTLS(cert, e.pki.kubevirt.pool()),
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	go func() { _ = v.handlerSrv.ServeTLS(ln, "", "") }()

	nodeCtx, cancel := context.WithCancel(context.Background())
	v.stopNodes = cancel
	v.nodesDone = make(chan struct{})
	synced := make(chan struct{})
	go func() {
		defer close(v.nodesDone)
		e.keepHandlerPods(nodeCtx, synced)
	}()
	select {
	case <-synced:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// virtHandlerTLS is virt-handler's server side of the mutual TLS with
// virt-api (kvtls.SetupTLSForServer with the common name type
// "virt-handler"): a client certificate signed by the KubeVirt CA, for
// client auth, named kubevirt.io:system:client:virt-handler.
func virtHandlerTLS(cert tls.Certificate, kubevirtCA *x509.CertPool) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    kubevirtCA,
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"http/1.1"}, // websockets
		VerifyPeerCertificate: func(raw [][]byte, chains [][]*x509.Certificate) error {
			for _, chain := range chains {
				if len(chain) > 0 && chain[0].Subject.CommonName == "kubevirt.io:system:client:virt-handler" {
					return nil
				}
			}
			return errors.New("common name is invalid")
		},
	}
}

// keepHandlerPods creates a virt-handler Pod for every Node, now and as
// Nodes are added, until ctx ends. It closes synced after the first pass.
func (e *Env) keepHandlerPods(ctx context.Context, synced chan struct{}) {
	factory := informers.NewSharedInformerFactory(e.DirectKube, 0)
	nodes := factory.Core().V1().Nodes().Informer()
	ensure := func(obj any) {
		if n, ok := obj.(*corev1.Node); ok {
			if err := e.ensureHandlerPod(ctx, n.Name); err != nil && ctx.Err() == nil {
				e.logger().Warn("testenv: virt-handler pod", zap.String("node", n.Name), zap.Error(err))
			}
		}
	}
	_, _ = nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: ensure})
	factory.Start(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), nodes.HasSynced)
	for _, obj := range nodes.GetStore().List() {
		ensure(obj)
	}
	close(synced)
	<-ctx.Done()
	factory.Shutdown()
}

// ensureHandlerPod creates the Running virt-handler Pod of node (as the
// DaemonSet and the kubelet would), with the address 127.0.0.1.
func (e *Env) ensureHandlerPod(ctx context.Context, node string) error {
	pods := e.DirectKube.CoreV1().Pods(KubeVirtNamespace)
	// Pod names of a DaemonSet are generated; node names may have dots,
	// which pod names (hostnames) should not.
	h := fnv.New32a()
	h.Write([]byte(node))
	name := fmt.Sprintf("virt-handler-%08x", h.Sum32())
	pod, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: map[string]string{VirtHandlerLabel: "virt-handler", "kubevirt.io/install-strategy-version": KubeVirtVersion},
		},
		Spec: corev1.PodSpec{
			NodeName:           node,
			ServiceAccountName: VirtHandlerServiceAccount,
			Containers: []corev1.Container{{
				Name: "virt-handler", Image: "quay.io/kubevirt/virt-handler:" + KubeVirtVersion,
			}},
		},
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err != nil {
		return err
	}
	now := metav1.Now()
	pod.Status = corev1.PodStatus{
		Phase:     corev1.PodRunning,
		PodIP:     "127.0.0.1",
		PodIPs:    []corev1.PodIP{{IP: "127.0.0.1"}},
		HostIP:    "127.0.0.1",
		StartTime: &now,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
	}
	_, err = pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	return err
}

// stopVirtHandler stops the stand-in and its Pod keeper.
func (v *virtAPI) stopVirtHandler() {
	if v.stopNodes != nil {
		v.stopNodes()
		<-v.nodesDone
	}
	if v.handlerSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := v.handlerSrv.Shutdown(ctx); err != nil {
			_ = v.handlerSrv.Close()
		}
	}
}
