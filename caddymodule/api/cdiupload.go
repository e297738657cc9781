package api

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
)

// UploadProxyConfig says where CDI's upload proxy (cdi-uploadproxy) takes
// uploads. Without it the plugin asks the cluster: CDIConfig's
// uploadProxyURLOverride or uploadProxyURL (as virtctl does), else the
// Service https://cdi-uploadproxy.cdi.svc, trusting the system's roots
// plus CDI's ConfigMap cdi/cdi-uploadproxy-signer-bundle.
type UploadProxyConfig struct {
	// URL is the proxy's base URL, https://host[:port].
	URL string `json:"url,omitempty"`
	// CAFile is a PEM file of the CA that signed the proxy's certificate,
	// trusted next to the system's roots.
	CAFile string `json:"ca_file,omitempty"`
}

func (u *UploadProxyConfig) validate() error {
	if u == nil {
		return nil
	}
	p, err := url.Parse(u.URL)
	if err != nil || p.Scheme != "https" || p.Host == "" {
		return fmt.Errorf("proxmox_api: cdi_upload_proxy %q must be an https URL (CDI's upload proxy serves TLS)", u.URL)
	}
	return nil
}

// key tells connections apart.
func (u *UploadProxyConfig) key() string {
	if u == nil {
		return ""
	}
	return u.URL + " " + u.CAFile
}

// kube is the proxy as the cluster connection uses it.
func (u *UploadProxyConfig) kube() (*kube.UploadProxyConfig, error) {
	if u == nil {
		return nil, nil
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if u.CAFile != "" {
		pem, err := os.ReadFile(u.CAFile)
		if err != nil {
			return nil, fmt.Errorf("cdi_upload_proxy ca_file: %w", err)
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("cdi_upload_proxy ca_file: no PEM certificate in " + u.CAFile)
		}
	}
	return &kube.UploadProxyConfig{URL: u.URL, Client: &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		Proxy:           http.ProxyFromEnvironment,
	}}}, nil
}

// unmarshal reads `cdi_upload_proxy <url> { ca_file <path> }`.
func (u *UploadProxyConfig) unmarshal(d *caddyfile.Dispenser) error {
	if !d.NextArg() {
		return d.ArgErr()
	}
	u.URL = d.Val()
	if d.NextArg() {
		return d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch d.Val() {
		case "ca_file":
			if !d.NextArg() {
				return d.ArgErr()
			}
			u.CAFile = d.Val()
			if d.NextArg() {
				return d.ArgErr()
			}
		default:
			return d.Errf("cdi_upload_proxy: unknown option '%s'", d.Val())
		}
	}
	return nil
}
