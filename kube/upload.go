package kube

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	uploadv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/upload/v1beta1"
)

// UploadProxyConfig says how the plugin reaches CDI's upload proxy
// (cdi-uploadproxy), which takes the bytes of an upload DataVolume.
type UploadProxyConfig struct {
	// URL is the proxy's base URL (https://host[:port]); the upload path
	// is appended.
	URL string
	// Client trusts the proxy's certificate; nil: the system's roots plus
	// CDI's upload proxy CA when the cluster publishes it.
	Client *http.Client
}

// CDI's defaults for finding the upload proxy inside the cluster: its
// Service, and the ConfigMap with the CA that signs its certificate (CDI
// pkg/operator: cdi-uploadproxy, cdi-uploadproxy-signer-bundle).
const (
	cdiNamespace          = "cdi"
	uploadProxyService    = "https://cdi-uploadproxy." + cdiNamespace + ".svc"
	uploadProxySignerCM   = "cdi-uploadproxy-signer-bundle"
	uploadProxySignerKey  = "ca-bundle.crt"
	uploadPathSync        = "/v1beta1/upload"
	uploadReadyPoll       = 200 * time.Millisecond
	uploadProxyTLSTimeout = 30 * time.Second
)

// ErrUploadNotReady is returned by Upload when CDI did not get ready for
// the data in time.
var ErrUploadNotReady = errors.New("CDI's upload server did not become ready")

// uploadProxy caches the resolved UploadProxyConfig.
type uploadProxy struct {
	mu  sync.Mutex
	cfg *UploadProxyConfig
}

// uploadProxy returns where uploads go: Options.UploadProxy, else what CDI
// tells (CDIConfig's uploadProxyURLOverride or uploadProxyURL, as virtctl
// asks), else CDI's Service in the cluster; trusted: the system's roots
// plus CDI's upload proxy CA bundle when the plugin may read it. Asked
// once, as the plugin (the caller's rights are checked by the token
// request).
func (c *Cluster) uploadProxy(ctx context.Context) *UploadProxyConfig {
	c.upload.mu.Lock()
	defer c.upload.mu.Unlock()
	if c.upload.cfg != nil {
		return c.upload.cfg
	}
	cfg := UploadProxyConfig{}
	if o := c.opts.UploadProxy; o != nil {
		cfg = *o
	}
	if cfg.URL == "" {
		cfg.URL = uploadProxyService
		if c.own.cdi != nil {
			if cc, err := c.own.cdi.CdiV1beta1().CDIConfigs().Get(ctx, "config", metav1.GetOptions{}); err == nil {
				switch {
				case cc.Spec.UploadProxyURLOverride != nil && *cc.Spec.UploadProxyURLOverride != "":
					cfg.URL = *cc.Spec.UploadProxyURLOverride
				case cc.Status.UploadProxyURL != nil && *cc.Status.UploadProxyURL != "":
					cfg.URL = *cc.Status.UploadProxyURL
				}
			}
		}
		if !strings.Contains(cfg.URL, "://") {
			cfg.URL = "https://" + cfg.URL // CDI publishes a host name
		}
	}
	if cfg.Client == nil {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if cm, err := c.own.kube.CoreV1().ConfigMaps(cdiNamespace).Get(ctx, uploadProxySignerCM, metav1.GetOptions{}); err == nil {
			pool.AppendCertsFromPEM([]byte(cm.Data[uploadProxySignerKey]))
		} else {
			c.logger.Debug("CDI's upload proxy CA bundle is not readable; trusting the system's roots", zap.Error(err))
		}
		cfg.Client = &http.Client{Transport: &http.Transport{
			TLSClientConfig:       &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			TLSHandshakeTimeout:   uploadProxyTLSTimeout,
			ResponseHeaderTimeout: 0, // a sync upload answers once CDI has processed the image
			Proxy:                 http.ProxyFromEnvironment,
		}}
	}
	c.upload.cfg = &cfg
	c.logger.Info("uploads go to CDI's upload proxy", zap.String("url", cfg.URL))
	return &cfg
}

// Upload sends body into the claim of the upload DataVolume ns/name (its
// UID uid): it waits until CDI is ready for the data (the DataVolume
// UploadReady, at most wait), asks CDI's API for an upload token as the
// caller (an UploadTokenRequest; a refusal is a denial, IsDenied), then
// POSTs body to CDI's upload proxy and returns once CDI has processed it,
// as virtctl image-upload does. size is body's length, -1 if unknown.
func (c *Cluster) Upload(ctx context.Context, ns, name string, uid types.UID, body io.Reader, size int64, wait time.Duration) error {
	if !c.HasCDI() {
		return ErrNoCDI
	}
	if err := c.waitUploadReady(ctx, ns, name, uid, wait); err != nil {
		return err
	}
	tok, err := c.as(ctx).cdi.UploadV1beta1().UploadTokenRequests(ns).Create(ctx, &uploadv1beta1.UploadTokenRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "token-for-caddy-proxmox"},
		Spec:       uploadv1beta1.UploadTokenRequestSpec{PvcName: name},
	}, metav1.CreateOptions{})
	if apierrors.IsUnauthorized(err) {
		// cdi-apiserver answers a caller it does not authorize with 401.
		err = apierrors.NewForbidden(schema.GroupResource{Group: uploadv1beta1.SchemeGroupVersion.Group, Resource: "uploadtokenrequests"}, name, err)
	}
	if err != nil {
		return err
	}
	proxy := c.uploadProxy(ctx)
	u, err := url.Parse(proxy.URL)
	if err != nil {
		return fmt.Errorf("CDI upload proxy URL %q: %w", proxy.URL, err)
	}
	u.Path = path.Join(u.Path, uploadPathSync)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+tok.Status.Token)
	req.Header.Set("Content-Type", "application/octet-stream")
	req.ContentLength = size
	res, err := proxy.Client.Do(req)
	if err != nil {
		return fmt.Errorf("CDI upload proxy: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(res.Body, 4<<10))
		text := strings.TrimSpace(string(msg))
		if text == "" {
			text = res.Status
		}
		return fmt.Errorf("CDI upload proxy: %s", text)
	}
	return nil
}

// waitUploadReady waits, on the cache, for the DataVolume to take an
// upload; it fails when the DataVolume is replaced, deleted or failed.
func (c *Cluster) waitUploadReady(ctx context.Context, ns, name string, uid types.UID, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		dv := c.DataVolume(ns, name)
		switch {
		case dv == nil || dv.UID != uid:
			if time.Now().After(deadline) || (dv != nil && dv.UID != uid) {
				return fmt.Errorf("DataVolume %s/%s was deleted", ns, name)
			}
		case dv.Status.Phase == cdiv1.UploadReady:
			return nil
		case dv.Status.Phase == cdiv1.Failed || dv.Status.Phase == cdiv1.Succeeded:
			return fmt.Errorf("DataVolume %s/%s is %s, not waiting for an upload", ns, name, dv.Status.Phase)
		case dv.Status.Phase == cdiv1.WaitForFirstConsumer || dv.Status.Phase == cdiv1.PendingPopulation:
			return fmt.Errorf("cannot upload to DataVolume %s/%s in %s phase: its claim is not bound", ns, name, dv.Status.Phase)
		}
		if time.Now().After(deadline) {
			phase := "not found"
			if dv != nil {
				phase = string(dv.Status.Phase)
			}
			return fmt.Errorf("%w within %s (DataVolume %s/%s: %s)", ErrUploadNotReady, wait, ns, name, phase)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(uploadReadyPoll):
		}
	}
}
