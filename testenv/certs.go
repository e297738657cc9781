package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki holds the throw-away certificates of one environment: a CA that
// signs the serving certificates of both kube-apiserver and the front
// proxy (so one CA bundle trusts both), and the service account key pair.
type pki struct {
	caPEM    []byte
	caCert   *x509.Certificate
	caKey    *ecdsa.PrivateKey
	serving  tls.Certificate // for 127.0.0.1 / localhost; used by the proxy
	certFile string          // kube-apiserver --tls-cert-file
	keyFile  string          // kube-apiserver --tls-private-key-file
	saPub    string          // --service-account-key-file
	saKey    string          // --service-account-signing-key-file
}

func newPKI(dir string) (*pki, error) {
	p := &pki{}
	var err error
	if p.caKey, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		return nil, err
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "caddy-proxmox testenv CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, ca, ca, &p.caKey.PublicKey, p.caKey)
	if err != nil {
		return nil, err
	}
	if p.caCert, err = x509.ParseCertificate(der); err != nil {
		return nil, err
	}
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})

	certPEM, keyPEM, err := p.issue(big.NewInt(2), "kube-apiserver")
	if err != nil {
		return nil, err
	}
	p.certFile = filepath.Join(dir, "apiserver.crt")
	p.keyFile = filepath.Join(dir, "apiserver.key")
	if err := os.WriteFile(p.certFile, certPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.keyFile, keyPEM, 0o600); err != nil {
		return nil, err
	}
	proxyCert, proxyKey, err := p.issue(big.NewInt(3), "testenv front proxy")
	if err != nil {
		return nil, err
	}
	if p.serving, err = tls.X509KeyPair(proxyCert, proxyKey); err != nil {
		return nil, err
	}

	// kube-apiserver signs service account tokens with this RSA key.
	sa, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		return nil, err
	}
	p.saPub = filepath.Join(dir, "sa.pub")
	p.saKey = filepath.Join(dir, "sa.key")
	if err := os.WriteFile(p.saPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.saKey, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(sa)}), 0o600); err != nil {
		return nil, err
	}
	return p, nil
}

// issue signs a serving certificate for the loopback addresses and the
// in-cluster names of the kubernetes service.
func (p *pki) issue(serial *big.Int, cn string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.IPv4(10, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("testenv: sign %s certificate: %w", cn, err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

func (p *pki) certPool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(p.caCert)
	return pool
}
